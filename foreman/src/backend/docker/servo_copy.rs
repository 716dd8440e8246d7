//! The servo binary bound into each container from a copy on this host.
//!
//! Docker's storage driver here is fuse-overlayfs: every container's root
//! is its own FUSE mount, so its files have their own inodes and their own
//! page cache. A servo started from the image's `/usr/local/bin/servo`
//! reads its binary and libraries through that mount afresh in every
//! container (readahead requests served by the container's fuse-overlayfs
//! daemon): measured, a seventh of what a one-step task's servo and its
//! FUSE daemon spent.
//!
//! So when the daemon is on this host (the workspace images are, too),
//! the foreman copies the servo out of each image it launches, once per
//! image id, to `<state_dir>/servos/<id>/servo` (root's, read-only) and
//! binds that copy read-only over the image's own: the same bytes at the
//! same path, read from the host's page cache that every container shares.
//! The container is created from the image's id, looked up at each
//! launch (one image inspect), not from its tag, so the binary and the
//! image can never come from two builds: a tag moved by `build-servo`
//! launches the new build with its own servo, copied then.
//!
//! Whatever goes wrong (the image's servo is a link, too big, set-id, not
//! root's; the copy cannot be written) the container runs the image's own
//! binary, as before: a slower start, never a different one.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, bail};
use bollard::Docker;
use bollard::errors::Error as DockerError;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    DownloadFromContainerOptionsBuilder, ListContainersOptionsBuilder,
    RemoveContainerOptionsBuilder,
};
use futures_util::StreamExt;
use tracing::{info, warn};

use super::{DockerOp, remove_container, timed};

/// Where the servo is in every servo image (the image's entrypoint).
pub(crate) const SERVO_PATH: &str = "/usr/local/bin/servo";

/// The label on the container a copy is taken from (never started): the
/// database of the foreman that made it ([`super::pool_db`]), so that a
/// crash in between leaves nothing the next foreman does not remove.
pub(crate) const COPY_LABEL: &str = "saheeli.servo-copy";

/// The largest servo binary copied (the release servo is about 5 MiB).
const MAX_SERVO_BYTES: u64 = 256 << 20;

/// What a servo container runs: its image (the id when a copy is bound),
/// and the copy of the image's servo to bind over its own, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ServoImage {
    pub image: String,
    /// The image as the task or class names it.
    pub named: String,
    pub servo: Option<PathBuf>,
}

impl ServoImage {
    /// The image as named, its own servo: no copy.
    pub fn own(image: &str) -> ServoImage {
        ServoImage {
            image: image.to_string(),
            named: image.to_string(),
            servo: None,
        }
    }
}

/// The copies of one foreman, by image id.
pub(crate) struct ServoCopies {
    docker: Docker,
    /// `<state_dir>/servos`.
    dir: PathBuf,
    /// This foreman's database, for [`COPY_LABEL`].
    db: String,
    /// Image ids whose copy is there, and where.
    copies: Mutex<HashMap<String, PathBuf>>,
    /// Image ids whose servo could not be copied: not tried again.
    refused: Mutex<HashSet<String>>,
    /// One copy made at a time: a burst of launches of a new image makes
    /// it once.
    slow: tokio::sync::Mutex<()>,
}

impl ServoCopies {
    pub fn new(docker: Docker, state_dir: &Path, db: String) -> ServoCopies {
        ServoCopies {
            docker,
            dir: state_dir.join("servos"),
            db,
            copies: Mutex::new(HashMap::new()),
            refused: Mutex::new(HashSet::new()),
            slow: tokio::sync::Mutex::new(()),
        }
    }

    /// What a container of `image` runs now. An image Docker does not
    /// have is returned as named, so that the create fails as it always
    /// did, naming it.
    pub async fn resolve(&self, image: &str) -> ServoImage {
        let Ok(id) = image_id(&self.docker, image).await else {
            return ServoImage::own(image);
        };
        match self.copy_of(&id).await {
            Some(servo) => ServoImage {
                image: id,
                named: image.to_string(),
                servo: Some(servo),
            },
            None => ServoImage::own(image),
        }
    }

    fn known(&self, id: &str) -> Option<PathBuf> {
        self.copies
            .lock()
            .expect("servo copies lock")
            .get(id)
            .cloned()
    }

    /// The copy of image `id`'s servo, made now if it is not there yet.
    async fn copy_of(&self, id: &str) -> Option<PathBuf> {
        if let Some(path) = self.known(id) {
            return Some(path);
        }
        let _one = self.slow.lock().await;
        if let Some(path) = self.known(id) {
            return Some(path);
        }
        if self.refused.lock().expect("servo copies lock").contains(id) {
            return None;
        }
        let path = copy_path(&self.dir, id)?;
        let made = if is_copy(&path) {
            Ok(())
        } else {
            self.take(id, &path).await.inspect(|()| {
                info!(image = %id, copy = %path.display(), "servo copied from its image");
            })
        };
        match made {
            Ok(()) => {
                self.copies
                    .lock()
                    .expect("servo copies lock")
                    .insert(id.to_string(), path.clone());
                Some(path)
            }
            Err(e) => {
                warn!(
                    image = %id,
                    error = %format!("{e:#}"),
                    "the image's servo is not bound from a host copy; containers of this image read their own"
                );
                self.refused
                    .lock()
                    .expect("servo copies lock")
                    .insert(id.to_string());
                None
            }
        }
    }

    /// Copies image `id`'s servo to `path`, through a container made of
    /// the image and never started.
    async fn take(&self, id: &str, path: &Path) -> anyhow::Result<()> {
        let body = ContainerCreateBody {
            image: Some(id.to_string()),
            labels: Some(HashMap::from([(COPY_LABEL.to_string(), self.db.clone())])),
            network_disabled: Some(true),
            host_config: Some(HostConfig {
                network_mode: Some("none".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let tar = timed(DockerOp::CopyServo, async {
            let created = self
                .docker
                .create_container(None, body)
                .await
                .context("creating a container to copy the servo from")?;
            let tar = read_archive(&self.docker, &created.id).await;
            let opts = RemoveContainerOptionsBuilder::default().force(true).build();
            if let Err(e) = self.docker.remove_container(&created.id, Some(opts)).await {
                warn!(error = %e, "the servo copy's container was not removed");
            }
            tar
        })
        .await?;
        let dir = path.parent().expect("a copy's path has a directory");
        tokio::task::spawn_blocking({
            let (root, dir, path) = (self.dir.clone(), dir.to_path_buf(), path.to_path_buf());
            move || write_copy(&root, &dir, &path, &tar)
        })
        .await
        .context("the servo copy's thread panicked")?
    }

    /// Removes what a foreman of this database left: containers a copy
    /// was being taken from, and copies of images Docker no longer has
    /// (no container can be made of those any more).
    pub async fn tidy(&self) {
        let filter = format!("{COPY_LABEL}={}", self.db);
        let filters = HashMap::from([("label", vec![filter.as_str()])]);
        let opts = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        if let Ok(left) = self.docker.list_containers(Some(opts)).await {
            for c in left.into_iter().filter_map(|c| c.id) {
                let _ = remove_container(&self.docker, &c).await;
            }
        }
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(hex) = name.to_str().filter(|h| is_hex_id(h)) else {
                continue;
            };
            let gone = matches!(
                self.docker.inspect_image(&format!("sha256:{hex}")).await,
                Err(DockerError::DockerResponseServerError {
                    status_code: 404,
                    ..
                })
            );
            if gone && let Err(e) = std::fs::remove_dir_all(entry.path()) {
                warn!(copy = %entry.path().display(), error = %e, "an old servo copy was not removed");
            }
        }
    }
}

/// An image's id (`sha256:<hex>`).
async fn image_id(docker: &Docker, image: &str) -> anyhow::Result<String> {
    timed(DockerOp::InspectImage, async {
        docker
            .inspect_image(image)
            .await
            .with_context(|| format!("inspecting image `{image}`"))?
            .id
            .with_context(|| format!("image `{image}` has no id"))
    })
    .await
}

fn is_hex_id(hex: &str) -> bool {
    hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `<dir>/<hex>/servo` for image id `sha256:<hex>`; None for an id of
/// another form (never made into a path).
fn copy_path(dir: &Path, id: &str) -> Option<PathBuf> {
    let hex = id.strip_prefix("sha256:").filter(|h| is_hex_id(h))?;
    Some(dir.join(hex).join("servo"))
}

/// Whether `path` is a copy a foreman made: a regular file (not a link),
/// not empty, ours (the foreman's user), with no other name (a hard link
/// planted there would bind another file into every container).
fn is_copy(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).is_ok_and(|m| {
        m.file_type().is_file() && m.len() > 0 && m.uid() == euid() && m.nlink() == 1
    })
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The archive of the container's servo, read up to its cap.
async fn read_archive(docker: &Docker, container: &str) -> anyhow::Result<Vec<u8>> {
    let opts = DownloadFromContainerOptionsBuilder::default()
        .path(SERVO_PATH)
        .build();
    let mut stream = docker.download_from_container(container, Some(opts));
    let mut tar = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.with_context(|| format!("reading `{SERVO_PATH}` from the image"))?;
        tar.extend_from_slice(&chunk);
        if tar.len() as u64 > MAX_SERVO_BYTES + (64 << 10) {
            bail!("`{SERVO_PATH}` in the image is larger than {MAX_SERVO_BYTES} bytes");
        }
    }
    Ok(tar)
}

/// The servo from its archive: one regular file, root's, no set-id bit,
/// executable, within the cap. Returns its mode and bytes.
fn servo_from(tar: &[u8]) -> anyhow::Result<(u32, Vec<u8>)> {
    let mut archive = tar::Archive::new(tar);
    let mut entries = archive.entries().context("reading the servo's archive")?;
    let mut entry = entries
        .next()
        .context("the servo's archive is empty")?
        .context("reading the servo's archive")?;
    let header = entry.header();
    let kind = header.entry_type();
    if kind != tar::EntryType::Regular {
        bail!("`{SERVO_PATH}` in the image is not a regular file ({kind:?})");
    }
    let mode = header.mode().context("the servo's mode")?;
    let (uid, gid) = (header.uid().unwrap_or(1), header.gid().unwrap_or(1));
    if uid != 0 || gid != 0 {
        bail!("`{SERVO_PATH}` in the image is owned by {uid}:{gid}, not root");
    }
    if mode & 0o7000 != 0 || mode & 0o111 == 0 {
        bail!("`{SERVO_PATH}` in the image has mode {mode:o}: set-id, sticky or not executable");
    }
    let size = header.size().context("the servo's size")?;
    if size > MAX_SERVO_BYTES {
        bail!("`{SERVO_PATH}` in the image is larger than {MAX_SERVO_BYTES} bytes");
    }
    let mut bytes = Vec::with_capacity(size as usize);
    (&mut entry)
        .take(MAX_SERVO_BYTES)
        .read_to_end(&mut bytes)
        .context("reading the servo from its archive")?;
    if bytes.len() as u64 != size {
        bail!("the servo's archive ended early");
    }
    Ok((mode & 0o755, bytes))
}

/// Writes the copy: `root` and `dir` root's only (0700), the file written
/// under a temporary name and renamed into place, read-only.
fn write_copy(root: &Path, dir: &Path, path: &Path, tar: &[u8]) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    let (mode, bytes) = servo_from(tar)?;
    for d in [root, dir] {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(d)
            .with_context(|| format!("creating `{}`", d.display()))?;
        let meta = std::fs::symlink_metadata(d)?;
        if !meta.file_type().is_dir() {
            bail!("`{}` is not a directory", d.display());
        }
        if std::os::unix::fs::MetadataExt::uid(&meta) != euid() {
            bail!(
                "`{}` belongs to another user; remove it (the foreman makes it, 0700)",
                d.display()
            );
        }
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("restricting `{}`", d.display()))?;
    }
    let temp = dir.join(format!(".servo-{}", saheeli_protocol::TaskId::new()));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&temp)?;
        f.write_all(&bytes)?;
        f.set_permissions(std::fs::Permissions::from_mode(mode & 0o555))?;
        f.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written.with_context(|| format!("writing `{}`", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archive(kind: tar::EntryType, mode: u32, uid: u64, body: &[u8]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_uid(uid);
        h.set_gid(uid);
        h.set_size(if kind == tar::EntryType::Regular {
            body.len() as u64
        } else {
            0
        });
        if kind == tar::EntryType::Symlink {
            h.set_link_name("/etc/shadow").unwrap();
        }
        h.set_cksum();
        let data: &[u8] = if kind == tar::EntryType::Regular {
            body
        } else {
            &[]
        };
        b.append_data(&mut h, "servo", data).unwrap();
        b.into_inner().unwrap()
    }

    #[test]
    fn a_root_owned_executable_is_copied_read_only() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("servos");
        let dir = root.join("a".repeat(64));
        let path = dir.join("servo");
        let tar = archive(tar::EntryType::Regular, 0o755, 0, b"\x7fELF servo");
        write_copy(&root, &dir, &path, &tar).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"\x7fELF servo");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o555);
        let dmode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(dmode, 0o700);
        assert!(is_copy(&path));
        // Nothing temporary is left beside it.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    }

    #[test]
    fn links_set_id_bits_other_owners_and_non_executables_are_refused() {
        let cases = [
            (
                archive(tar::EntryType::Symlink, 0o777, 0, b""),
                "not a regular file",
            ),
            (archive(tar::EntryType::Regular, 0o4755, 0, b"x"), "set-id"),
            (
                archive(tar::EntryType::Regular, 0o755, 1000, b"x"),
                "not root",
            ),
            (
                archive(tar::EntryType::Regular, 0o644, 0, b"x"),
                "not executable",
            ),
            (Vec::new(), "empty"),
        ];
        for (tar, why) in cases {
            let e = servo_from(&tar).unwrap_err();
            assert!(format!("{e:#}").contains(why), "{why}: {e:#}");
        }
    }

    #[test]
    fn only_sha256_ids_become_paths() {
        let dir = Path::new("/s");
        let hex = "0123456789abcdef".repeat(4);
        assert_eq!(
            copy_path(dir, &format!("sha256:{hex}")),
            Some(dir.join(&hex).join("servo"))
        );
        assert_eq!(copy_path(dir, "sha256:../../etc"), None);
        assert_eq!(copy_path(dir, &hex), None);
        assert_eq!(copy_path(dir, "saheeli-servo:latest"), None);
    }

    #[test]
    fn a_link_where_the_copy_goes_is_not_a_copy() {
        let d = tempfile::tempdir().unwrap();
        let link = d.path().join("servo");
        std::os::unix::fs::symlink("/bin/true", &link).unwrap();
        assert!(!is_copy(&link));
        let empty = d.path().join("empty");
        std::fs::write(&empty, b"").unwrap();
        assert!(!is_copy(&empty));
        let real = d.path().join("real");
        std::fs::write(&real, b"servo").unwrap();
        assert!(is_copy(&real));
        std::fs::hard_link(&real, d.path().join("other-name")).unwrap();
        assert!(!is_copy(&real), "a file with a second name is not a copy");
    }
}

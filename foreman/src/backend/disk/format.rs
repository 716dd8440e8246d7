//! An empty ext4 filesystem of a given size, made by `mkfs.ext4` once per
//! size and per process, then written into each task's image as the few
//! extents mkfs wrote (152 KiB for the default 2 GiB): a task no
//! longer pays for an mkfs process (about 10 ms of CPU each on the test
//! machine). Every image of a size is the same bytes (one UUID, one
//! directory hash seed), as copies of one template would be; ext4 mounts
//! such filesystems side by side, and nothing of one task is in them.
//!
//! A size whose empty filesystem holds more than [`MAX_FORMAT`] of data
//! (many terabytes) is not kept: its images are formatted by mkfs each.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use anyhow::Context;

/// The most data one kept format may hold.
const MAX_FORMAT: u64 = 64 << 20;
/// How many sizes are kept (a deployment uses one or two).
const KEPT: usize = 8;

/// A file's data: (offset, bytes) of each extent that is not a hole.
type Extents = Vec<(u64, Vec<u8>)>;

/// The extents of an empty filesystem of one size.
struct Format {
    bytes: u64,
    extents: Extents,
}

static FORMATS: Mutex<Vec<Arc<Format>>> = Mutex::new(Vec::new());

/// The mkfs.ext4 of a workspace: `-m 0`, no blocks reserved for root (the
/// agent is uid 1000); `root_owner`: /workspace is the servo's, the agent's
/// group may add its files there (see `share_root`); no journal (a
/// workspace does not outlive a crash of its host in any useful state);
/// no `resize_inode`: a workspace never grows, and the group descriptor
/// blocks it reserves for growing were 1 MiB of the 1.2 MiB an image of
/// the default 2 GiB is written with (152 KiB without), which every task
/// paid to write and the loop device's set-up to flush to the host disk.
fn mkfs(image: &Path) -> anyhow::Result<()> {
    super::run(
        Command::new(super::which("mkfs.ext4").unwrap_or("mkfs.ext4".into()))
            .args([
                "-q",
                "-F",
                "-m",
                "0",
                "-E",
                "root_owner=999:1000",
                "-O",
                "^has_journal,^resize_inode",
            ])
            .arg(image),
    )
}

/// Makes `image` (created or truncated) a sparse file of `bytes` holding
/// an empty ext4 filesystem. `root` is the private directory the format of
/// a new size is made in.
pub(super) fn write_image(root: &Path, image: &Path, bytes: u64) -> anyhow::Result<()> {
    let f =
        std::fs::File::create(image).with_context(|| format!("creating `{}`", image.display()))?;
    // Sparse: takes disk only as the agent writes, never more than `bytes`.
    f.set_len(bytes)
        .with_context(|| format!("sizing `{}`", image.display()))?;
    match format_of(root, bytes)? {
        Some(format) => {
            for (offset, data) in &format.extents {
                f.write_all_at(data, *offset)
                    .with_context(|| format!("writing `{}`", image.display()))?;
            }
            Ok(())
        }
        None => {
            drop(f);
            mkfs(image)
        }
    }
}

/// The kept format of `bytes`, made now if it is new; None when it is too
/// large to keep.
fn format_of(root: &Path, bytes: u64) -> anyhow::Result<Option<Arc<Format>>> {
    {
        let mut kept = FORMATS.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = kept.iter().position(|f| f.bytes == bytes) {
            let f = kept.remove(i);
            kept.insert(0, f.clone());
            return Ok(Some(f));
        }
    }
    // Made outside the lock: two launches of a new size may both run mkfs
    // once; the first kept wins.
    let Some(made) = make(root, bytes)? else {
        return Ok(None);
    };
    let made = Arc::new(made);
    let mut kept = FORMATS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(f) = kept.iter().find(|f| f.bytes == bytes) {
        return Ok(Some(f.clone()));
    }
    kept.insert(0, made.clone());
    kept.truncate(KEPT);
    Ok(Some(made))
}

/// Runs mkfs on a scratch image of `bytes` in `root` and reads back what
/// it wrote.
fn make(root: &Path, bytes: u64) -> anyhow::Result<Option<Format>> {
    let scratch = Scratch(root.join(format!(".format-{}.img", uuid::Uuid::new_v4().simple())));
    let f = std::fs::File::create(&scratch.0)
        .with_context(|| format!("creating `{}`", scratch.0.display()))?;
    f.set_len(bytes)
        .with_context(|| format!("sizing `{}`", scratch.0.display()))?;
    drop(f);
    mkfs(&scratch.0)?;
    let extents = read_extents(&scratch.0, MAX_FORMAT)?;
    Ok(extents.map(|extents| Format { bytes, extents }))
}

/// The data extents of the sparse file at `path` (offset, bytes), or None
/// when they hold more than `cap` bytes.
fn read_extents(path: &Path, cap: u64) -> anyhow::Result<Option<Extents>> {
    use rustix::fs::SeekFrom;
    let f = std::fs::File::open(path).with_context(|| format!("opening `{}`", path.display()))?;
    let len = f.metadata()?.len();
    let mut extents = Vec::new();
    let mut total = 0u64;
    let mut at = 0u64;
    while at < len {
        let start = match rustix::fs::seek(&f, SeekFrom::Data(at)) {
            Ok(s) => s,
            // No data after `at`.
            Err(rustix::io::Errno::NXIO) => break,
            Err(e) => return Err(e).with_context(|| format!("reading `{}`", path.display())),
        };
        let end = rustix::fs::seek(&f, SeekFrom::Hole(start))
            .with_context(|| format!("reading `{}`", path.display()))?
            .min(len);
        total += end - start;
        if total > cap {
            return Ok(None);
        }
        let mut data = vec![0u8; (end - start) as usize];
        f.read_exact_at(&mut data, start)
            .with_context(|| format!("reading `{}`", path.display()))?;
        extents.push((start, data));
        at = end;
    }
    Ok(Some(extents))
}

/// A scratch file removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What is read back is exactly the file: every byte outside the
    /// extents is a hole (zero), every byte inside is the file's.
    #[test]
    fn extents_read_back_are_the_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        let f = std::fs::File::create(&p).unwrap();
        f.set_len(64 << 20).unwrap();
        f.write_all_at(b"head", 0).unwrap();
        f.write_all_at(&[7u8; 9000], 20 << 20).unwrap();
        f.write_all_at(b"tail", (64 << 20) - 4).unwrap();
        drop(f);
        let extents = read_extents(&p, 1 << 20).unwrap().unwrap();
        let copy = d.path().join("g");
        let g = std::fs::File::create(&copy).unwrap();
        g.set_len(64 << 20).unwrap();
        for (o, data) in &extents {
            g.write_all_at(data, *o).unwrap();
        }
        drop(g);
        assert_eq!(std::fs::read(&p).unwrap(), std::fs::read(&copy).unwrap());
        let held: u64 = extents.iter().map(|(_, d)| d.len() as u64).sum();
        assert!(
            held < 1 << 20,
            "only the data is held, not the holes: {held}"
        );
        assert!(read_extents(&p, 4096).unwrap().is_none(), "over the cap");
    }

    /// The default workspace's image (2 GiB) is written with little more
    /// than its bitmaps and root directory: no blocks reserved for growing
    /// it, which were 1 MiB of the 1.2 MiB every task wrote and the loop
    /// device flushed.
    #[test]
    fn the_default_images_format_is_small() {
        let bytes = crate::config::TaskDefaults::default().disk.0;
        let d = tempfile::tempdir().unwrap();
        let img = d.path().join("disk.img");
        write_image(d.path(), &img, bytes).unwrap();
        let format = format_of(d.path(), bytes).unwrap().unwrap();
        let held: u64 = format.extents.iter().map(|(_, d)| d.len() as u64).sum();
        assert!(held <= 256 << 10, "{held} bytes of format");
        let on_disk =
            std::os::unix::fs::MetadataExt::blocks(&std::fs::metadata(&img).unwrap()) * 512;
        assert!(on_disk <= 256 << 10, "{on_disk} bytes on disk");
    }
}

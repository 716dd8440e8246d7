//! Mounting a workspace image through a loop device by system call, as
//! `mount -o loop` would, without a `mount` or `umount` process per task
//! (each one a fork, an exec, libmount reading the mount table: about
//! 8 ms of CPU per task between them, measured on the test machine).
//!
//! The loop device is configured in one `LOOP_CONFIGURE` (Linux 5.8) with
//! `LO_FLAGS_AUTOCLEAR`: the kernel detaches it when its last user goes,
//! the mount (so unmounting frees it, as `mount -o loop` arranges) or,
//! when the mount fails, our own descriptor. The util-linux way of finding
//! a device is followed: ask `/dev/loop-control` for a free one and try
//! another when someone else took it first (`EBUSY`).
//!
//! Hand-written: the loop crates (`loopdev`, `loopdev-3`) generate their
//! bindings with bindgen, which needs libclang at build time; the two
//! ioctls need a struct and two numbers.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

use anyhow::{Context, bail};

const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
const LO_FLAGS_AUTOCLEAR: u32 = 4;
/// Linux's block major of loop devices.
const LOOP_MAJOR: u32 = 7;

/// `struct loop_info64` (linux/loop.h).
#[repr(C)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

/// `struct loop_config` (linux/loop.h).
#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

/// Mounts the ext4 image `image` at `mnt` (nosuid, nodev, noatime,
/// nobarrier) through a free loop device that is released when `mnt` is
/// unmounted.
///
/// `nobarrier` and `noatime`: the workspace is read once by collection
/// and then deleted, never kept across a crash of its host (the image has
/// no journal either). With barriers, unmounting flushed the loop device,
/// which fsyncs the image file: every task's workspace went to the host's
/// disk (and was discarded again by the unlink a moment later), a disk
/// flush per task. Without, what the unmount writes stays in the host's
/// page cache and goes with the file. `noatime`: the collection's reads do
/// not dirty every inode it reads just before the unmount writes them.
pub(super) fn mount_image(image: &Path, mnt: &Path) -> anyhow::Result<()> {
    let backing = open_rw(image).with_context(|| format!("opening `{}`", image.display()))?;
    let (device, path) = attach(&backing, image)?;
    drop(backing);
    let mounted = rustix::mount::mount(
        &path,
        mnt,
        "ext4",
        rustix::mount::MountFlags::NOSUID
            | rustix::mount::MountFlags::NODEV
            | rustix::mount::MountFlags::NOATIME,
        c"nobarrier",
    );
    // The mount holds the device now (or, if it failed, this was its last
    // user and the kernel detaches it).
    drop(device);
    mounted.with_context(|| {
        format!(
            "mounting `{}` ({}) at `{}`",
            image.display(),
            path.display(),
            mnt.display()
        )
    })
}

/// Unmounts `mnt`; one still in use (a container being removed) is
/// detached, and the kernel frees it when its last user goes.
pub(super) fn unmount(mnt: &Path) -> anyhow::Result<()> {
    use rustix::mount::UnmountFlags;
    // Never through a symbolic link: `mnt` is a directory this foreman made.
    match rustix::mount::unmount(mnt, UnmountFlags::NOFOLLOW) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::BUSY) => {
            rustix::mount::unmount(mnt, UnmountFlags::NOFOLLOW | UnmountFlags::DETACH)
                .with_context(|| format!("unmounting `{}` (detached)", mnt.display()))
        }
        Err(e) => Err(e).with_context(|| format!("unmounting `{}`", mnt.display())),
    }
}

/// Opens `path` for reading and writing, never through a symbolic link.
fn open_rw(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// A free loop device configured on `backing`, autoclear: the open device
/// and its path.
fn attach(backing: &File, image: &Path) -> anyhow::Result<(File, std::path::PathBuf)> {
    let control = open_rw(Path::new("/dev/loop-control"))
        .context("opening `/dev/loop-control` (is the `loop` module loaded?)")?;
    let mut name = [0u8; 64];
    let shown = image.as_os_str().as_encoded_bytes();
    let n = shown.len().min(63);
    name[..n].copy_from_slice(&shown[..n]);
    // Another process may take the device we were given before we
    // configure it; util-linux retries the same way.
    for _ in 0..64 {
        // SAFETY: LOOP_CTL_GET_FREE takes no argument and returns a number.
        let number = unsafe { libc::ioctl(control.as_raw_fd(), LOOP_CTL_GET_FREE as _) };
        if number < 0 {
            return Err(std::io::Error::last_os_error())
                .context("asking `/dev/loop-control` for a free loop device");
        }
        let path = std::path::PathBuf::from(format!("/dev/loop{number}"));
        let device = open_device(&path, number as u32)?;
        let config = LoopConfig {
            fd: backing.as_raw_fd() as u32,
            block_size: 0,
            info: LoopInfo64 {
                lo_device: 0,
                lo_inode: 0,
                lo_rdevice: 0,
                lo_offset: 0,
                lo_sizelimit: 0,
                lo_number: 0,
                lo_encrypt_type: 0,
                lo_encrypt_key_size: 0,
                lo_flags: LO_FLAGS_AUTOCLEAR,
                lo_file_name: name,
                lo_crypt_name: [0; 64],
                lo_encrypt_key: [0; 32],
                lo_init: [0; 2],
            },
            reserved: [0; 8],
        };
        // SAFETY: LOOP_CONFIGURE reads one `struct loop_config`, which
        // `config` is (repr(C), the kernel's layout), for the call only.
        let r = unsafe {
            libc::ioctl(
                device.as_raw_fd(),
                LOOP_CONFIGURE as _,
                &config as *const LoopConfig,
            )
        };
        if r == 0 {
            return Ok((device, path));
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EBUSY) {
            return Err(e).with_context(|| {
                format!("configuring `{}` on `{}`", path.display(), image.display())
            });
        }
    }
    bail!(
        "no free loop device for `{}` after 64 tries (other processes kept taking them)",
        image.display()
    )
}

/// Opens `/dev/loop<number>`, making its node first where `/dev` has none
/// (a /dev that is not devtmpfs; `losetup` does the same).
fn open_device(path: &Path, number: u32) -> anyhow::Result<File> {
    let open = || open_rw(path);
    match open() {
        Ok(f) => Ok(f),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let made = rustix::fs::mknodat(
                rustix::fs::CWD,
                path,
                rustix::fs::FileType::BlockDevice,
                rustix::fs::Mode::from_raw_mode(0o660),
                rustix::fs::makedev(LOOP_MAJOR, number),
            );
            match made {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => {
                    return Err(e).with_context(|| format!("making `{}`", path.display()));
                }
            }
            open().with_context(|| format!("opening `{}`", path.display()))
        }
        Err(e) => Err(e).with_context(|| format!("opening `{}`", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layout the kernel reads: 232 bytes of info, 304 of config
    /// (linux/loop.h on x86_64 and aarch64).
    #[test]
    fn the_structs_have_the_kernels_sizes() {
        assert_eq!(std::mem::size_of::<LoopInfo64>(), 232);
        assert_eq!(std::mem::size_of::<LoopConfig>(), 304);
    }
}

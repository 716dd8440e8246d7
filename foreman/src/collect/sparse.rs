//! Copying files so that a hole stays a hole: a sparse file of 3 GB that
//! holds 4 KB costs 4 KB on the host, and counts 4 KB against
//! `max_results_size`.
//!
//! From a file on this host (a volume's directory), only the data ranges
//! are read (`SEEK_DATA`/`SEEK_HOLE`), and what the size cap counts is the
//! bytes in them. From a stream (the archive API, an upload) holes cannot
//! be seen, so every byte counts; either way a run of zeros is written as
//! a hole (not written at all, the file's length set at the end), so the
//! host never holds more than the data.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;

use rustix::fs::SeekFrom;

/// How much is read and written at a time.
const CHUNK: usize = 1 << 20;
/// Zeros are left unwritten in pieces of this size (a filesystem block).
const BLOCK: usize = 4096;

/// Writes `buf` at `offset` of a file created empty, leaving every block
/// of zeros unwritten (it reads back as zeros, and takes no space).
fn write_holey(out: &File, mut offset: u64, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        // Pieces end on block boundaries of the file, so a hole is whole blocks.
        let to_boundary = BLOCK - (offset % BLOCK as u64) as usize;
        let n = to_boundary.min(buf.len());
        let (piece, rest) = buf.split_at(n);
        if piece.iter().any(|&b| b != 0) {
            out.write_all_at(piece, offset)?;
        }
        offset += n as u64;
        buf = rest;
    }
    Ok(())
}

/// The data ranges of `file` (offset, end) up to `len`; the whole file
/// when the filesystem cannot say.
fn data_ranges(file: &File, len: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < len {
        let start = match rustix::fs::seek(file, SeekFrom::Data(pos)) {
            Ok(s) => s,
            // ENXIO: nothing but a hole from `pos` to the end.
            Err(rustix::io::Errno::NXIO) => break,
            Err(_) => return vec![(0, len)],
        };
        let end = match rustix::fs::seek(file, SeekFrom::Hole(start)) {
            Ok(e) => e.min(len),
            Err(_) => return vec![(0, len)],
        };
        if end <= start {
            break;
        }
        out.push((start, end));
        pos = end;
    }
    out
}

/// Copies the file `src` (of length `len`) into the empty file `out`,
/// holes kept as holes, reading at most `budget + 1` bytes of data.
/// Returns how many bytes of data were copied: over `budget` means the
/// copy stopped short.
pub(crate) fn copy_file(src: &File, len: u64, out: &File, budget: u64) -> io::Result<u64> {
    let mut copied = 0u64;
    // No bigger than the file: most files a task leaves are a few
    // kilobytes, and a zeroed megabyte per file was most of what copying
    // them cost (glibc serves it from the heap once one has been freed,
    // and clears all of it).
    let mut buf = vec![0u8; len.min(CHUNK as u64) as usize];
    for (start, end) in data_ranges(src, len) {
        let mut pos = start;
        while pos < end {
            let room = budget.saturating_add(1) - copied;
            if room == 0 {
                return Ok(copied);
            }
            let want = (end - pos).min(CHUNK as u64).min(room) as usize;
            let n = src.read_at(&mut buf[..want], pos)?;
            if n == 0 {
                break; // the file shrank
            }
            write_holey(out, pos, &buf[..n])?;
            pos += n as u64;
            copied += n as u64;
        }
    }
    out.set_len(len)?;
    Ok(copied)
}

/// Copies the stream `src` into the empty file `out`, runs of zeros left
/// as holes, reading at most `budget + 1` bytes. Returns how many bytes
/// were read: over `budget` means the copy stopped short.
pub(crate) fn copy_stream(src: impl Read, out: &File, budget: u64) -> io::Result<u64> {
    let mut src = src.take(budget.saturating_add(1));
    let mut buf = vec![0u8; CHUNK];
    let mut pos = 0u64;
    loop {
        let n = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        write_holey(out, pos, &buf[..n])?;
        pos += n as u64;
    }
    out.set_len(pos)?;
    Ok(pos)
}

/// The bytes a file occupies on disk (`st_blocks`), at most its length:
/// what a sparse file costs against the size cap.
pub(crate) fn allocated(meta: &std::fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt;
    meta.blocks().saturating_mul(512).min(meta.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn holes_stay_holes_and_data_is_what_counts() {
        let d = tempfile::tempdir().unwrap();
        let src = File::create_new(d.path().join("src")).unwrap();
        let len = 3u64 << 30;
        src.set_len(len).unwrap();
        src.write_all_at(b"head", 0).unwrap();
        src.write_all_at(b"tail", len - 4).unwrap();
        drop(src);
        let src = File::open(d.path().join("src")).unwrap();
        let out = File::create_new(d.path().join("out")).unwrap();
        let copied = copy_file(&src, len, &out, 1 << 20).unwrap();
        // Two blocks of data at most (what SEEK_DATA says is data).
        assert!(copied <= 2 * 4096 * 16, "{copied}");
        let meta = std::fs::metadata(d.path().join("out")).unwrap();
        assert_eq!(meta.len(), len);
        assert!(meta.blocks() * 512 < 1 << 20, "{} blocks", meta.blocks());
        let mut b = [0u8; 4];
        out.sync_all().unwrap();
        let back = File::open(d.path().join("out")).unwrap();
        back.read_exact_at(&mut b, len - 4).unwrap();
        assert_eq!(&b, b"tail");
        back.read_exact_at(&mut b, 0).unwrap();
        assert_eq!(&b, b"head");
        // A budget smaller than the data stops the copy, and says so.
        let out2 = File::create_new(d.path().join("out2")).unwrap();
        assert!(copy_file(&src, len, &out2, 2).unwrap() > 2);
    }

    #[test]
    fn zeros_from_a_stream_are_written_as_holes() {
        let d = tempfile::tempdir().unwrap();
        let out = File::create_new(d.path().join("out")).unwrap();
        let data = [&[7u8; 10][..], &vec![0u8; 64 << 20][..], b"end"].concat();
        assert_eq!(
            copy_stream(&data[..], &out, u64::MAX).unwrap(),
            data.len() as u64
        );
        assert_eq!(std::fs::read(d.path().join("out")).unwrap(), data);
        let meta = std::fs::metadata(d.path().join("out")).unwrap();
        assert!(meta.blocks() * 512 <= 64 << 10, "{} blocks", meta.blocks());
        // Over the budget: one byte more than it is read, and no more.
        let out = File::create_new(d.path().join("cut")).unwrap();
        assert_eq!(copy_stream(&data[..], &out, 5).unwrap(), 6);
    }
}

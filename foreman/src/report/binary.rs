//! Binary files in `changes.patch` as git's own binary patches (`GIT
//! binary patch`, a `literal` hunk each way), so `git apply` takes them:
//! the bytes zlib-wrapped (stored deflate blocks: no compressor needed,
//! git inflates any valid stream) and written in git's base85, 52 bytes a
//! line.

use std::io::{self, Write};

/// git's base85 alphabet (`base85.c`).
const ALPHABET: &[u8; 85] =
    b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~";

/// Writes the binary hunks that turn `old` into `new` (None: no file).
pub(crate) fn write_binary(
    w: &mut impl Write,
    old: Option<&[u8]>,
    new: Option<&[u8]>,
) -> io::Result<()> {
    writeln!(w, "GIT binary patch")?;
    write_literal(w, new.unwrap_or_default())?;
    write_literal(w, old.unwrap_or_default())
}

/// One `literal` hunk: the size, the zlib stream in base85 lines, a blank line.
fn write_literal(w: &mut impl Write, bytes: &[u8]) -> io::Result<()> {
    writeln!(w, "literal {}", bytes.len())?;
    for line in zlib_stored(bytes).chunks(52) {
        let n = line.len() as u8;
        let len = if n <= 26 { b'A' + n - 1 } else { b'a' + n - 27 };
        w.write_all(&[len])?;
        w.write_all(&base85(line))?;
        writeln!(w)?;
    }
    writeln!(w)
}

/// A zlib stream of `bytes` in stored (uncompressed) deflate blocks.
fn zlib_stored(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + bytes.len() / 65535 * 5 + 16);
    // CMF 0x78 (deflate, 32K window), FLG 0x01 (no dictionary; check bits).
    out.extend_from_slice(&[0x78, 0x01]);
    let mut blocks = bytes.chunks(65535).peekable();
    if blocks.peek().is_none() {
        // One empty final block.
        out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
    }
    while let Some(block) = blocks.next() {
        let last = blocks.peek().is_none();
        let len = block.len() as u16;
        out.push(u8::from(last));
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(block);
    }
    out.extend_from_slice(&adler32(bytes).to_be_bytes());
    out
}

fn adler32(bytes: &[u8]) -> u32 {
    const MOD: u32 = 65521;
    let (mut a, mut b) = (1u32, 0u32);
    for chunk in bytes.chunks(5552) {
        for &x in chunk {
            a += u32::from(x);
            b += a;
        }
        a %= MOD;
        b %= MOD;
    }
    (b << 16) | a
}

/// git's base85 of up to 52 bytes: 5 characters per 4 bytes (big-endian),
/// the last group padded with zeros.
fn base85(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len().div_ceil(4) * 5);
    for group in bytes.chunks(4) {
        let mut word = [0u8; 4];
        word[..group.len()].copy_from_slice(group);
        let mut n = u32::from_be_bytes(word);
        let mut chars = [0u8; 5];
        for c in chars.iter_mut().rev() {
            *c = ALPHABET[(n % 85) as usize];
            n /= 85;
        }
        out.extend_from_slice(&chars);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adler32_and_base85_match_known_values() {
        // zlib's own example value.
        assert_eq!(adler32(b"Wikipedia"), 0x11E6_0398);
        assert_eq!(adler32(b""), 1);
        assert_eq!(base85(&[0, 0, 0, 0]), b"00000");
        assert_eq!(base85(&[0xff, 0xff, 0xff, 0xff]), b"|NsC0");
    }

    #[test]
    fn stored_blocks_frame_the_bytes() {
        let z = zlib_stored(b"abc");
        assert_eq!(&z[..2], &[0x78, 0x01]);
        assert_eq!((0x78u16 * 256 + 0x01) % 31, 0, "the header's check bits");
        assert_eq!(&z[2..7], &[1, 3, 0, 0xfc, 0xff]);
        assert_eq!(&z[7..10], b"abc");
        let big = vec![7u8; 70_000];
        let z = zlib_stored(&big);
        assert_eq!(z.len(), 2 + 5 + 65535 + 5 + (70_000 - 65535) + 4);
        assert_eq!(z[2], 0, "the first of two blocks is not the last");
    }
}

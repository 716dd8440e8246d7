//! Server-sent events as providers send them: where one event ends, and
//! the longest one read.

/// Longest event relayed; a longer one ends the stream with an error.
pub(crate) const MAX_EVENT: usize = 4 * 1024 * 1024;

/// Where the first event in `buf` ends: its length and the separator's.
pub(crate) fn boundary(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2));
    let crlf = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

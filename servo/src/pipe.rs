//! Blocking tar I/O joined to async HTTP bodies through a bounded
//! channel, so a workspace streams to or from the gateway without ever
//! being whole in memory: at most a few 64 KiB pieces are in flight.

use std::io::{self, Read, Write};

use bytes::Bytes;
use tokio::sync::mpsc::{Receiver, Sender, channel};

/// Pieces of this size go through the channel.
const PIECE: usize = 64 << 10;

/// Pieces buffered between the two sides.
const DEPTH: usize = 4;

/// A bounded channel of pieces (or the error that ended the stream).
pub(crate) fn pipe() -> (Sender<io::Result<Bytes>>, Receiver<io::Result<Bytes>>) {
    channel(DEPTH)
}

/// Writes (from a blocking thread) into the channel, in pieces.
pub(crate) struct ChannelWriter {
    tx: Sender<io::Result<Bytes>>,
    buf: Vec<u8>,
}

impl ChannelWriter {
    pub fn new(tx: Sender<io::Result<Bytes>>) -> Self {
        ChannelWriter {
            tx,
            buf: Vec::with_capacity(PIECE),
        }
    }

    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let piece = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(PIECE)));
        self.tx
            .blocking_send(Ok(piece))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the receiver went away"))
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(PIECE - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == PIECE {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

/// Reads (from a blocking thread) what the async side sends.
pub(crate) struct ChannelReader {
    rx: Receiver<io::Result<Bytes>>,
    current: Bytes,
}

impl ChannelReader {
    pub fn new(rx: Receiver<io::Result<Bytes>>) -> Self {
        ChannelReader {
            rx,
            current: Bytes::new(),
        }
    }
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(piece)) => self.current = piece,
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

/// The channel's pieces as a stream, for a streaming request body.
pub(crate) fn stream(
    rx: Receiver<io::Result<Bytes>>,
) -> impl futures_util::Stream<Item = io::Result<Bytes>> + Send + 'static {
    futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|p| (p, rx)) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn what_is_written_in_pieces_is_read_back_whole() {
        let data: Vec<u8> = (0..(PIECE * 3 + 17)).map(|i| (i % 251) as u8).collect();
        let (tx, rx) = pipe();
        let expected = data.clone();
        let writer = tokio::task::spawn_blocking(move || {
            let mut w = ChannelWriter::new(tx);
            for chunk in data.chunks(1000) {
                w.write_all(chunk)?;
            }
            w.flush()
        });
        let reader = tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            ChannelReader::new(rx).read_to_end(&mut out).map(|_| out)
        });
        writer.await.unwrap().unwrap();
        assert_eq!(reader.await.unwrap().unwrap(), expected);
    }
}

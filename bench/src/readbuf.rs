//! The read buffer of the bench's discarding peers (the MQTT broker and the S3 store that
//! take everything and keep nothing): one fixed allocation, the unread bytes between `start`
//! and `end`, reads that give up once the peer is told to stop.

use std::io::{self, Read};
use std::sync::atomic::{AtomicBool, Ordering};

/// See the module documentation.
#[derive(Debug)]
pub struct ReadBuf {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl ReadBuf {
    /// An empty buffer of `size` bytes.
    pub fn new(size: usize) -> ReadBuf {
        ReadBuf {
            buf: vec![0; size],
            start: 0,
            end: 0,
        }
    }

    /// The bytes read and not consumed yet.
    pub fn unread(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Marks `n` unread bytes as used.
    pub fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.end);
    }

    /// Reads more bytes from `stream`; `Ok(false)` at the end of the stream, or on a read
    /// timeout once `stop` is set (the stream's read timeout is how often it looks). The
    /// unread bytes move to the front first when fewer than `room` bytes are free after them.
    pub fn fill(
        &mut self,
        stream: &mut impl Read,
        stop: &AtomicBool,
        room: usize,
    ) -> io::Result<bool> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.buf.len() - self.end < room {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        loop {
            match stream.read(&mut self.buf[self.end..]) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.end += n;
                    return Ok(true);
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    if stop.load(Ordering::Relaxed) {
                        return Ok(false);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unread_bytes_move_to_the_front_when_the_room_after_them_runs_short() {
        let stop = AtomicBool::new(false);
        let mut rb = ReadBuf::new(8);
        let mut input: &[u8] = b"abcdefgh";
        assert!(rb.fill(&mut input, &stop, 1).unwrap_or(false));
        rb.consume(6);
        assert_eq!(rb.unread(), b"gh");
        let mut more: &[u8] = b"ijkl";
        assert!(rb.fill(&mut more, &stop, 1).unwrap_or(false));
        assert_eq!(rb.unread(), b"ghijkl");
        let mut none: &[u8] = b"";
        assert!(
            !rb.fill(&mut none, &stop, 1).unwrap_or(true),
            "end of stream"
        );
    }
}

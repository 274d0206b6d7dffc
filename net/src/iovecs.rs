//! The request as a list of iovecs for `writev`: the head and each body chunk is its own
//! iovec, pointing into the `Bytes` it came from (no copy). Partial writes advance through the
//! list.

use bytes::{Buf, Bytes};
use monoio::buf::IoVecBuf;

/// Linux refuses `writev` with more than `IOV_MAX` (1024) iovecs; longer lists go out in
/// several calls.
const MAX_IOVECS_PER_CALL: usize = 1024;

/// Owned buffers and the iovecs that describe them, from the first unsent byte on (also used
/// by the engine's MQTT connections).
pub struct IoVecs {
    /// The buffers, never empty ones. `chunks[i]` is advanced past what was written of it.
    chunks: Vec<Bytes>,
    /// `iovecs[i]` describes exactly `chunks[i]` (as it is now).
    iovecs: Vec<libc::iovec>,
    /// Index of the first chunk with unsent bytes.
    first: usize,
    /// Unsent bytes in total.
    remaining: usize,
}

impl std::fmt::Debug for IoVecs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoVecs")
            .field("chunks", &self.chunks.len().saturating_sub(self.first))
            .field("remaining", &self.remaining)
            .finish()
    }
}

fn iovec_of(chunk: &Bytes) -> libc::iovec {
    libc::iovec {
        iov_base: chunk.as_ptr().cast_mut().cast(),
        iov_len: chunk.len(),
    }
}

impl IoVecs {
    pub fn new(buffers: impl IntoIterator<Item = Bytes>) -> Self {
        let chunks: Vec<Bytes> = buffers.into_iter().filter(|c| !c.is_empty()).collect();
        let iovecs = chunks.iter().map(iovec_of).collect();
        let remaining = chunks.iter().map(Bytes::len).sum();
        IoVecs {
            chunks,
            iovecs,
            first: 0,
            remaining,
        }
    }

    /// An empty list, to [`IoVecs::refill`].
    pub fn empty() -> Self {
        IoVecs::new(std::iter::empty())
    }

    /// Empties the list and describes `buffers` instead, keeping the list's allocations: a
    /// writer that refills one list (which [`crate::io::write_vectored`] hands back) allocates
    /// nothing per write once its lists are as long as its writes.
    pub fn refill(&mut self, buffers: impl IntoIterator<Item = Bytes>) {
        self.chunks.clear();
        self.iovecs.clear();
        self.chunks
            .extend(buffers.into_iter().filter(|c| !c.is_empty()));
        self.iovecs.extend(self.chunks.iter().map(iovec_of));
        self.first = 0;
        self.remaining = self.chunks.iter().map(Bytes::len).sum();
    }

    /// Bytes not written yet.
    pub fn remaining(&self) -> usize {
        self.remaining
    }

    /// Marks `n` more bytes as written (what a `writev` returned). More than
    /// [`IoVecs::remaining`] is treated as all of it.
    pub fn advance(&mut self, mut n: usize) {
        while n > 0 {
            let Some(chunk) = self.chunks.get_mut(self.first) else {
                break;
            };
            if n >= chunk.len() {
                n -= chunk.len();
                self.remaining -= chunk.len();
                self.first += 1;
            } else {
                chunk.advance(n);
                self.remaining -= n;
                if let Some(iovec) = self.iovecs.get_mut(self.first) {
                    *iovec = iovec_of(chunk);
                }
                n = 0;
            }
        }
    }
}

// SAFETY: monoio reads `read_iovec_len()` iovecs from `read_iovec_ptr()` while it owns the
// value (until the write completes, also when the future is dropped: the driver keeps the value
// alive until the kernel is done). That is sound here because:
// - the pointer is `self.iovecs[self.first..].as_ptr()`, into the heap storage of a `Vec` that
//   is resized only by `new` and `refill` (`&mut self`, which the runtime never calls while it
//   holds the value): moving `IoVecs` does not move that storage, so the pointer stays valid
//   for as long as the runtime holds the value, and `first <= iovecs.len()` always holds;
// - the length is at most `iovecs.len() - first`, so every iovec read is initialised;
// - each iovec describes exactly the bytes of the `Bytes` at the same index (rebuilt whenever
//   that chunk is advanced), and the `Bytes` are owned by `self`: their memory is immutable and
//   does not move or get freed while a handle is held;
// - nothing mutates `self` while the runtime holds it (it is moved into the operation).
#[allow(unsafe_code)]
unsafe impl IoVecBuf for IoVecs {
    fn read_iovec_ptr(&self) -> *const libc::iovec {
        self.iovecs.get(self.first..).unwrap_or_default().as_ptr()
    }

    fn read_iovec_len(&self) -> usize {
        self.iovecs
            .len()
            .saturating_sub(self.first)
            .min(MAX_IOVECS_PER_CALL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unsent(v: &IoVecs) -> Vec<u8> {
        let mut out = Vec::new();
        for iov in v.iovecs.iter().skip(v.first) {
            let chunk = v
                .chunks
                .iter()
                .find(|c| c.as_ptr() == iov.iov_base.cast_const().cast::<u8>())
                .map(|c| c.to_vec())
                .unwrap_or_default();
            assert_eq!(chunk.len(), iov.iov_len);
            out.extend_from_slice(&chunk);
        }
        out
    }

    #[test]
    fn advances_across_and_inside_chunks() {
        let mut v = IoVecs::new([
            Bytes::from_static(b"head"),
            Bytes::new(),
            Bytes::from_static(b"abc"),
            Bytes::from_static(b"defgh"),
        ]);
        assert_eq!(v.remaining(), 12);
        assert_eq!(v.read_iovec_len(), 3);
        v.advance(2);
        assert_eq!(unsent(&v), b"adabcdefgh");
        v.advance(3);
        assert_eq!(unsent(&v), b"bcdefgh");
        assert_eq!(v.read_iovec_len(), 2);
        v.advance(2);
        assert_eq!(unsent(&v), b"defgh");
        assert_eq!(v.read_iovec_len(), 1);
        v.advance(100);
        assert_eq!(v.remaining(), 0);
        assert_eq!(v.read_iovec_len(), 0);
    }

    #[test]
    fn a_refilled_list_describes_only_its_new_buffers_in_the_same_storage() {
        let mut v = IoVecs::new((0..8u8).map(|i| Bytes::from(vec![i; 10])));
        v.advance(25);
        let storage = v.iovecs.as_ptr();
        v.refill([
            Bytes::from_static(b"ab"),
            Bytes::new(),
            Bytes::from_static(b"cde"),
        ]);
        assert_eq!(v.remaining(), 5);
        assert_eq!(unsent(&v), b"abcde");
        assert_eq!(v.read_iovec_len(), 2);
        // Shorter than before: refilled in place, nothing allocated.
        assert_eq!(v.iovecs.as_ptr(), storage);
        v.advance(3);
        assert_eq!(unsent(&v), b"de");
        v.refill(std::iter::empty());
        assert_eq!((v.remaining(), v.read_iovec_len()), (0, 0));
        assert!(v.chunks.is_empty(), "the written buffers are let go");
    }

    #[test]
    fn caps_iovecs_per_call() {
        let v = IoVecs::new((0..3000).map(|_| Bytes::from_static(b"x")));
        assert_eq!(v.read_iovec_len(), MAX_IOVECS_PER_CALL);
        assert_eq!(v.remaining(), 3000);
    }
}

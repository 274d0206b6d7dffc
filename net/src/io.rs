//! The read and write loops every connection uses.

use std::io;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use monoio::buf::{IoBufMut, SliceMut};
use monoio::io::{AsyncReadRent, AsyncWriteRent};
use monoio::time::timeout;

use crate::IoVecs;

/// Reads once into the free room at the end of `buf`, made at least `room` bytes first.
/// Returns how many bytes came; `Ok(0)` is the end of the stream (what it means is the
/// caller's: an error for a framed protocol mid-frame, the end of a body delimited by close).
pub async fn read_more<R: AsyncReadRent>(
    r: &mut R,
    buf: &mut BytesMut,
    room: usize,
) -> io::Result<usize> {
    buf.reserve(room);
    let b = std::mem::take(buf);
    let (len, cap) = (b.len(), b.capacity());
    let free: SliceMut<BytesMut> = b.slice_mut(len..cap);
    let (result, free) = r.read(free).await;
    *buf = free.into_inner();
    result
}

fn timed_out(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, format!("{what} timed out"))
}

/// Writes all of `iov` with `writev` (each call within `limit`), the buffers as their own
/// iovecs, never copied.
pub async fn write_vectored<W: AsyncWriteRent>(
    w: &mut W,
    mut iov: IoVecs,
    limit: Duration,
) -> io::Result<IoVecs> {
    while iov.remaining() > 0 {
        let (result, back) = timeout(limit, w.writev(iov))
            .await
            .map_err(|_| timed_out("a write"))?;
        iov = back;
        match result {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => iov.advance(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(iov)
}

/// Writes all of `data` with plain writes (each call within `limit`): for streams where a
/// vectored write gains nothing (TLS encrypts into its own buffer).
pub async fn write_all<W: AsyncWriteRent>(
    w: &mut W,
    mut data: Bytes,
    limit: Duration,
) -> io::Result<()> {
    while !data.is_empty() {
        let (result, back) = timeout(limit, w.write(data))
            .await
            .map_err(|_| timed_out("a write"))?;
        data = back;
        match result {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => data.advance(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Flushes `w` within `limit` (TLS: the last records out).
pub async fn flush<W: AsyncWriteRent>(w: &mut W, limit: Duration) -> io::Result<()> {
    timeout(limit, w.flush())
        .await
        .map_err(|_| timed_out("a write"))?
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn vectored_writes_and_buffer_filling_reads_move_every_byte() {
        let mut rt = monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .enable_timer()
            .build()
            .unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let peer = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut got = vec![0u8; 3 * 100_000];
            s.read_exact(&mut got).unwrap();
            s.write_all(&got[..1000]).unwrap();
            got
        });
        let got_back = rt.block_on(async move {
            let mut tcp = crate::connect("127.0.0.1", port, Duration::from_secs(2))
                .await
                .unwrap();
            let chunks = (0..3u8).map(|i| Bytes::from(vec![i; 100_000]));
            write_vectored(&mut tcp, IoVecs::new(chunks), Duration::from_secs(5))
                .await
                .unwrap();
            let mut buf = BytesMut::new();
            while buf.len() < 1000 {
                let n = read_more(&mut tcp, &mut buf, 64).await.unwrap();
                assert!(n > 0);
            }
            buf
        });
        let sent = peer.join().unwrap();
        assert!(sent[..100_000].iter().all(|&b| b == 0));
        assert!(sent[200_000..].iter().all(|&b| b == 2));
        assert_eq!(&got_back[..], &sent[..1000]);
    }
}

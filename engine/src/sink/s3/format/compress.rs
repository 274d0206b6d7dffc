//! Compression for the encoder: the codecs (none, gzip, zstd) and the output buffer they
//! write into, reused across objects (see the parent module's notes on lag and memory).

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use flate2::{Compress, FlushCompress};
use zstd::stream::raw::{Operation as _, OutBuffer};

use super::{ALLOC, GROW, MIN_ROOM};

/// The codec and the output of one object.
pub(super) struct Sink {
    pub(super) out: OutBuf,
    pub(super) codec: Codec,
    /// Uncompressed bytes of this object.
    pub(super) input: u64,
    /// Output bytes of this object returned by take().
    pub(super) taken: u64,
    pub(super) error: Option<String>,
}

pub(super) enum Codec {
    None,
    Gzip(Box<Gzip>),
    Zstd(Box<zstd::stream::raw::Encoder<'static>>),
}

pub(super) struct Gzip {
    /// Raw deflate; the gzip header and trailer are written here.
    pub(super) deflate: Compress,
    pub(super) crc: flate2::Crc,
    pub(super) level: u32,
}

impl Sink {
    pub(super) fn begin(&mut self) {
        self.out.clear();
        self.input = 0;
        self.taken = 0;
        self.error = None;
        match &mut self.codec {
            Codec::None => {}
            Codec::Gzip(g) => {
                g.deflate.reset();
                g.crc.reset();
                // RFC 1952 member header: magic, CM = deflate, no flags, no mtime, XFL, OS
                // unknown.
                let xfl = match g.level {
                    9 => 2,
                    1 => 4,
                    _ => 0,
                };
                self.out.extend(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, xfl, 0xff]);
            }
            Codec::Zstd(z) => {
                if let Err(e) = z.reinit() {
                    self.fail(format!("zstd: {e}"));
                }
            }
        }
    }

    pub(super) fn write(&mut self, data: &[u8]) {
        if self.error.is_some() || data.is_empty() {
            return;
        }
        self.input += data.len() as u64;
        let result = match &mut self.codec {
            Codec::None => {
                self.out.extend(data);
                Ok(())
            }
            Codec::Gzip(g) => {
                g.crc.update(data);
                deflate(&mut g.deflate, &mut self.out, data, FlushCompress::None)
            }
            Codec::Zstd(z) => zstd_write(z, &mut self.out, data),
        };
        if let Err(e) = result {
            self.fail(e);
        }
    }

    pub(super) fn finish(&mut self) {
        if self.error.is_some() {
            return;
        }
        let result = match &mut self.codec {
            Codec::None => Ok(()),
            Codec::Gzip(g) => {
                deflate(&mut g.deflate, &mut self.out, &[], FlushCompress::Finish).map(|()| {
                    // Trailer: CRC-32 and the input size modulo 2^32, little-endian.
                    self.out.extend(&g.crc.sum().to_le_bytes());
                    self.out
                        .extend(&((self.input & 0xffff_ffff) as u32).to_le_bytes());
                })
            }
            Codec::Zstd(z) => zstd_finish(z, &mut self.out),
        };
        if let Err(e) = result {
            self.fail(e);
        }
    }

    pub(super) fn take(&mut self) -> Bytes {
        let b = self.out.take();
        self.taken += b.len() as u64;
        b
    }

    pub(super) fn fail(&mut self, e: String) {
        tracing::error!("s3 object encoder: {e}");
        if self.error.is_none() {
            self.error = Some(e);
        }
    }
}

/// Feeds `input` to the deflater (or finishes its stream), writing what it emits to `out`.
pub(super) fn deflate(
    c: &mut Compress,
    out: &mut OutBuf,
    mut input: &[u8],
    flush: FlushCompress,
) -> Result<(), String> {
    let finishing = flush == FlushCompress::Finish;
    loop {
        let room = out.room(MIN_ROOM);
        let space = room.len();
        let (in0, out0) = (c.total_in(), c.total_out());
        let status = c
            .compress(input, room, flush)
            .map_err(|e| format!("gzip: {e}"))?;
        let read = (c.total_in() - in0) as usize;
        let written = (c.total_out() - out0) as usize;
        out.commit(written);
        input = &input[read..];
        if finishing {
            if status == flate2::Status::StreamEnd {
                return Ok(());
            }
        } else if input.is_empty() && written < space {
            // All input taken and nothing more waiting to come out.
            return Ok(());
        }
        if read == 0 && written == 0 {
            if !finishing && input.is_empty() {
                return Ok(());
            }
            return Err("gzip: the compressor made no progress".to_owned());
        }
    }
}

/// Feeds `input` to the zstd stream, writing what it emits to `out`.
pub(super) fn zstd_write(
    z: &mut zstd::stream::raw::Encoder<'static>,
    out: &mut OutBuf,
    mut input: &[u8],
) -> Result<(), String> {
    loop {
        let room = out.room(MIN_ROOM);
        let space = room.len();
        let status = z
            .run_on_buffers(input, room)
            .map_err(|e| format!("zstd: {e}"))?;
        out.commit(status.bytes_written);
        input = &input[status.bytes_read..];
        if input.is_empty() && status.bytes_written < space {
            return Ok(());
        }
        if status.bytes_read == 0 && status.bytes_written == 0 {
            if input.is_empty() {
                return Ok(());
            }
            return Err("zstd: the compressor made no progress".to_owned());
        }
    }
}

/// Ends the zstd frame (last block and checksum).
pub(super) fn zstd_finish(
    z: &mut zstd::stream::raw::Encoder<'static>,
    out: &mut OutBuf,
) -> Result<(), String> {
    loop {
        let room = out.room(MIN_ROOM);
        let mut buf = OutBuffer::around(room);
        let remaining = z.finish(&mut buf, true).map_err(|e| format!("zstd: {e}"))?;
        let written = buf.pos();
        out.commit(written);
        if remaining == 0 {
            return Ok(());
        }
        if written == 0 {
            return Err("zstd: the compressor made no progress".to_owned());
        }
    }
}

/// The output not yet taken: `buf[..filled]`. Past `filled`, `buf` keeps initialised room
/// for the codecs to write into, so it is zeroed once when it grows, not at every step.
/// take() splits the output off as `Bytes` sharing the allocation; once the allocation is
/// used up it is replaced by a used-up one whose chunks are all dropped, else by a new one of
/// at least [`ALLOC`] bytes. In steady state (parts uploaded as fast as they fill) no new
/// buffer is allocated.
pub(super) struct OutBuf {
    pub(super) buf: BytesMut,
    pub(super) filled: usize,
    /// Used-up buffers, oldest first, each waiting until every chunk taken from it is dropped
    /// (its part uploaded) to be used again: a fresh allocation costs the kernel a zeroed page
    /// per 4 KiB (11.5% of the shard's CPU in the raw profile), a reused one nothing. At most
    /// `keep` wait; an older one is let go (its memory is freed with its last chunk).
    pub(super) spare: VecDeque<BytesMut>,
    /// The size of `buf`'s allocation.
    pub(super) alloc: usize,
    /// Buffers allocated so far (the first included).
    pub(super) allocated: u64,
    /// How many used-up buffers wait for reuse at most.
    pub(super) keep: usize,
}

/// Used-up output buffers an encoder keeps for reuse by default: 8 MiB of [`ALLOC`] buffers.
/// [`Encoder::keep_for_reuse`] sets it to what the uploads hold at most. A waiting buffer holds
/// memory of its own only once reclaimable (its chunks gone), and one is taken from them
/// before a new one is allocated, so the buffers an encoder owns never outnumber those it
/// needed at once.
pub(super) const SPARE: usize = 32;

impl OutBuf {
    pub(super) fn new() -> OutBuf {
        OutBuf {
            buf: BytesMut::with_capacity(GROW),
            filled: 0,
            spare: VecDeque::new(),
            alloc: GROW,
            allocated: 1,
            keep: SPARE,
        }
    }

    pub(super) fn extend(&mut self, data: &[u8]) {
        let end = self.filled + data.len();
        if end <= self.buf.len() {
            self.buf[self.filled..end].copy_from_slice(data);
        } else {
            self.reserve(data.len());
            self.buf.truncate(self.filled);
            // Within the capacity just made sure of: no reallocation.
            self.buf.extend_from_slice(data);
        }
        self.filled = end;
    }

    /// Makes room for `n` more bytes after the output: in place while the allocation has
    /// it or once every chunk taken from it is dropped (it is then reused), else in a new
    /// buffer of at least [`ALLOC`] bytes (the output not taken yet is copied over; taken
    /// chunks keep the old one alive until they are dropped).
    pub(super) fn reserve(&mut self, n: usize) {
        if self.buf.capacity() - self.filled >= n {
            return;
        }
        self.buf.truncate(self.filled);
        if self.buf.try_reclaim(n) {
            return;
        }
        let want = ALLOC.max(self.filled + n);
        let reused = self
            .spare
            .iter_mut()
            .position(|b| b.try_reclaim(want))
            .and_then(|i| self.spare.remove(i));
        let mut next = reused.unwrap_or_else(|| {
            self.allocated += 1;
            BytesMut::with_capacity(want)
        });
        next.clear();
        next.extend_from_slice(&self.buf[..self.filled]);
        let old_alloc = std::mem::replace(&mut self.alloc, next.capacity());
        let mut old = std::mem::replace(&mut self.buf, next);
        // Only buffers of the usual size are kept (a larger one was made for one big record).
        if old_alloc == ALLOC {
            old.clear();
            self.spare.push_back(old);
            if self.spare.len() > self.keep {
                self.spare.pop_front();
            }
        }
    }

    /// The output buffer itself, with room for about `n` more bytes, for a writer that
    /// appends to it (it grows by itself past that). Only without a codec: the buffer's
    /// length is then the output's.
    pub(super) fn direct(&mut self, n: usize) -> &mut BytesMut {
        self.reserve(n);
        self.buf.truncate(self.filled);
        &mut self.buf
    }

    /// At least `min` bytes of room after the output.
    pub(super) fn room(&mut self, min: usize) -> &mut [u8] {
        if self.buf.len() - self.filled < min {
            let want = min.max(GROW);
            self.reserve(want);
            self.buf.resize(self.filled + want, 0);
        }
        &mut self.buf[self.filled..]
    }

    /// Counts `n` bytes written into the room as output.
    pub(super) fn commit(&mut self, n: usize) {
        self.filled += n;
        debug_assert!(self.filled <= self.buf.len());
    }

    pub(super) fn take(&mut self) -> Bytes {
        let out = self.buf.split_to(self.filled).freeze();
        self.filled = 0;
        out
    }

    pub(super) fn clear(&mut self) {
        self.filled = 0;
    }
}

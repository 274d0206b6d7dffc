//! Compression for the encoder: the codecs (none, gzip, zstd) and the output buffer they
//! write into, reused across objects (see the parent module's notes on lag and memory).

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
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

/// gzip by libdeflate, which compresses a whole buffer at a time: the input gathers into
/// blocks of [`GZIP_BLOCK`] bytes, and each block becomes one gzip member (header, deflate
/// stream, CRC-32 and size). An object is the members one after another, which RFC 1952
/// allows and every gzip reader takes as one stream (gzip/zcat, Python's gzip, zlib's
/// `inflate` with automatic header detection, Hadoop's codec, DuckDB, pyarrow; the e2e test
/// reads them with several). One block costs about 0.5% of the ratio of a single stream.
pub(super) struct Gzip {
    pub(super) compressor: libdeflater::Compressor,
    /// Input not compressed yet: less than a block (its allocation kept across objects).
    pub(super) pending: Vec<u8>,
    /// Output bytes per input byte of the last member, to count the pending input at its
    /// likely compressed size ([`Sink::pending_estimate`]); 1 before the first member.
    pub(super) ratio: f64,
    /// Members written for the current object.
    pub(super) members: u64,
}

/// Input bytes per gzip member: 1 MiB. Smaller blocks cost ratio and speed (measured on the
/// bench's order rows at level 4: 256 KiB 1.9% larger objects and 10% more CPU than 1 MiB;
/// 4 MiB 0.5% smaller), and every open gzip object holds up to a block of input.
pub(super) const GZIP_BLOCK: usize = 1 << 20;

thread_local! {
    /// Where a shard's gzip members are compressed before they are copied to their object's
    /// output: one block's bound (about 1 MiB) per thread, whatever the number of objects.
    static GZIP_SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Gzip {
    pub(super) fn new(level: i32) -> Result<Gzip, String> {
        let lvl = libdeflater::CompressionLvl::new(level)
            .map_err(|_| format!("gzip level {level} is not 0 to 12"))?;
        Ok(Gzip {
            compressor: libdeflater::Compressor::new(lvl),
            pending: Vec::new(),
            ratio: 1.0,
            members: 0,
        })
    }

    /// Compresses the pending input into one member at the end of `out`, through the
    /// thread's scratch buffer (so `out` keeps its usual buffers: a member's bound is larger
    /// than one of them, and a new allocation per member would cost the kernel a zeroed page per
    /// 4 KiB). The copy is of the compressed bytes only.
    fn member(&mut self, out: &mut OutBuf) -> Result<(), String> {
        let bound = self.compressor.gzip_compress_bound(self.pending.len());
        let n = GZIP_SCRATCH.with_borrow_mut(|scratch| {
            if scratch.len() < bound {
                scratch.resize(bound, 0);
            }
            let n = self
                .compressor
                .gzip_compress(&self.pending, &mut scratch[..bound])
                .map_err(|e| format!("gzip: {e}"))?;
            out.extend(&scratch[..n]);
            Ok::<usize, String>(n)
        })?;
        if !self.pending.is_empty() {
            self.ratio = n as f64 / self.pending.len() as f64;
        }
        self.pending.clear();
        self.members += 1;
        Ok(())
    }

    /// Takes `data` in, writing a member for every block filled.
    fn write(&mut self, out: &mut OutBuf, mut data: &[u8]) -> Result<(), String> {
        while !data.is_empty() {
            if self.pending.capacity() < GZIP_BLOCK {
                self.pending.reserve_exact(GZIP_BLOCK - self.pending.len());
            }
            let take = (GZIP_BLOCK - self.pending.len()).min(data.len());
            self.pending.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.pending.len() == GZIP_BLOCK {
                self.member(out)?;
            }
        }
        Ok(())
    }

    /// The last member (an object with no input gets one empty member: still valid gzip).
    fn finish(&mut self, out: &mut OutBuf) -> Result<(), String> {
        if !self.pending.is_empty() || self.members == 0 {
            self.member(out)?;
        }
        Ok(())
    }
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
                g.pending.clear();
                g.members = 0;
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
            Codec::Gzip(g) => g.write(&mut self.out, data),
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
            Codec::Gzip(g) => g.finish(&mut self.out),
            Codec::Zstd(z) => zstd_finish(z, &mut self.out),
        };
        if let Err(e) = result {
            self.fail(e);
        }
    }

    /// Input the codec holds without having compressed it (gzip's pending block).
    pub(super) fn pending_input(&self) -> usize {
        match &self.codec {
            Codec::Gzip(g) => g.pending.len(),
            _ => 0,
        }
    }

    /// The pending input at the size it will likely have compressed (gzip: at the last
    /// member's ratio).
    pub(super) fn pending_estimate(&self) -> u64 {
        match &self.codec {
            Codec::Gzip(g) => (g.pending.len() as f64 * g.ratio).ceil() as u64,
            _ => 0,
        }
    }

    /// Lets go of the pending block's allocation while it is empty (an idle writer).
    pub(super) fn release_pending(&mut self) {
        if let Codec::Gzip(g) = &mut self.codec
            && g.pending.is_empty()
        {
            g.pending = Vec::new();
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

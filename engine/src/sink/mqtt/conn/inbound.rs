//! The reading half: the broker's packets decoded, handed to the session, and its
//! acknowledgements turned into confirmations (coalesced into ranges) or rejections; batched
//! reads of small acknowledgements.

use super::*;

/// Contiguous confirmations of one partition, reported as one range.
#[derive(Default)]
pub(super) struct Run {
    run: Option<(Slot, Offset, Offset)>,
}

impl Run {
    pub(super) fn push(&mut self, acks: &Acks, slot: Slot, offset: Offset) {
        match &mut self.run {
            Some((s, _, last)) if *s == slot && offset == last.next() => *last = offset,
            _ => {
                self.flush(acks);
                self.run = Some((slot, offset, offset));
            }
        }
    }

    pub(super) fn flush(&mut self, acks: &Acks) {
        if let Some((slot, first, last)) = self.run.take() {
            acks.confirm(slot, first, last);
        }
    }
}

pub(super) async fn read_more<R: AsyncReadRent>(r: &mut R, buf: &mut BytesMut) -> io::Result<()> {
    match spillway_net::io::read_more(r, buf, MIN_READ).await {
        Ok(0) => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the broker closed the connection",
        )),
        Ok(_) => Ok(()),
        Err(e) => Err(e),
    }
}

/// A batched read of acknowledgements (one that completes only once several can be read),
/// shared by the read loop and [`cut_batched_reads`].
#[derive(Default)]
pub(super) struct BatchedRead {
    /// When the batched read now waiting began.
    since: Cell<Option<Instant>>,
    /// The cutter, parked until a batched read begins.
    cutter: Cell<Option<Waker>>,
    /// The cutter lowered `SO_RCVLOWAT` to one acknowledgement.
    cut: Cell<bool>,
}

impl BatchedRead {
    pub(super) fn begin(&self) {
        self.since.set(Some(Instant::now()));
        if let Some(w) = self.cutter.take() {
            w.wake();
        }
    }

    pub(super) fn end(&self) {
        self.since.set(None);
    }
}

/// How long a batched read may wait before it completes with what has arrived.
pub(super) const CUT_AFTER: Duration = Duration::from_millis(1);

/// Ends a batched read that has waited [`CUT_AFTER`]: lowers `SO_RCVLOWAT` to one
/// acknowledgement, which completes the read at once with what has arrived (the kernel
/// checks a lowered mark against its queue). A read held back by `SO_RCVLOWAT` leaves the
/// small segments it has queued unACKed at the TCP level (the kernel ACKs a small segment
/// early only once the reader has emptied the queue; `TCP_QUICKACK` does not change that),
/// so a broker that holds its next acknowledgements until the last segment is ACKed
/// (Nagle's algorithm: mosquitto's default) waited for this side's delayed-ACK timer, 40 ms
/// or more, while this side waited for those acknowledgements: every batch took that long,
/// and the connection turned batching off. Cut at 1 ms, the read takes what is there, its
/// ACK releases what the broker held back, and the next batched read goes on. No timer
/// runs between batched reads: a connection that reads each acknowledgement as it comes
/// never wakes this. Never ends; it is dropped with the connection.
pub(super) async fn cut_batched_reads(
    fd: std::os::fd::RawFd,
    batched: &BatchedRead,
) -> Result<Closed, String> {
    loop {
        let since = poll_fn(|cx| match batched.since.get() {
            Some(since) => Poll::Ready(since),
            None => {
                batched.cutter.set(Some(cx.waker().clone()));
                Poll::Pending
            }
        })
        .await;
        let due = since + CUT_AFTER;
        let now = Instant::now();
        if due > now {
            monoio::time::sleep(due - now).await;
        }
        if batched.since.get() == Some(since) {
            // Still the same read, still waiting.
            spillway_net::sockopt::set_rcvlowat(fd, MIN_ACK_BYTES);
            batched.cut.set(true);
            batched.since.set(None);
        }
    }
}

pub(super) async fn read_loop<R: AsyncReadRent>(
    ctx: &Ctx,
    link: &Link,
    mut r: R,
    mut buf: BytesMut,
    fd: std::os::fd::RawFd,
    batched: &BatchedRead,
) -> Result<Closed, String> {
    // How many acknowledgements one wake-up waits for (see `ack_batching`): the PUBRELs of
    // QoS 2 must not wait long, or the broker runs out of work.
    let divisor = if ctx.cfg.qos == 2 || ctx.cfg.qos_header.is_some() {
        8
    } else {
        4
    };
    let mut lowat = 1usize;
    let mut batching = ctx.cfg.ack_batching;
    let mut stalls = 0u32;
    loop {
        process(ctx, link, &mut buf)?;
        if batching {
            let (on_wire, limit) = {
                let s = link.session.borrow();
                (s.on_wire(), s.window_limit())
            };
            // Only acknowledgements that are sure to come: each message on the wire brings
            // at least one packet of at least MIN_ACK_BYTES. Nothing is held back while
            // draining or with few messages out.
            let batch = (limit / divisor).max(1);
            let want = if on_wire >= batch && !link.closing() {
                batch
            } else {
                1
            };
            if want != lowat {
                spillway_net::sockopt::set_rcvlowat(fd, want * MIN_ACK_BYTES);
                lowat = want;
            }
        }
        // Acknowledge what arrives at once rather than after the delayed-ACK timer: a broker
        // with Nagle's algorithm on (mosquitto unless `set_tcp_nodelay true`) holds back every
        // PUBACK after the first until that first is acknowledged, and while the window is
        // closed this side has no data to carry the ACK. Without this each window round
        // waited ~40 ms (450 msgs/s against a default mosquitto). The flag is not sticky:
        // set again before every read.
        spillway_net::sockopt::set_quickack(fd);
        let waited = Instant::now();
        if lowat > 1 {
            batched.begin();
        }
        let read = read_more(&mut r, &mut buf).await;
        batched.end();
        if batched.cut.take() {
            // The mark is one acknowledgement now: the next turn sets it again.
            lowat = 1;
        }
        read.map_err(|e| e.to_string())?;
        // A batched read is cut after CUT_AFTER (see cut_batched_reads). Reads that still
        // waited ACK_STALL, twice running, mean the cut did not come in time (a shard too
        // busy to run its timers): read every acknowledgement as it comes from then on.
        if lowat > 1 {
            stalls = if waited.elapsed() >= ACK_STALL {
                stalls + 1
            } else {
                0
            };
            if stalls >= 2 {
                batching = false;
                lowat = 1;
                spillway_net::sockopt::set_rcvlowat(fd, MIN_ACK_BYTES);
                info!(
                    sink = %ctx.sink,
                    conn = link.index,
                    "batched reads of acknowledgements waited over {} ms twice running, \
                     though each is cut after {} ms (this shard runs its timers late): \
                     ack_batching is off on this connection",
                    ACK_STALL.as_millis(),
                    CUT_AFTER.as_millis()
                );
            }
        }
    }
}

/// How long a batched read may wait (though cut after [`CUT_AFTER`]) before batching is
/// turned off for the connection.
pub(super) const ACK_STALL: Duration = Duration::from_millis(30);

/// The smallest acknowledgement on the wire (PUBACK, PUBREC, PUBCOMP: fixed header and
/// packet id).
pub(super) const MIN_ACK_BYTES: usize = 4;

/// What a packet from the broker that does not decode is called in the log.
pub(super) fn inbound_error(e: &DecodeError) -> String {
    match e {
        DecodeError::PacketTooLarge { size, max } => format!(
            "the broker sent a packet of {size} bytes, more than \
             sink.mqtt.max_incoming_packet_size ({max} bytes); dropping the connection"
        ),
        other => format!("malformed packet from the broker: {other}"),
    }
}

/// Decodes and handles every whole packet in `buf`; returns how many there were.
pub(super) fn process(ctx: &Ctx, link: &Link, buf: &mut BytesMut) -> Result<usize, String> {
    let now = Instant::now();
    let opts = link.session.borrow().decode_options();
    let mut run = Run::default();
    let mut rejected = Vec::new();
    let mut result = Ok(());
    let mut packets = 0;
    loop {
        match decode(buf, &opts) {
            Ok(Decoded::Packet(packet)) => {
                packets += 1;
                let event = {
                    let mut out = link.out.borrow_mut();
                    link.session.borrow_mut().handle(packet, &mut out, now)
                };
                match event {
                    Ok(Some(Event::Completed(c))) => {
                        if c.token.status {
                            if !c.is_success() {
                                rejected.push((
                                    c.token,
                                    format!("reason {:#04x} ({})", c.reason.0, c.reason.name()),
                                    c.reason,
                                ));
                            }
                        } else if c.is_success() {
                            link.largest_accepted
                                .set(link.largest_accepted.get().max(c.payload_len));
                            run.push(&ctx.acks, c.token.slot, c.token.offset);
                        } else {
                            let (ack, kind) = if c.qos == QoS::AtLeastOnce {
                                ("PUBACK", PacketType::PubAck)
                            } else {
                                ("PUBREC", PacketType::PubRec)
                            };
                            let mut reason = format!(
                                "the broker rejected it: {ack} reason {:#04x} ({})",
                                c.reason.0,
                                c.reason.name()
                            );
                            if c.reason.off_list(kind, Protocol::V5) {
                                reason.push_str(&format!(
                                    " [a code MQTT 5 does not list for {ack}: the broker is off \
                                     the specification; taken as this message's refusal]"
                                ));
                                if !link.off_spec.replace(true) {
                                    warn!(
                                        sink = %ctx.sink,
                                        conn = link.index,
                                        "the MQTT broker answered a PUBLISH with {ack} reason \
                                         {:#04x} ({}), a code MQTT 5 does not list for {ack}; \
                                         each such answer is taken as that message's refusal \
                                         (to on_error), the connection is kept",
                                        c.reason.0,
                                        c.reason.name()
                                    );
                                }
                            }
                            if let Some(s) = &c.reason_string {
                                reason.push_str(": ");
                                reason.push_str(s.as_str());
                            }
                            rejected.push((c.token, reason, c.reason));
                        }
                    }
                    Ok(Some(Event::Disconnected(d))) => {
                        let mut why = format!(
                            "the broker sent DISCONNECT: {} ({:#04x})",
                            d.reason.name(),
                            d.reason.0
                        );
                        if let Some(s) = d.properties.reason_string.as_ref() {
                            why.push_str(": ");
                            why.push_str(s.as_str());
                        }
                        result = Err(why);
                        break;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        result = Err(e.to_string());
                        break;
                    }
                }
            }
            Ok(Decoded::Incomplete { .. }) => break,
            Err(e) => {
                result = Err(inbound_error(&e));
                break;
            }
        }
    }
    run.flush(&ctx.acks);
    for (token, reason, code) in rejected {
        ctx.reject(link, token, reason, Some(code));
    }
    if result.is_ok() {
        let mut out = link.out.borrow_mut();
        link.session
            .borrow_mut()
            .poll_transmit(&mut out, now)
            .map_err(|e| e.to_string())?;
    }
    link.wake();
    result.map(|()| packets)
}

//! The writing half: queued messages moved into the session while its window has room
//! (paced by `max_publish_rate`), gathered into vectored writes; QoS 0 confirmed once written.

use super::*;

/// Writes everything queued in `out` (one vectored write, more if the kernel takes part).
/// `spare` keeps the iovec list between writes (refilled, not allocated per write); a write
/// that fails or times out takes it along and the next one starts a new list.
pub(super) async fn write_out<W: AsyncWriteRent>(
    w: &mut W,
    link: &Link,
    spare: &mut Option<IoVecs>,
    limit: Duration,
) -> io::Result<()> {
    let mut iov = spare.take().unwrap_or_else(IoVecs::empty);
    {
        let mut out = link.out.borrow_mut();
        out.seal();
        iov.refill(std::iter::from_fn(|| out.pop_chunk()));
    }
    let mut sent = spillway_net::io::write_vectored(w, iov, limit).await?;
    // Let go of the buffers written (payloads shared with a poll's reply among them).
    sent.refill(std::iter::empty());
    *spare = Some(sent);
    spillway_net::io::flush(w, limit).await
}

/// When a paced connection (`max_publish_rate`) with messages queued gets its next token.
pub(super) fn paced_until(link: &Link) -> Option<Instant> {
    if link.queue.borrow().is_empty() {
        return None;
    }
    link.pace
        .borrow()
        .as_ref()
        .filter(|p| p.tokens < 1.0)
        .map(Pace::next)
}

/// Moves queued messages into the session while its window has room (QoS 0 always), up to
/// [`MAX_WRITE`] bytes per write.
pub(super) fn fill(ctx: &Ctx, link: &Link, now: Instant) {
    let mut rejected = Vec::new();
    {
        let mut queue = link.queue.borrow_mut();
        let mut session = link.session.borrow_mut();
        let mut out = link.out.borrow_mut();
        let mut qos0 = link.qos0.borrow_mut();
        let mut pace = link.pace.borrow_mut();
        // Refill the window in batches: a broker that acknowledges one message per write
        // (mosquitto) would otherwise get one PUBLISH per PUBACK, a system call or two each
        // way per message. QoS 1/2 messages wait until a quarter of the window is free (or
        // nothing is in flight); the cost is at most a quarter window of latency.
        let limit = session.window_limit();
        let held = session.in_flight();
        let gated = held > 0 && limit.saturating_sub(held) < (limit / 4).max(1);
        while out.len() < MAX_WRITE {
            if gated
                && queue
                    .front()
                    .is_some_and(|i| i.publish.qos != QoS::AtMostOnce)
            {
                break;
            }
            if queue.is_empty() {
                break;
            }
            if let Some(p) = pace.as_mut()
                && !p.take(now)
            {
                // Paced: the writer sleeps until the next token (`paced_until`).
                break;
            }
            let Some(item) = queue.pop_front() else {
                break;
            };
            match session.publish(item.publish, item.token, &mut out, now) {
                Ok(Sent::AtMostOnce(token)) => qos0.push(token),
                Ok(Sent::Tracked(_)) => {}
                Err(e) if !e.kind.is_permanent() => {
                    queue.push_front(Item {
                        publish: e.publish,
                        token: e.token,
                    });
                    if let Some(p) = pace.as_mut() {
                        p.tokens += 1.0;
                    }
                    break;
                }
                Err(e) => {
                    let reason = format!("cannot be sent to this broker: {}", e.kind);
                    rejected.push((e.token, reason));
                }
            }
        }
        let n = session.in_flight();
        if n > link.peak_in_flight.get() {
            link.peak_in_flight.set(n);
        }
    }
    for (token, reason) in rejected {
        ctx.reject(link, token, reason, None);
    }
}

pub(super) enum Work {
    Write,
    Disconnect,
}

pub(super) async fn write_loop<W: AsyncWriteRent>(
    ctx: &Ctx,
    link: &Link,
    mut w: W,
    limit: Duration,
) -> Result<Closed, String> {
    let mut chunks: Option<IoVecs> = None;
    loop {
        let work = loop {
            let wait = poll_fn(|cx| {
                if link.stopped() {
                    return Poll::Ready(Err("stopped".to_owned()));
                }
                fill(ctx, link, Instant::now());
                if !link.out.borrow().is_empty() {
                    return Poll::Ready(Ok(Work::Write));
                }
                if link.closing() && link.idle() {
                    return Poll::Ready(Ok(Work::Disconnect));
                }
                link.writer.set(Some(cx.waker().clone()));
                Poll::Pending
            });
            let due = link.session.borrow().poll_timeout();
            let due = match (due, paced_until(link)) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let Some(t) = due else {
                break wait.await?;
            };
            let sleep = monoio::time::sleep(t.saturating_duration_since(Instant::now()));
            let woke = monoio::select! {
                r = wait => Some(r),
                () = sleep => None,
            };
            match woke {
                Some(r) => break r?,
                None => {
                    let mut out = link.out.borrow_mut();
                    link.session
                        .borrow_mut()
                        .handle_timeout(&mut out, Instant::now())
                        .map_err(|e| match e {
                            SessionError::AckTimeout { .. } => {
                                format!("{e}: sink.mqtt.ack_timeout")
                            }
                            other => other.to_string(),
                        })?;
                }
            }
        };
        if let Work::Disconnect = work {
            let mut out = link.out.borrow_mut();
            let mut session = link.session.borrow_mut();
            let mut disconnect = Disconnect::default();
            if let Some(will) = shutdown_will(ctx, link) {
                match session.protocol() {
                    // Disconnect with Will Message (MQTT 5 §3.14.2.1): the broker publishes it.
                    Protocol::V5 => disconnect.reason = ReasonCode(0x04),
                    // 3.1.1 has no such DISCONNECT: publish the will's message here, at QoS 0
                    // (nothing waits for its acknowledgement), just before DISCONNECT.
                    Protocol::V311 => {
                        if let Ok(Sent::AtMostOnce(t)) =
                            session.publish(will, Token::status(), &mut out, Instant::now())
                        {
                            link.qos0.borrow_mut().push(t);
                        }
                    }
                }
            }
            let _ = session.disconnect(disconnect, &mut out, Instant::now());
        }
        let written = std::mem::take(&mut *link.qos0.borrow_mut());
        if let Err(e) = write_out(&mut w, link, &mut chunks, limit).await {
            // Not written: polled again after the reconnect (see `lost`).
            link.qos0.borrow_mut().extend(written);
            return Err(e.to_string());
        }
        let mut run = Run::default();
        for t in written.into_iter().filter(|t| !t.status) {
            run.push(&ctx.acks, t.slot, t.offset);
        }
        run.flush(&ctx.acks);
        if let Work::Disconnect = work {
            info!(sink = %ctx.sink, conn = link.index, "sent DISCONNECT to the MQTT broker");
            return Ok(Closed::Drained);
        }
    }
}

//! The MQTT sink: every message to an MQTT 3.1.1 or 5 broker, each acknowledgement tied back to
//! its Iggy offset.
//!
//! Per shard the sink keeps `connections` broker connections ([`conn`]), each with its own
//! packet-id window in the codec's [`spillway_codec::session::Session`]. A partition always
//! uses the same connection (slot modulo connections), so its messages reach the broker in
//! offset order, re-sends included. [`shape`] turns a message into a PUBLISH (topic from
//! [`crate::template::topic`], QoS, retain, envelope, MQTT 5 properties). An offset is confirmed to the engine
//! on PUBACK (QoS 1), PUBCOMP (QoS 2) or once written to the socket (QoS 0); a broker
//! rejection (reason code 0x80 or more) or a message that cannot be routed goes to the sink's
//! `on_error` policy, `dead_letter` publishing it to `dead_letter_topic` with the reason.

mod conn;
mod shape;

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tracing::{info, warn};

use self::conn::{Ctx, Item, Link, Phase, Token};
use self::shape::{Kept, Shaper};
use super::Sink;
use crate::acks::{Acks, SinkStatus};
use crate::config::{ErrorPolicy, SinkConfig};
use crate::error::EngineError;
use crate::ids::{Offset, Slot};
use crate::message::Batch;

/// See the module docs.
pub struct MqttSink {
    ctx: Rc<Ctx>,
    links: Vec<Rc<Link>>,
    /// Keep each message for the dead-letter topic until it is confirmed.
    keep: bool,
    started: bool,
}

impl std::fmt::Debug for MqttSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MqttSink")
            .field("sink", &self.ctx.sink)
            .field("address", &self.ctx.cfg.address)
            .field("links", &self.links)
            .finish()
    }
}

impl MqttSink {
    /// The sink of `config` on shard `shard`.
    pub fn new(config: &SinkConfig, shard: usize, acks: Acks) -> Result<MqttSink, EngineError> {
        let err = |e: String| EngineError::config(format!("sink {:?}: {e}", config.name));
        let cfg = config
            .mqtt
            .clone()
            .ok_or_else(|| err("[sink.mqtt] is missing".to_owned()))?;
        let shaper = Shaper::new(&cfg).map_err(err)?;
        let tls = if cfg.tls {
            let client = match (&cfg.tls_cert, &cfg.tls_key) {
                (Some(c), Some(k)) => Some((c.as_path(), k.as_path())),
                _ => None,
            };
            let config = crate::tls::client_config(
                cfg.tls_ca.as_deref(),
                client,
                &cfg.alpn.iter().map(String::as_bytes).collect::<Vec<_>>(),
            )
            .map_err(|e| err(format!("mqtt TLS: {e}")))?;
            let names = cfg
                .addresses()
                .map(|a| crate::tls::server_name(a, cfg.tls_server_name.as_deref()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| err(format!("mqtt.tls_server_name: {e}")))?;
            Some((config, names))
        } else {
            None
        };
        let dead_letter_topic = match &cfg.dead_letter_topic {
            Some(t) => Some(
                crate::template::topic::topic_name(Bytes::copy_from_slice(t.as_bytes()))
                    .map_err(|e| err(format!("mqtt.dead_letter_topic: {e}")))?,
            ),
            None => None,
        };
        let links = (0..usize::from(cfg.connections.max(1)))
            .map(|i| Rc::new(Link::new(i, &cfg)))
            .collect();
        let keep = config.on_error == ErrorPolicy::DeadLetter;
        if cfg.protocol == crate::config::MqttVersion::V311
            && cfg.may_use_qos2()
            && cfg.window() > crate::config::V311_QOS2_WINDOW
        {
            // MQTT 3.1.1 has no Receive Maximum to learn the broker's limit from, and
            // mosquitto answers PUBREC/PUBCOMP for QoS 2 messages past its
            // max_inflight_messages (20 by default) but drops them (see tuning.md). The
            // default window is within it; a larger one was asked for.
            warn!(
                sink = %config.name,
                "MQTT 3.1.1 with QoS 2 and max_inflight = {}: the broker must accept that many QoS 2 messages in flight from one client, or it loses the rest while acknowledging them (mosquitto and VerneMQ: max_inflight_messages, 20 by default; EMQX: max_awaiting_rel, 100); set the broker's limit to at least this, or lower max_inflight",
                cfg.window()
            );
        }
        Ok(MqttSink {
            ctx: Rc::new(Ctx {
                sink: config.name.clone(),
                shard,
                acks,
                policy: config.on_error,
                dead_letter_topic,
                shaper: Rc::new(RefCell::new(shaper)),
                tls,
                fatal: RefCell::new(None),
                dead_letter_log: RefCell::new(crate::ratelog::RateLimit::new(
                    crate::ratelog::PER_MESSAGE_INTERVAL,
                    crate::ratelog::PER_MESSAGE_BURST,
                )),
                changes: crate::signal::Signal::default(),
                cfg,
            }),
            links,
            keep,
            started: false,
        })
    }

    fn check(&self) -> Result<(), EngineError> {
        match &*self.ctx.fatal.borrow() {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Waits until every link is `done`, a fatal error is set, or `deadline`: woken by the
    /// links' changes, not by polling a clock.
    async fn wait_links(&self, deadline: Instant, done: impl Fn(&Link) -> bool) {
        while self.ctx.fatal.borrow().is_none() && !self.links.iter().all(|l| done(l)) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero()
                || monoio::time::timeout(left, self.ctx.changes.next())
                    .await
                    .is_err()
            {
                break;
            }
        }
    }

    fn stop_links(&self) {
        for l in &self.links {
            l.stop();
        }
    }

    /// The most QoS 1/2 messages that were in flight at once on any connection.
    pub fn peak_in_flight(&self) -> usize {
        self.links
            .iter()
            .map(|l| l.peak_in_flight.get())
            .max()
            .unwrap_or(0)
    }
}

impl Drop for MqttSink {
    fn drop(&mut self) {
        self.stop_links();
    }
}

impl Sink for MqttSink {
    async fn start(&mut self) -> Result<(), EngineError> {
        if !self.started {
            self.started = true;
            for link in &self.links {
                monoio::spawn(conn::run(Rc::clone(&self.ctx), Rc::clone(link)));
            }
        }
        // Wait for the first attempt of every connection: a refusal (credentials, TLS) stops
        // the sink before anything is polled; a broker that is not reachable yet is retried
        // in the background while messages queue up to the windows.
        let limit = self.ctx.cfg.connect_timeout.0 * 2 + Duration::from_secs(1);
        let deadline = Instant::now() + limit;
        self.wait_links(deadline, |l| l.tried()).await;
        if let Err(e) = self.check() {
            self.stop_links();
            return Err(e);
        }
        // A connection that is not up yet has said why (and that it reconnects) itself.
        Ok(())
    }

    async fn deliver(&mut self, batch: Batch) -> Result<(), EngineError> {
        self.check()?;
        let p = Rc::clone(&batch.partition);
        let link = &self.links[p.slot.0 % self.links.len()];
        let mut rejected = Vec::new();
        {
            let mut shaper = self.ctx.shaper.borrow_mut();
            let mut queue = link.queue.borrow_mut();
            queue.reserve(batch.messages.len());
            for m in batch.messages {
                let shaped = shaper.shape(&p, &m);
                let offset = m.offset;
                let kept = self.keep.then(|| {
                    Box::new(Kept {
                        partition: Rc::clone(&p),
                        message: m,
                    })
                });
                let token = Token {
                    slot: p.slot,
                    offset: Offset(offset),
                    kept,
                    dead_letter: false,
                    status: false,
                };
                match shaped {
                    Ok(publish) => queue.push_back(Item { publish, token }),
                    Err(reason) => rejected.push((token, reason)),
                }
            }
        }
        for (token, reason) in rejected {
            self.ctx.reject(link, token, reason, None);
        }
        link.wake();
        Ok(())
    }

    async fn tick(&mut self) -> Result<(), EngineError> {
        self.check()
    }

    async fn drain(&mut self, deadline: Instant) -> Result<(), EngineError> {
        if let Some(n) = self
            .ctx
            .dead_letter_log
            .borrow_mut()
            .due(Instant::now(), true)
        {
            warn!(
                sink = %self.ctx.sink,
                "{n} more rejected messages went to the dead-letter topic without a line of \
                 their own (a few a second are logged one by one)"
            );
        }
        for l in &self.links {
            l.drain();
        }
        self.wait_links(deadline, |l| l.phase() == Phase::Finished)
            .await;
        let unfinished = self
            .links
            .iter()
            .filter(|l| l.phase() != Phase::Finished)
            .count();
        if unfinished > 0 {
            let held: usize = self
                .links
                .iter()
                .map(|l| l.queue.borrow().len() + l.session.borrow().in_flight())
                .sum();
            warn!(
                sink = %self.ctx.sink,
                "shutdown deadline reached with {held} messages unconfirmed; their offsets are not committed"
            );
        } else {
            info!(sink = %self.ctx.sink, "MQTT connections closed");
        }
        self.stop_links();
        self.check()
    }

    fn release(&mut self, slot: Slot) {
        self.links[slot.0 % self.links.len()].release(slot);
        self.ctx.shaper.borrow_mut().release(slot);
    }

    fn status(&self) -> SinkStatus {
        SinkStatus {
            // Stopped links (a drain closed them) are not down.
            failing: self.started
                && self
                    .links
                    .iter()
                    .any(|l| matches!(l.phase(), Phase::Starting | Phase::Down) && !l.stopped()),
            reconnects: self.links.iter().map(|l| l.reconnects.get()).sum(),
            in_flight_peak: self.peak_in_flight() as u64,
            buffered_peak: 0,
            retries: 0,
            requests: 0,
            ..SinkStatus::default()
        }
    }
}

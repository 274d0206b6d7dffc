//! The peer: rumqttc 0.25 (the client of the proposed Apache Iggy MQTT sink), its MQTT 5
//! client (`rumqttc::v5`), default features off (no TLS).
//!
//! It runs on a thread of its own, pinned to the core the engine's shard gets, with a tokio
//! current-thread runtime: an `AsyncClient` task publishes every message (`publish` with the
//! topic as a `String` and the payload as a `Bytes` clone, the cheapest call rumqttc offers:
//! no payload copy on our side), while the `EventLoop` is polled on the same thread, counting
//! PUBACKs (QoS 1), PUBCOMPs (QoS 2) or, at QoS 0, outgoing PUBLISH events (rumqttc reports
//! one after the packet has been written and flushed). Its window is
//! `set_outgoing_inflight_upper_limit` (the broker's Receive Maximum lowers it further), and
//! its request channel holds as many requests as the window. Once all are confirmed it
//! sends DISCONNECT and waits until that is written.

use std::time::Instant;

use bytes::Bytes;
use rumqttc::Outgoing;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::Packet;
use rumqttc::v5::{AsyncClient, Event, MqttOptions};

use super::Job;

/// The peer is compiled in.
pub const AVAILABLE: bool = true;

/// A running peer.
pub struct Running {
    thread: std::thread::JoinHandle<Result<Instant, String>>,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running").finish_non_exhaustive()
    }
}

/// Starts the peer on its own thread.
pub fn start(job: &Job<'_>) -> Result<Running, String> {
    let core = job.core;
    let host = job.addr.ip().to_string();
    let port = job.addr.port();
    let client_id = format!("rumqttc-{}", job.name);
    let topic = job.topic.to_owned();
    let qos = match job.qos {
        0 => QoS::AtMostOnce,
        1 => QoS::AtLeastOnce,
        _ => QoS::ExactlyOnce,
    };
    let messages = job.messages;
    let window = job.window;
    let payload = Bytes::from(vec![b'x'; job.size]);
    let thread = std::thread::Builder::new()
        .name("rumqttc-peer".into())
        .spawn(move || {
            if let Err(e) = monoio::utils::bind_to_cpu_set([core]) {
                return Err(format!("pinning the peer to core {core}: {e:?}"));
            }
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("tokio runtime: {e}"))?;
            let mut opts = MqttOptions::new(client_id, host, port);
            opts.set_clean_start(true);
            opts.set_outgoing_inflight_upper_limit(window);
            rt.block_on(publish_all(opts, topic, qos, payload, messages, window))
        })
        .map_err(|e| format!("spawning the peer: {e}"))?;
    Ok(Running { thread })
}

impl Running {
    /// Whether the peer's thread has ended.
    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }

    /// Waits for the peer to finish; the time it did.
    pub fn finish(self) -> Result<Instant, String> {
        self.thread
            .join()
            .unwrap_or_else(|_| Err("the peer thread panicked".into()))
    }
}

async fn publish_all(
    opts: MqttOptions,
    topic: String,
    qos: QoS,
    payload: Bytes,
    messages: u64,
    window: u16,
) -> Result<Instant, String> {
    let (client, mut eventloop) = AsyncClient::new(opts, usize::from(window));
    let publisher = {
        let client = client.clone();
        tokio::spawn(async move {
            for _ in 0..messages {
                client
                    .publish(topic.clone(), qos, false, payload.clone())
                    .await
                    .map_err(|e| format!("publish: {e}"))?;
            }
            Ok::<(), String>(())
        })
    };
    let mut confirmed = 0u64;
    while confirmed < messages {
        let event = eventloop
            .poll()
            .await
            .map_err(|e| format!("rumqttc event loop after {confirmed} confirmed: {e}"))?;
        match event {
            Event::Incoming(Packet::PubAck(_)) if qos == QoS::AtLeastOnce => confirmed += 1,
            Event::Incoming(Packet::PubComp(_)) if qos == QoS::ExactlyOnce => confirmed += 1,
            Event::Outgoing(Outgoing::Publish(_)) if qos == QoS::AtMostOnce => confirmed += 1,
            Event::Incoming(Packet::Disconnect(d)) => {
                return Err(format!("the broker sent DISCONNECT: {d:?}"));
            }
            _ => {}
        }
    }
    let done = Instant::now();
    match publisher.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e),
        Err(e) => return Err(format!("the publishing task failed: {e}")),
    }
    client
        .disconnect()
        .await
        .map_err(|e| format!("disconnect: {e}"))?;
    // Until DISCONNECT is written (bounded: the event loop ends with an error otherwise).
    for _ in 0..1000 {
        match eventloop.poll().await {
            Ok(Event::Outgoing(Outgoing::Disconnect)) | Err(_) => break,
            Ok(_) => {}
        }
    }
    Ok(done)
}

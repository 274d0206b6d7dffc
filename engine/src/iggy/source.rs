//! One sink's source in Iggy: what it reads (stream, topic, consumer or consumer group) and,
//! for the runner, the connection to the server (or to a cluster's leader) with the requests
//! the flow asks for. Errors come back as [`IggyError`]; the runner puts them in the flow's
//! terms.

use iggy_binary_protocol::{WireConsumer, WireIdentifier};

use super::client::{Credentials, IggyClient, PartitionState, wire_ident};
use super::cluster::Finder;
use super::conn::Endpoint;
use super::error::IggyError;
use super::poll::Polled;
use crate::config::SinkConfig;
use crate::error::EngineError;
use crate::ids::{Offset, PartitionId};
use crate::message::Message;

/// What a sink reads from Iggy, as the wire names it: built once from the sink's config and
/// used by the engine's runners and the `offsets` tool alike.
#[derive(Debug, Clone)]
pub struct Target {
    /// `sink.stream`.
    pub stream: WireIdentifier,
    /// `sink.topic`.
    pub topic: WireIdentifier,
    /// The consumer whose offsets are stored: the group when there is one, else
    /// `sink.consumer` (or the sink's name).
    pub consumer: WireConsumer,
    /// `sink.consumer_group`.
    pub group: Option<WireIdentifier>,
    /// `sink.stream` as configured, for messages.
    pub stream_name: String,
    /// `sink.topic` as configured, for messages.
    pub topic_name: String,
}

impl Target {
    /// The target of `sink`; an error names the key (a sink without a stream or topic reads
    /// from elsewhere, such as the generator).
    pub fn of(sink: &SinkConfig) -> Result<Target, EngineError> {
        let (Some(stream), Some(topic)) = (&sink.stream, &sink.topic) else {
            return Err(EngineError::config(
                "sink.stream and sink.topic are needed to read from Iggy",
            ));
        };
        let bad = |key: &str, e: &dyn std::fmt::Display| EngineError::config(format!("{key}: {e}"));
        let group = sink
            .consumer_group
            .as_ref()
            .map(|g| WireIdentifier::named(g.clone()))
            .transpose()
            .map_err(|e| bad("sink.consumer_group", &e))?;
        let consumer = match &group {
            Some(g) => WireConsumer::consumer_group(g.clone()),
            None => WireConsumer::consumer(
                WireIdentifier::named(sink.consumer_name().to_owned())
                    .map_err(|e| bad("sink.consumer", &e))?,
            ),
        };
        let ident = |key: &str, i| {
            wire_ident(i).map_err(|e| EngineError::new(e.class(), format!("{key}: {e}")))
        };
        Ok(Target {
            stream: ident("sink.stream", stream)?,
            topic: ident("sink.topic", topic)?,
            consumer,
            group,
            stream_name: stream.to_string(),
            topic_name: topic.to_string(),
        })
    }
}

/// A runner's source in Iggy: the target, the node to talk to, and the client while connected.
#[derive(Debug)]
pub struct IggySource {
    target: Target,
    endpoint: Endpoint,
    /// The node to talk to: the server, or a cluster's leader.
    finder: Finder,
    creds: Credentials,
    client: Option<IggyClient>,
    /// The sink's name and its `sink.consumer_group`, for messages.
    sink: String,
    group_name: Option<String>,
    /// The partitions of the topic (explicit mode): checked at connect.
    explicit: Vec<u32>,
    /// The partitions' heads as last fetched (for `start = "latest"`), until the assignment
    /// changes or the link drops.
    heads: Option<Vec<PartitionState>>,
}

/// Not connected: what a request made between a lost link and the next connect gets.
fn not_connected() -> IggyError {
    IggyError::Io(std::io::ErrorKind::NotConnected.into())
}

impl IggySource {
    /// The source of `sink` on `endpoint`, reading `explicit` (or what its group assigns).
    pub fn new(
        sink: &SinkConfig,
        target: Target,
        endpoint: Endpoint,
        creds: Credentials,
        explicit: Vec<u32>,
    ) -> IggySource {
        IggySource {
            target,
            finder: Finder::new(endpoint.addresses.clone()),
            endpoint,
            creds,
            client: None,
            sink: sink.name.clone(),
            group_name: sink.consumer_group.clone(),
            explicit,
            heads: None,
        }
    }

    /// Whether it reads as a member of a consumer group.
    pub fn in_group(&self) -> bool {
        self.target.group.is_some()
    }

    /// Whether it talks to a cluster (the leader of a replicated one).
    pub fn clustered(&self) -> bool {
        self.finder.roster().is_some()
    }

    /// Where it talks to, for an error met while setting up: ` (Iggy at ADDRESS)`.
    pub fn location(&self) -> String {
        format!(
            " (Iggy at {})",
            self.finder
                .current()
                .map_or_else(|| self.endpoint.listed(), str::to_owned)
        )
    }

    /// Drops the connection after `e`; an eviction, or a request the server says it already
    /// applied, also forgets the client's identity, so that the next login is a new client.
    pub fn disconnect(&mut self, e: &IggyError) {
        self.client = None;
        self.heads = None;
        if matches!(
            e,
            IggyError::Evicted { .. }
                | IggyError::Status {
                    code: super::ResultCode::RequestAlreadyApplied
                }
        ) {
            self.finder.forget_client();
        }
    }

    /// Connects, then checks the stream, the topic and the explicit partitions.
    pub async fn connect(&mut self) -> Result<(), IggyError> {
        let t = &self.target;
        let (stream_name, topic_name) = (&t.stream_name, &t.topic_name);
        let mut client = self.finder.connect(&self.endpoint, &self.creds).await?;
        if !client.stream_exists(&t.stream).await? {
            return Err(IggyError::NotFound(format!(
                "stream {stream_name} not found (key sink.stream of sink {:?})",
                self.sink
            )));
        }
        let Some(heads) = client.topic(&t.stream, &t.topic).await? else {
            return Err(IggyError::NotFound(format!(
                "topic {topic_name} not found in stream {stream_name} (key sink.topic of sink {:?})",
                self.sink
            )));
        };
        if t.group.is_none() {
            for &p in &self.explicit {
                if !heads.iter().any(|h| h.id == p) {
                    let ids: Vec<String> = heads.iter().map(|h| h.id.to_string()).collect();
                    return Err(IggyError::NotFound(format!(
                        "partition {p} not found in {stream_name}/{topic_name} (it has partitions {}; key sink.partitions of sink {:?})",
                        ids.join(", "),
                        self.sink
                    )));
                }
            }
        }
        self.client = Some(client);
        self.heads = Some(heads);
        Ok(())
    }

    /// Joins the consumer group; `None` when there is nothing to join with (no group, or not
    /// connected).
    pub async fn join(&mut self) -> Option<Result<(), IggyError>> {
        let t = &self.target;
        let (Some(client), Some(group)) = (self.client.as_mut(), t.group.as_ref()) else {
            return None;
        };
        let result = client.join_group(&t.stream, &t.topic, group).await;
        Some(result.map_err(|e| match e {
            IggyError::Status {
                code:
                    super::ResultCode::ConsumerGroupIdNotFound
                    | super::ResultCode::ConsumerGroupNameNotFound,
            } => IggyError::NotFound(format!(
                "consumer group {:?} not found in {}/{} (create it first; key sink.consumer_group of sink {:?})",
                self.group_name.as_deref().unwrap_or_default(),
                t.stream_name,
                t.topic_name,
                self.sink
            )),
            e => e,
        }))
    }

    /// This member's generation and partitions (`Ok(None)`: not a member); `None` when there
    /// is nothing to ask (no group, or not connected).
    pub async fn sync(&mut self) -> Option<Result<Option<(u64, Vec<PartitionId>)>, IggyError>> {
        let t = &self.target;
        let (Some(client), Some(group)) = (self.client.as_mut(), t.group.as_ref()) else {
            return None;
        };
        let synced = client.sync_group(&t.stream, &t.topic, group).await;
        Some(synced.map(|m| {
            m.map(|(generation, ids)| (generation, ids.into_iter().map(PartitionId).collect()))
        }))
    }

    /// Leaves the consumer group, when in one and connected.
    pub async fn leave(&mut self) -> Option<Result<(), IggyError>> {
        let t = &self.target;
        let (Some(client), Some(group)) = (self.client.as_mut(), t.group.as_ref()) else {
            return None;
        };
        Some(client.leave_group(&t.stream, &t.topic, group).await)
    }

    /// Forgets the heads fetched so far: partitions new to this member start from heads
    /// fetched after the change.
    pub fn forget_heads(&mut self) {
        self.heads = None;
    }

    /// A ping; `None` when not connected.
    pub async fn ping(&mut self) -> Option<Result<(), IggyError>> {
        Some(self.client.as_mut()?.ping().await)
    }

    /// The stored offset of `partition` and, when `need_head` and nothing is stored, its head
    /// (the last offset, when it holds messages).
    pub async fn open(
        &mut self,
        partition: PartitionId,
        need_head: bool,
    ) -> Result<(Option<Offset>, Option<Offset>), IggyError> {
        let t = &self.target;
        let client = self.client.as_mut().ok_or_else(not_connected)?;
        let stored = client.stored_offset(t, partition.0).await?.map(Offset);
        let mut head = None;
        if need_head && stored.is_none() {
            if self.heads.is_none() {
                self.heads = Some(client.topic(&t.stream, &t.topic).await?.unwrap_or_default());
            }
            head = self
                .heads
                .iter()
                .flatten()
                .find(|h| h.id == partition.0)
                .filter(|h| h.messages_count > 0)
                .map(|h| Offset(h.current_offset));
        }
        Ok((stored, head))
    }

    /// Bounds the client's requests to end by `cap` (`None`: by the request timeout alone).
    pub fn cap_requests(&mut self, cap: Option<std::time::Instant>) {
        if let Some(client) = self.client.as_mut() {
            client.cap_requests(cap);
        }
    }

    /// Stores `offset` (the last delivered) for `partition`.
    pub async fn store(&mut self, partition: PartitionId, offset: Offset) -> Result<(), IggyError> {
        let client = self.client.as_mut().ok_or_else(not_connected)?;
        client
            .store_offset(&self.target, partition.0, offset.0)
            .await
    }

    /// Polls up to `count` messages of `partition` from `offset` into `messages`; `None` when
    /// not connected.
    pub async fn poll(
        &mut self,
        partition: PartitionId,
        offset: Offset,
        count: u32,
        messages: &mut Vec<Message>,
    ) -> Option<Result<Polled, IggyError>> {
        let client = self.client.as_mut()?;
        Some(
            client
                .poll(&self.target, partition.0, offset.0, count, messages)
                .await,
        )
    }
}

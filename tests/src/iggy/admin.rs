//! [`IggyAdmin`]: a small synchronous Iggy client over `std::net` for tests, speaking the VSR
//! framing the way the SDK does (`core/sdk/src/vsr.rs`): one request in flight, login as a
//! `Register`, non-replicated reads carrying their code in `reserved[0..4]`, metadata requests
//! numbered and stamped with the XxHash3 of their body, partition requests numbered (as the
//! released 0.9.0 SDK does) but not stamped. It works
//! against the stand-in and against a real server.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use iggy_binary_protocol::batch::decode_batch_slice;
use iggy_binary_protocol::codes::{
    CREATE_CONSUMER_GROUP_CODE, CREATE_STREAM_CODE, CREATE_TOPIC_CODE, DELETE_CONSUMER_GROUP_CODE,
    DELETE_STREAM_CODE, GET_CONSUMER_OFFSET_CODE, GET_STREAM_CODE, GET_TOPIC_CODE,
    JOIN_CONSUMER_GROUP_CODE, LEAVE_CONSUMER_GROUP_CODE, LOGIN_REGISTER_CODE,
    LOGIN_REGISTER_WITH_PAT_CODE, LOGOUT_USER_CODE, PING_CODE, POLL_MESSAGES_CODE,
    SEND_MESSAGES_CODE, STORE_CONSUMER_OFFSET_CODE, SYNC_CONSUMER_GROUP_CODE,
};
use iggy_binary_protocol::consensus::{result_code, result_section_len};
use iggy_binary_protocol::requests::consumer_groups::{
    CreateConsumerGroupRequest, DeleteConsumerGroupRequest, JoinConsumerGroupRequest,
    LeaveConsumerGroupRequest, SyncConsumerGroupRequest,
};
use iggy_binary_protocol::requests::consumer_offsets::{
    GetConsumerOffsetRequest, StoreConsumerOffsetRequest,
};
use iggy_binary_protocol::requests::messages::{
    PollMessagesRequest, RawMessage, SendMessagesEncoder,
};
use iggy_binary_protocol::requests::streams::{
    CreateStreamRequest, DeleteStreamRequest, GetStreamRequest,
};
use iggy_binary_protocol::requests::topics::{CreateTopicRequest, GetTopicRequest};
use iggy_binary_protocol::requests::users::{LoginRegisterRequest, LoginRegisterWithPatRequest};
use iggy_binary_protocol::responses::consumer_groups::SyncConsumerGroupResponse;
use iggy_binary_protocol::responses::consumer_offsets::ConsumerOffsetResponse;
use iggy_binary_protocol::responses::messages::PollMessagesResponseHeader;
use iggy_binary_protocol::responses::topics::GetTopicResponse;
use iggy_binary_protocol::responses::users::LoginRegisterResponse;
use iggy_binary_protocol::{
    AckLevel, ClientVersionInfo, Command, EvictionHeader, GenericHeader, HEADER_SIZE,
    IGGY_PROTOCOL_VERSION, Operation, ReplyHeader, RequestHeader, WireConsumer, WireDecode,
    WireEncode, WireIdentifier, WireName, WireOptions, WirePartitioning, WirePollingStrategy,
    WireUserHeaderIterator, encode_user_headers, validate_user_headers,
};
use secrecy::SecretString;
use twox_hash::XxHash3_64;

use super::codes;
use super::wire::{FrameReader, ReadOutcome, now_micros};
use crate::tls::ClientTls;
use crate::transport::Transport;
use crate::{HarnessError, IggyChannel};

/// How long connecting, and waiting for any one reply, may take.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// The wait before a request refused as transient is sent again (the SDK's 50 ms).
pub const TRANSIENT_RETRY: Duration = Duration::from_millis(50);
/// How long a request refused as transient is retried (the SDK's reply deadline).
pub const TRANSIENT_DEADLINE: Duration = Duration::from_secs(30);
/// The header kind of a UTF-8 string user header (key or value).
const HEADER_KIND_STRING: u8 = 2;

/// A message to send: id (0 lets the server keep 0), payload, and string headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestMessage {
    /// The message id (`u128`).
    pub id: u128,
    /// The payload.
    pub payload: Bytes,
    /// User headers, sent as Iggy user headers with string key and string value kinds.
    pub headers: Vec<(String, String)>,
}

impl TestMessage {
    /// A message with this id and payload and no headers.
    pub fn new(id: u128, payload: impl Into<Bytes>) -> Self {
        TestMessage {
            id,
            payload: payload.into(),
            headers: Vec::new(),
        }
    }

    /// Adds a string header.
    pub fn with_header(mut self, key: &str, value: &str) -> Self {
        self.headers.push((key.to_owned(), value.to_owned()));
        self
    }
}

/// Whose offsets: a named consumer, or a consumer group (by name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TestConsumer {
    /// A plain consumer (`WireConsumer::consumer`), by name.
    Named(String),
    /// A consumer group (`WireConsumer::consumer_group`), by name.
    Group(String),
}

impl TestConsumer {
    fn to_wire(&self) -> Result<WireConsumer, HarnessError> {
        Ok(match self {
            TestConsumer::Named(name) => WireConsumer::consumer(ident(name)?),
            TestConsumer::Group(name) => WireConsumer::consumer_group(ident(name)?),
        })
    }
}

/// A polled message, checksums verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolledTestMessage {
    /// Its offset in the partition.
    pub offset: u64,
    /// Its id.
    pub id: u128,
    /// Its payload.
    pub payload: Bytes,
    /// Its user headers (keys and values read as UTF-8, lossily, whatever their kind).
    pub headers: Vec<(String, String)>,
    /// When the server appended its batch (µs since the epoch).
    pub timestamp: u64,
    /// The producer's timestamp (µs since the epoch).
    pub origin_timestamp: u64,
}

/// The whole answer to a poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolledTestBatch {
    /// The partition polled; `u32::MAX` ([`codes::RESYNC_REQUIRED_PARTITION`]) when a group
    /// member may not poll it (re-sync).
    pub partition_id: u32,
    /// The offset of the partition's last message (0 for an empty partition, too).
    pub current_offset: u64,
    /// The messages, in offset order.
    pub messages: Vec<PolledTestMessage>,
}

/// Where a poll starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestPolling {
    /// At this offset.
    Offset(u64),
    /// At the first batch appended at or after this time (µs since the epoch).
    Timestamp(u64),
    /// At offset 0.
    First,
    /// The last `count` messages.
    Last,
    /// One past the consumer's stored offset (0 when none is stored).
    Next,
}

impl TestPolling {
    fn to_wire(self) -> WirePollingStrategy {
        match self {
            TestPolling::Offset(offset) => WirePollingStrategy::offset(offset),
            TestPolling::Timestamp(micros) => WirePollingStrategy::timestamp(micros),
            TestPolling::First => WirePollingStrategy::first(),
            TestPolling::Last => WirePollingStrategy::last(),
            TestPolling::Next => WirePollingStrategy::next(),
        }
    }
}

/// A small synchronous Iggy client for tests (one TCP connection, one request at a time).
/// Works against the stand-in and a real server.
#[derive(Debug)]
pub struct IggyAdmin {
    stream: Transport,
    reader: FrameReader,
    client: u128,
    session: u64,
    next_request: u64,
    transient_retries: u64,
}

fn ident(name: &str) -> Result<WireIdentifier, HarnessError> {
    WireIdentifier::named(name)
        .map_err(|e| HarnessError::InvalidOption(format!("Iggy name `{name}`: {e}")))
}

fn wire_name(name: &str) -> Result<WireName, HarnessError> {
    WireName::new(name).map_err(|e| HarnessError::InvalidOption(format!("Iggy name `{name}`: {e}")))
}

fn protocol(context: &str, error: impl std::fmt::Display) -> HarnessError {
    HarnessError::IggyProtocol(format!("{context}: {error}"))
}

/// A random nonzero client id, new for every connection (the SDK uses a UUID).
fn random_client_id() -> u128 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let salt = COUNTER.fetch_add(1, Ordering::Relaxed);
    let half = |n: u64| {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u64(n);
        hasher.write_u64(now_micros());
        hasher.finish()
    };
    let id = (u128::from(half(salt)) << 64) | u128::from(half(!salt));
    id.max(1)
}

fn version_info() -> Result<ClientVersionInfo, HarnessError> {
    Ok(ClientVersionInfo {
        protocol_version: IGGY_PROTOCOL_VERSION,
        sdk_name: wire_name("spillway-tests")?,
        sdk_version: wire_name(env!("CARGO_PKG_VERSION"))?,
    })
}

impl IggyAdmin {
    /// Connects to `addr` and logs in with a username and password. A wrong password fails
    /// with [`HarnessError::IggyRefused`] on the eviction channel (reason 9, invalid
    /// credentials).
    pub fn connect(addr: SocketAddr, username: &str, password: &str) -> Result<Self, HarnessError> {
        let mut admin = Self::open(addr, None)?;
        admin.login_password(username, password)?;
        Ok(admin)
    }

    /// As [`IggyAdmin::connect`], over TLS: trusts the CA given as PEM and verifies the server
    /// certificate against `server_name`. An untrusted server fails with
    /// [`HarnessError::Tls`].
    pub fn connect_tls(
        addr: SocketAddr,
        ca_pem: &str,
        server_name: &str,
        username: &str,
        password: &str,
    ) -> Result<Self, HarnessError> {
        let tls = ClientTls::new(ca_pem).with_server_name(server_name);
        let mut admin = Self::open(addr, Some(&tls))?;
        admin.login_password(username, password)?;
        Ok(admin)
    }

    fn login_password(&mut self, username: &str, password: &str) -> Result<(), HarnessError> {
        let login = LoginRegisterRequest {
            version_info: version_info()?,
            username: wire_name(username)?,
            password: SecretString::from(password.to_owned()),
            client_context: None,
        };
        self.login(LOGIN_REGISTER_CODE, &login.to_bytes())
    }

    /// Connects to `addr` and logs in with a personal access token.
    pub fn connect_with_token(addr: SocketAddr, token: &str) -> Result<Self, HarnessError> {
        let mut admin = Self::open(addr, None)?;
        let login = LoginRegisterWithPatRequest {
            version_info: version_info()?,
            token: SecretString::from(token.to_owned()),
            client_context: None,
        };
        admin.login(LOGIN_REGISTER_WITH_PAT_CODE, &login.to_bytes())?;
        Ok(admin)
    }

    /// Connects without logging in (for tests of what the server does before login).
    pub fn connect_unauthenticated(addr: SocketAddr) -> Result<Self, HarnessError> {
        Self::open(addr, None)
    }

    fn open(addr: SocketAddr, tls: Option<&ClientTls>) -> Result<Self, HarnessError> {
        let stream = Transport::connect(addr, tls, IO_TIMEOUT).map_err(|e| match e {
            HarnessError::Io { source, .. } => {
                HarnessError::io(format!("connecting to Iggy at {addr}"), source)
            }
            other => other,
        })?;
        Ok(IggyAdmin {
            stream,
            reader: FrameReader::default(),
            client: random_client_id(),
            session: 0,
            next_request: 1,
            transient_retries: 0,
        })
    }

    fn login(&mut self, code: u32, body: &[u8]) -> Result<(), HarnessError> {
        let payload = self.request("login", code, body)?;
        let response =
            LoginRegisterResponse::decode_from(&payload).map_err(|e| protocol("login reply", e))?;
        self.session = response.session;
        Ok(())
    }

    /// The client id this connection registered with (the member id in consumer groups).
    pub fn client_id(&self) -> u128 {
        self.client
    }

    /// The session number the login returned (0 before login).
    pub fn session(&self) -> u64 {
        self.session
    }

    /// Ping (code 1); counts as a heartbeat.
    pub fn ping(&mut self) -> Result<(), HarnessError> {
        self.request("ping", PING_CODE, &[]).map(|_| ())
    }

    /// Logout (code 39): ends the session; the connection leaves its groups.
    pub fn logout(&mut self) -> Result<(), HarnessError> {
        self.request("logout", LOGOUT_USER_CODE, &[])?;
        self.session = 0;
        Ok(())
    }

    /// Builds the request frame for `code` the way the SDK numbers it.
    pub fn encode_request(&mut self, code: u32, body: &[u8]) -> Vec<u8> {
        let operation = match code {
            LOGIN_REGISTER_CODE | LOGIN_REGISTER_WITH_PAT_CODE => Operation::Register,
            LOGOUT_USER_CODE => Operation::Logout,
            _ => Operation::from_command_code(code).unwrap_or(Operation::NonReplicated),
        };
        let (request, session, request_checksum) = match operation {
            Operation::Register => (0, 0, 0),
            Operation::NonReplicated => (self.next_request, self.session, 0),
            // Each partition write its own number, as the released 0.9.0 SDK does (its server
            // deduplicates partition writes by request number; edge.5 takes the gaps).
            op if op.is_partition() => {
                let request = self.next_request;
                self.next_request += 1;
                (request, self.session, 0)
            }
            _ => {
                let request = self.next_request;
                self.next_request += 1;
                (request, self.session, u128::from(XxHash3_64::oneshot(body)))
            }
        };
        let mut reserved = [0u8; 60];
        if operation == Operation::NonReplicated {
            reserved[..4].copy_from_slice(&code.to_le_bytes());
        }
        let header = RequestHeader {
            command: Command::Request,
            operation,
            size: u32::try_from(HEADER_SIZE + body.len()).unwrap_or(u32::MAX),
            client: self.client,
            request,
            session,
            request_checksum,
            reserved,
            ..RequestHeader::default()
        };
        let mut frame = Vec::with_capacity(HEADER_SIZE + body.len());
        frame.extend_from_slice(bytemuck::bytes_of(&header));
        frame.extend_from_slice(body);
        frame
    }

    /// Writes raw bytes to the connection (for tests of malformed frames).
    pub fn send_raw(&mut self, bytes: &[u8]) -> Result<(), HarnessError> {
        self.stream
            .write_all(bytes)
            .map_err(|e| HarnessError::io("writing to Iggy", e))
    }

    /// Reads the next frame, waiting at most `timeout`: `Ok(None)` when none arrived.
    pub fn read_frame(&mut self, timeout: Duration) -> Result<Option<Vec<u8>>, HarnessError> {
        self.stream.set_read_timeout(Some(timeout))?;
        let outcome = self.reader.read(&mut self.stream);
        self.stream.set_read_timeout(Some(IO_TIMEOUT))?;
        match outcome {
            ReadOutcome::Frame(frame) => Ok(Some(frame)),
            ReadOutcome::Idle => Ok(None),
            ReadOutcome::Closed => Err(HarnessError::ConnectionClosed {
                waiting_for: "an Iggy frame",
                detail: "the server closed the connection".into(),
            }),
            ReadOutcome::BadSize(size) => Err(protocol("frame header", format!("size {size}"))),
        }
    }

    /// Sends one request and returns the payload of its reply (the result section stripped).
    /// Every refusal becomes [`HarnessError::IggyRefused`] naming `what`.
    ///
    /// A transient refusal (57 `TransientNotCommitted`, 58 `TransientNotAccepted`: the real
    /// server answers concurrent metadata changes so at times) is retried as the SDK does: the
    /// same frame, request number included, again after [`TRANSIENT_RETRY`], for up to
    /// [`TRANSIENT_DEADLINE`]. [`IggyAdmin::transient_retries`] counts them.
    pub fn request(&mut self, what: &str, code: u32, body: &[u8]) -> Result<Bytes, HarnessError> {
        let frame = self.encode_request(code, body);
        let deadline = std::time::Instant::now() + TRANSIENT_DEADLINE;
        loop {
            self.send_raw(&frame)?;
            let reply = self.read_frame(IO_TIMEOUT)?.ok_or(HarnessError::Timeout {
                waiting_for: "an Iggy reply",
                waited: IO_TIMEOUT,
            })?;
            match decode_reply(what, reply) {
                Err(HarnessError::IggyRefused {
                    channel: IggyChannel::Status | IggyChannel::Result,
                    code: codes::TRANSIENT_NOT_COMMITTED | codes::TRANSIENT_NOT_ACCEPTED,
                    ..
                }) if std::time::Instant::now() + TRANSIENT_RETRY < deadline => {
                    self.transient_retries += 1;
                    std::thread::sleep(TRANSIENT_RETRY);
                }
                other => return other,
            }
        }
    }

    /// How many requests were sent again after a transient refusal.
    pub fn transient_retries(&self) -> u64 {
        self.transient_retries
    }

    /// Creates a stream (code 202).
    pub fn create_stream(&mut self, name: &str) -> Result<(), HarnessError> {
        let body = CreateStreamRequest {
            name: wire_name(name)?,
            options: WireOptions::empty(),
        };
        self.request("create_stream", CREATE_STREAM_CODE, &body.to_bytes())
            .map(|_| ())
    }

    /// Whether a stream of this name exists (code 200, get stream; an unknown stream reads as
    /// an empty reply or a not-found refusal).
    pub fn stream_exists(&mut self, name: &str) -> Result<bool, HarnessError> {
        let body = GetStreamRequest {
            stream_id: ident(name)?,
        };
        match self.request("get_stream", GET_STREAM_CODE, &body.to_bytes()) {
            Ok(reply) => Ok(!reply.is_empty()),
            Err(HarnessError::IggyRefused {
                code: codes::STREAM_ID_NOT_FOUND | codes::STREAM_NAME_NOT_FOUND,
                ..
            }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Deletes a stream by name (code 203).
    pub fn delete_stream(&mut self, name: &str) -> Result<(), HarnessError> {
        let body = DeleteStreamRequest {
            stream_id: ident(name)?,
        };
        self.request("delete_stream", DELETE_STREAM_CODE, &body.to_bytes())
            .map(|_| ())
    }

    /// Creates a topic with `partitions` partitions, numbered from 0 (code 302).
    pub fn create_topic(
        &mut self,
        stream: &str,
        topic: &str,
        partitions: u32,
    ) -> Result<(), HarnessError> {
        let body = CreateTopicRequest {
            stream_id: ident(stream)?,
            partitions_count: partitions,
            name: wire_name(topic)?,
            options: WireOptions::empty(),
        };
        self.request("create_topic", CREATE_TOPIC_CODE, &body.to_bytes())
            .map(|_| ())
    }

    /// Creates a consumer group (code 602).
    pub fn create_consumer_group(
        &mut self,
        stream: &str,
        topic: &str,
        group: &str,
    ) -> Result<(), HarnessError> {
        let body = CreateConsumerGroupRequest {
            stream_id: ident(stream)?,
            topic_id: ident(topic)?,
            name: wire_name(group)?,
        };
        self.request(
            "create_consumer_group",
            CREATE_CONSUMER_GROUP_CODE,
            &body.to_bytes(),
        )
        .map(|_| ())
    }

    /// Deletes a consumer group (code 603), its members and its stored offsets.
    pub fn delete_consumer_group(
        &mut self,
        stream: &str,
        topic: &str,
        group: &str,
    ) -> Result<(), HarnessError> {
        let body = DeleteConsumerGroupRequest {
            stream_id: ident(stream)?,
            topic_id: ident(topic)?,
            group_id: ident(group)?,
        };
        self.request(
            "delete_consumer_group",
            DELETE_CONSUMER_GROUP_CODE,
            &body.to_bytes(),
        )
        .map(|_| ())
    }

    /// Appends messages to one partition (code 101, partitioning by partition id); the server
    /// assigns the offsets.
    pub fn send(
        &mut self,
        stream: &str,
        topic: &str,
        partition: u32,
        messages: &[TestMessage],
    ) -> Result<(), HarnessError> {
        if messages.is_empty() {
            return Err(HarnessError::InvalidOption(
                "an Iggy send needs at least one message".into(),
            ));
        }
        let headers = messages
            .iter()
            .map(|m| encode_headers(&m.headers))
            .collect::<Result<Vec<_>, _>>()?;
        let origin_timestamp = now_micros();
        let raw: Vec<RawMessage<'_>> = messages
            .iter()
            .zip(&headers)
            .map(|(m, h)| RawMessage {
                id: m.id,
                origin_timestamp,
                headers: (!h.is_empty()).then_some(h.as_slice()),
                payload: &m.payload,
            })
            .collect();
        let (stream_id, topic_id) = (ident(stream)?, ident(topic)?);
        let partitioning = WirePartitioning::PartitionId(partition);
        let mut body = BytesMut::with_capacity(SendMessagesEncoder::encoded_size(
            &stream_id,
            &topic_id,
            &partitioning,
            &raw,
        ));
        SendMessagesEncoder::encode(&mut body, &stream_id, &topic_id, &partitioning, &raw)
            .map_err(|e| HarnessError::InvalidOption(format!("encoding an Iggy send: {e}")))?;
        self.request("send_messages", SEND_MESSAGES_CODE, &body)
            .map(|_| ())
    }

    /// The stored offset (last processed) of a consumer or group on a partition; `None` when
    /// nothing is stored (or the stream/topic/group is unknown, as the server answers).
    pub fn stored_offset(
        &mut self,
        consumer: &TestConsumer,
        stream: &str,
        topic: &str,
        partition: u32,
    ) -> Result<Option<u64>, HarnessError> {
        let body = GetConsumerOffsetRequest {
            consumer: consumer.to_wire()?,
            stream_id: ident(stream)?,
            topic_id: ident(topic)?,
            partition_id: Some(partition),
        };
        let payload = self.request(
            "get_consumer_offset",
            GET_CONSUMER_OFFSET_CODE,
            &body.to_bytes(),
        )?;
        if payload.is_empty() {
            return Ok(None);
        }
        let response = ConsumerOffsetResponse::decode_from(&payload)
            .map_err(|e| protocol("get_consumer_offset reply", e))?;
        Ok(Some(response.stored_offset))
    }

    /// Stores an offset (code 121). For a group the connection must be a member owning the
    /// partition, or the server answers status 20.
    pub fn store_offset(
        &mut self,
        consumer: &TestConsumer,
        stream: &str,
        topic: &str,
        partition: u32,
        offset: u64,
    ) -> Result<(), HarnessError> {
        let body = StoreConsumerOffsetRequest {
            consumer: consumer.to_wire()?,
            stream_id: ident(stream)?,
            topic_id: ident(topic)?,
            partition_id: Some(partition),
            offset,
            ack: AckLevel::Quorum,
        };
        self.request(
            "store_consumer_offset",
            STORE_CONSUMER_OFFSET_CODE,
            &body.to_bytes(),
        )
        .map(|_| ())
    }

    /// Polls up to `count` messages from `from_offset` (no auto-commit), verifying every
    /// message and batch checksum.
    pub fn poll(
        &mut self,
        consumer: &TestConsumer,
        stream: &str,
        topic: &str,
        partition: u32,
        from_offset: u64,
        count: u32,
    ) -> Result<Vec<PolledTestMessage>, HarnessError> {
        self.poll_with(
            consumer,
            stream,
            topic,
            Some(partition),
            TestPolling::Offset(from_offset),
            count,
            false,
        )
        .map(|batch| batch.messages)
    }

    /// Polls with any strategy and auto-commit setting, returning the whole answer.
    #[allow(clippy::too_many_arguments)]
    pub fn poll_with(
        &mut self,
        consumer: &TestConsumer,
        stream: &str,
        topic: &str,
        partition: Option<u32>,
        polling: TestPolling,
        count: u32,
        auto_commit: bool,
    ) -> Result<PolledTestBatch, HarnessError> {
        let body = PollMessagesRequest {
            consumer: consumer.to_wire()?,
            stream_id: ident(stream)?,
            topic_id: ident(topic)?,
            partition_id: partition,
            strategy: polling.to_wire(),
            count,
            auto_commit,
        };
        let payload = self.request("poll_messages", POLL_MESSAGES_CODE, &body.to_bytes())?;
        decode_poll(&payload)
    }

    /// `(partition id, current offset, messages count)` of every partition (code 300).
    pub fn partition_heads(
        &mut self,
        stream: &str,
        topic: &str,
    ) -> Result<Vec<(u32, u64, u64)>, HarnessError> {
        let body = GetTopicRequest {
            stream_id: ident(stream)?,
            topic_id: ident(topic)?,
        };
        let payload = self.request("get_topic", GET_TOPIC_CODE, &body.to_bytes())?;
        if payload.is_empty() {
            return Err(HarnessError::IggyNotFound(format!(
                "topic `{topic}` in stream `{stream}`"
            )));
        }
        let response =
            GetTopicResponse::decode_from(&payload).map_err(|e| protocol("get_topic reply", e))?;
        Ok(response
            .partitions
            .iter()
            .map(|p| (p.id, p.current_offset, p.messages_count))
            .collect())
    }

    /// Joins a consumer group (code 604) as this connection's client id.
    pub fn join_group(
        &mut self,
        stream: &str,
        topic: &str,
        group: &str,
    ) -> Result<(), HarnessError> {
        let body = JoinConsumerGroupRequest {
            stream_id: ident(stream)?,
            topic_id: ident(topic)?,
            group_id: ident(group)?,
        };
        self.request(
            "join_consumer_group",
            JOIN_CONSUMER_GROUP_CODE,
            &body.to_bytes(),
        )
        .map(|_| ())
    }

    /// Leaves a consumer group (code 605).
    pub fn leave_group(
        &mut self,
        stream: &str,
        topic: &str,
        group: &str,
    ) -> Result<(), HarnessError> {
        let body = LeaveConsumerGroupRequest {
            stream_id: ident(stream)?,
            topic_id: ident(topic)?,
            group_id: ident(group)?,
        };
        self.request(
            "leave_consumer_group",
            LEAVE_CONSUMER_GROUP_CODE,
            &body.to_bytes(),
        )
        .map(|_| ())
    }

    /// This member's `(generation, partitions it may poll)` (code 606); `None` when the
    /// connection is not a member.
    pub fn sync_group(
        &mut self,
        stream: &str,
        topic: &str,
        group: &str,
    ) -> Result<Option<(u64, Vec<u32>)>, HarnessError> {
        let body = SyncConsumerGroupRequest {
            stream_id: ident(stream)?,
            topic_id: ident(topic)?,
            group_id: ident(group)?,
        };
        let payload = self.request(
            "sync_consumer_group",
            SYNC_CONSUMER_GROUP_CODE,
            &body.to_bytes(),
        )?;
        if payload.is_empty() {
            return Ok(None);
        }
        let response = SyncConsumerGroupResponse::decode_from(&payload)
            .map_err(|e| protocol("sync_consumer_group reply", e))?;
        Ok(Some((response.generation, response.partitions)))
    }

    /// A group poll of one partition (group polls must name it). A partition this member
    /// may not poll answers `partition_id == u32::MAX` and no messages.
    #[allow(clippy::too_many_arguments)]
    pub fn poll_group(
        &mut self,
        stream: &str,
        topic: &str,
        group: &str,
        partition: u32,
        polling: TestPolling,
        count: u32,
        auto_commit: bool,
    ) -> Result<PolledTestBatch, HarnessError> {
        self.poll_with(
            &TestConsumer::Group(group.to_owned()),
            stream,
            topic,
            Some(partition),
            polling,
            count,
            auto_commit,
        )
    }
}

/// Encodes string headers as user headers (string kind for keys and values).
fn encode_headers(headers: &[(String, String)]) -> Result<Vec<u8>, HarnessError> {
    if headers.is_empty() {
        return Ok(Vec::new());
    }
    let entries: Vec<(u8, &[u8], u8, &[u8])> = headers
        .iter()
        .map(|(k, v)| {
            (
                HEADER_KIND_STRING,
                k.as_bytes(),
                HEADER_KIND_STRING,
                v.as_bytes(),
            )
        })
        .collect();
    let mut buf = BytesMut::new();
    encode_user_headers(&entries, &mut buf);
    validate_user_headers(&buf).map_err(|e| {
        HarnessError::InvalidOption(format!(
            "Iggy user headers (keys and values need 1..=255 bytes): {e}"
        ))
    })?;
    Ok(buf.to_vec())
}

fn decode_headers(raw: &[u8]) -> Result<Vec<(String, String)>, HarnessError> {
    validate_user_headers(raw).map_err(|e| protocol("polled user headers", e))?;
    Ok(WireUserHeaderIterator::new(raw)
        .map(|entry| {
            (
                String::from_utf8_lossy(entry.key).into_owned(),
                String::from_utf8_lossy(entry.value).into_owned(),
            )
        })
        .collect())
}

/// Decodes a poll reply body, verifying every batch and message checksum with the crate.
fn decode_poll(body: &[u8]) -> Result<PolledTestBatch, HarnessError> {
    let (head, mut position) =
        PollMessagesResponseHeader::decode(body).map_err(|e| protocol("poll reply head", e))?;
    let mut messages = Vec::new();
    while position < body.len() {
        let batch = decode_batch_slice(&body[position..])
            .map_err(|e| protocol(&format!("poll reply batch at byte {position}"), e))?;
        let header = batch.header;
        for frame in batch.iter() {
            messages.push(PolledTestMessage {
                offset: header.base_offset + u64::from(frame.header.offset_delta),
                id: frame.header.id,
                payload: Bytes::copy_from_slice(frame.payload),
                headers: decode_headers(frame.user_headers)?,
                timestamp: header.base_timestamp,
                origin_timestamp: header.origin_timestamp + u64::from(frame.header.timestamp_delta),
            });
        }
        position += header.total_size();
    }
    if messages.len() != head.messages_count as usize {
        return Err(protocol(
            "poll reply",
            format!(
                "head counts {} messages, the batches hold {}",
                head.messages_count,
                messages.len()
            ),
        ));
    }
    Ok(PolledTestBatch {
        partition_id: head.partition_id,
        current_offset: head.current_offset,
        messages,
    })
}

/// Turns a reply frame into its payload, or the refusal it carries.
fn decode_reply(what: &str, frame: Vec<u8>) -> Result<Bytes, HarnessError> {
    let refused = |channel, code: u32, name: &str| HarnessError::IggyRefused {
        request: what.to_owned(),
        channel,
        code,
        name: name.to_owned(),
    };
    let head = frame
        .get(..HEADER_SIZE)
        .ok_or_else(|| protocol(what, "short frame"))?;
    let generic: GenericHeader = bytemuck::checked::try_pod_read_unaligned(head)
        .map_err(|e| protocol(&format!("{what} reply header"), e))?;
    match generic.command {
        Command::Eviction => {
            let eviction: EvictionHeader = bytemuck::checked::try_pod_read_unaligned(head)
                .map_err(|e| protocol(&format!("{what} eviction header"), e))?;
            Err(refused(
                IggyChannel::Eviction,
                eviction.reason as u32,
                codes::eviction_name(eviction.reason),
            ))
        }
        Command::Reply => {
            let reply: ReplyHeader = bytemuck::checked::try_pod_read_unaligned(head)
                .map_err(|e| protocol(&format!("{what} reply header"), e))?;
            if reply.status != 0 {
                return Err(refused(
                    IggyChannel::Status,
                    reply.status,
                    codes::error_name(reply.status),
                ));
            }
            let end = (reply.size as usize).min(frame.len());
            let body = Bytes::from(frame).slice(HEADER_SIZE..end.max(HEADER_SIZE));
            let framed = reply.operation.is_result_framed()
                || (reply.operation == Operation::Register && !body.is_empty());
            if !framed {
                return Ok(body);
            }
            match (result_code(&body), result_section_len(&body)) {
                (Some(0), Some(len)) => Ok(body.slice(len..)),
                (Some(code), _) if code != 0 => {
                    Err(refused(IggyChannel::Result, code, codes::error_name(code)))
                }
                _ => Err(protocol(what, "truncated result section")),
            }
        }
        other => Err(protocol(
            what,
            format!("unexpected frame command {other:?}"),
        )),
    }
}

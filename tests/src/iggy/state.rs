//! What the stand-in stores: users, the connections' sessions, streams, topics, partitions
//! (stored batches and consumer offsets) and consumer groups, all behind one mutex held by the
//! server. Every method here is a state transition; turning requests into calls and results
//! into reply frames is `handlers.rs`.
//!
//! Ids follow the server: streams and topics take the lowest free id from 0, partitions are
//! numbered `0..count`, consumer groups count up from 0 per topic and are never reused.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use iggy_binary_protocol::batch::{
    BATCH_HEADER_SIZE, BatchHeader, BatchIntegrity, calculate_batch_checksum,
    decode_batch_slice_with,
};
use iggy_binary_protocol::{WireIdentifier, WirePartitioning};
use twox_hash::XxHash32;

use super::codes;
use super::groups::Group;
use super::wire::now_micros;

/// Values numbered by slot, a new value taking the lowest free slot; iteration goes in slot
/// order.
#[derive(Debug)]
pub(crate) struct Slots<T> {
    items: Vec<Option<T>>,
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Slots { items: Vec::new() }
    }
}

impl<T> Slots<T> {
    /// The slot the next `insert` uses.
    pub(crate) fn vacant(&self) -> usize {
        self.items
            .iter()
            .position(Option::is_none)
            .unwrap_or(self.items.len())
    }

    pub(crate) fn insert(&mut self, value: T) -> usize {
        let slot = self.vacant();
        if slot == self.items.len() {
            self.items.push(Some(value));
        } else {
            self.items[slot] = Some(value);
        }
        slot
    }

    pub(crate) fn remove(&mut self, slot: usize) -> Option<T> {
        self.items.get_mut(slot).and_then(Option::take)
    }

    pub(crate) fn get(&self, slot: usize) -> Option<&T> {
        self.items.get(slot).and_then(Option::as_ref)
    }

    pub(crate) fn get_mut(&mut self, slot: usize) -> Option<&mut T> {
        self.items.get_mut(slot).and_then(Option::as_mut)
    }

    pub(crate) fn len(&self) -> usize {
        self.items.iter().filter(|i| i.is_some()).count()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (usize, &T)> {
        self.items
            .iter()
            .enumerate()
            .filter_map(|(slot, item)| item.as_ref().map(|v| (slot, v)))
    }

    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (usize, &mut T)> {
        self.items
            .iter_mut()
            .enumerate()
            .filter_map(|(slot, item)| item.as_mut().map(|v| (slot, v)))
    }
}

/// A user who may log in.
#[derive(Debug, Clone)]
pub(crate) struct User {
    pub(crate) id: u32,
    pub(crate) username: String,
    pub(crate) password: String,
    /// Personal access tokens (raw strings) that log in as this user.
    pub(crate) tokens: Vec<String>,
}

/// A logged-in connection: the client id it registered with and its session number.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Binding {
    pub(crate) client: u128,
    pub(crate) session: u64,
}

#[derive(Debug)]
struct Connection {
    binding: Option<Binding>,
    /// Last request of any kind (every request counts as a heartbeat).
    last_request: Instant,
}

/// How many replies of replicated requests are kept per client for replays (the server's
/// `REPLY_RING_CAPACITY`).
const REPLY_RING: usize = 5;

/// Per logged-in client: the deduplication of its numbered (metadata) requests.
#[derive(Debug, Default)]
struct ClientEntry {
    /// Highest request id applied, and the checksum it carried.
    watermark: u64,
    watermark_checksum: u128,
    /// `(request, request checksum, reply frame)` of the latest applied requests.
    replies: VecDeque<(u64, u128, Vec<u8>)>,
}

/// What to do with a numbered request (the server's client-table check).
#[derive(Debug)]
pub(crate) enum Dedup {
    /// Above the watermark: apply it.
    New,
    /// A retry of a request applied already: send the same reply again.
    Replay(Vec<u8>),
    /// The id was used for a different request (checksums differ): no answer.
    Drop,
    /// Applied already and its reply is gone: refuse with `RequestAlreadyApplied`.
    AlreadyApplied,
}

/// Whether two request checksums contradict each other (zero means unstamped).
fn checksums_conflict(stored: u128, received: u128) -> bool {
    stored != 0 && received != 0 && stored != received
}

/// Whose offset: a plain consumer (its numeric id, or the XxHash32 of its name) or a group
/// (the group's per-topic id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum OffsetKey {
    Consumer(u32),
    Group(u64),
}

/// Where a poll starts.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Strategy {
    Offset(u64),
    /// Messages whose batch was appended at or after this time (µs).
    Timestamp(u64),
    First,
    Last,
    /// One past the consumer's stored offset, or 0 when none is stored.
    Next,
}

/// The outcome of a poll: the partition head and the batch records to send.
#[derive(Debug, Default)]
pub(crate) struct Polled {
    pub(crate) current_offset: u64,
    pub(crate) records: Vec<u8>,
    pub(crate) count: u32,
}

/// One stored batch: the stamped 256-byte batch header followed by the producer's frames.
#[derive(Debug)]
struct StoredBatch {
    header: BatchHeader,
    record: Vec<u8>,
}

impl StoredBatch {
    fn last_offset(&self) -> u64 {
        self.header.base_offset + u64::from(self.header.message_count.saturating_sub(1))
    }
}

/// A partition: its batches and the offsets stored for it.
#[derive(Debug)]
pub(crate) struct Partition {
    pub(crate) id: u32,
    pub(crate) created_at: u64,
    batches: Vec<StoredBatch>,
    /// Messages appended so far (= the next offset).
    messages: u64,
    size_bytes: u64,
    offsets: HashMap<OffsetKey, u64>,
    /// Per group: the highest offset a poll has served it (for cooperative handovers).
    last_polled: HashMap<u64, u64>,
}

impl Partition {
    fn new(id: u32, created_at: u64) -> Self {
        Partition {
            id,
            created_at,
            batches: Vec::new(),
            messages: 0,
            size_bytes: 0,
            offsets: HashMap::new(),
            last_polled: HashMap::new(),
        }
    }

    /// The offset of the last message (0 when empty: check `messages_count`).
    pub(crate) fn current_offset(&self) -> u64 {
        self.messages.saturating_sub(1)
    }

    pub(crate) fn messages_count(&self) -> u64 {
        self.messages
    }

    pub(crate) fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    pub(crate) fn stored_offset(&self, key: OffsetKey) -> Option<u64> {
        self.offsets.get(&key).copied()
    }

    /// Stores a verified batch record (`[batch header][frames]`) as the next batch: stamps the
    /// partition id, base offset and append time, recomputes the batch checksum, and keeps
    /// the frames (and their checksums) as they came. Returns the base offset.
    pub(crate) fn append(&mut self, record: &[u8]) -> Result<u64, u32> {
        let mut header = BatchHeader::decode(record).map_err(|_| codes::INVALID_COMMAND)?;
        let blob = record
            .get(BATCH_HEADER_SIZE..)
            .ok_or(codes::INVALID_COMMAND)?;
        let base_timestamp = self
            .batches
            .last()
            .map_or(0, |b| b.header.base_timestamp)
            .max(now_micros());
        header.partition_id = u64::from(self.id);
        header.base_offset = self.messages;
        header.base_timestamp = base_timestamp;
        header.batch_checksum = calculate_batch_checksum(&header, blob);
        let mut stamped = vec![0u8; BATCH_HEADER_SIZE];
        header.encode_into(&mut stamped);
        stamped.extend_from_slice(blob);
        self.messages += u64::from(header.message_count);
        self.size_bytes += header.batch_length;
        self.batches.push(StoredBatch {
            header,
            record: stamped,
        });
        Ok(header.base_offset)
    }

    /// Serves a poll as the server does: nothing for an empty partition or `count` 0; the
    /// start offset from the strategy; whole batches as stored, and a batch the selection
    /// starts (or stops) inside sent with a rewritten header (same base offset and deltas, new
    /// length, count and batch checksum). Records the group's high-water mark and applies
    /// an auto-commit (monotone) when messages were served.
    pub(crate) fn poll(
        &mut self,
        key: OffsetKey,
        strategy: Strategy,
        count: u32,
        auto_commit: bool,
    ) -> Polled {
        let current_offset = self.current_offset();
        let empty = Polled {
            current_offset,
            ..Polled::default()
        };
        if self.messages == 0 || count == 0 {
            return empty;
        }
        let start = match strategy {
            Strategy::Timestamp(_) => 0,
            Strategy::Offset(offset) => offset,
            Strategy::First => 0,
            Strategy::Last => current_offset.saturating_sub(u64::from(count) - 1),
            Strategy::Next => self.stored_offset(key).map_or(0, |o| o.saturating_add(1)),
        };
        if start > current_offset {
            return empty;
        }
        let since = match strategy {
            Strategy::Timestamp(ts) => Some(ts),
            _ => None,
        };

        let mut polled = empty;
        let mut last_served = None;
        for batch in &self.batches {
            if polled.count >= count {
                break;
            }
            if batch.last_offset() < start {
                continue;
            }
            if since.is_some_and(|ts| batch.header.base_timestamp < ts) {
                continue;
            }
            let Ok(view) = decode_batch_slice_with(&batch.record, BatchIntegrity::LayoutOnly)
            else {
                continue;
            };
            let wanted = count - polled.count;
            let mut range: Option<(usize, usize)> = None;
            let mut taken = 0u32;
            for frame in view.iter_with_offsets() {
                let offset =
                    batch.header.base_offset + u64::from(frame.message.header.offset_delta);
                if offset < start {
                    continue;
                }
                range = Some((range.map_or(frame.start, |(s, _)| s), frame.end));
                taken += 1;
                last_served = Some(offset);
                if taken == wanted {
                    break;
                }
            }
            let Some((from, to)) = range else {
                continue;
            };
            let blob = view.blob();
            if from == 0 && to == blob.len() {
                polled.records.extend_from_slice(&batch.record);
            } else {
                let slice = &blob[from..to];
                let mut header = batch.header;
                header.batch_length = (BATCH_HEADER_SIZE + slice.len()) as u64;
                header.message_count = taken;
                header.batch_checksum = calculate_batch_checksum(&header, slice);
                let mut rewritten = vec![0u8; BATCH_HEADER_SIZE];
                header.encode_into(&mut rewritten);
                polled.records.extend_from_slice(&rewritten);
                polled.records.extend_from_slice(slice);
            }
            polled.count += taken;
        }

        if let Some(last) = last_served {
            if let OffsetKey::Group(group) = key {
                let mark = self.last_polled.entry(group).or_insert(last);
                *mark = (*mark).max(last);
            }
            if auto_commit {
                let stored = self.offsets.entry(key).or_insert(last);
                *stored = (*stored).max(last);
            }
        }
        polled
    }

    /// An explicit offset store (overwrites; may go backwards). Refused with `InvalidOffset`
    /// for an empty partition or an offset past the last message, as the server does.
    pub(crate) fn store_offset(&mut self, key: OffsetKey, offset: u64) -> Result<(), u32> {
        if self.messages == 0 || offset > self.current_offset() {
            return Err(codes::INVALID_OFFSET);
        }
        self.offsets.insert(key, offset);
        Ok(())
    }

    pub(crate) fn delete_offset(&mut self, key: OffsetKey) -> Result<(), u32> {
        self.offsets
            .remove(&key)
            .map(|_| ())
            .ok_or(codes::CONSUMER_OFFSET_NOT_FOUND)
    }

    /// Whether the group has been served messages on this partition that it has not
    /// committed yet.
    fn in_flight(&self, group: u64) -> bool {
        match self.last_polled.get(&group) {
            Some(&polled) => self
                .offsets
                .get(&OffsetKey::Group(group))
                .is_none_or(|&committed| committed < polled),
            None => false,
        }
    }
}

/// A topic: its partitions and consumer groups.
#[derive(Debug)]
pub(crate) struct Topic {
    pub(crate) id: u32,
    pub(crate) name: String,
    pub(crate) created_at: u64,
    pub(crate) partitions: Vec<Partition>,
    pub(crate) groups: BTreeMap<u64, Group>,
    group_names: HashMap<String, u64>,
    next_group_id: u64,
    /// Next partition of a balanced send.
    round_robin: usize,
}

impl Topic {
    pub(crate) fn resolve_group(&self, id: &WireIdentifier) -> Option<u64> {
        match id {
            WireIdentifier::Numeric(n) => {
                let n = u64::from(*n);
                self.groups.contains_key(&n).then_some(n)
            }
            WireIdentifier::String(name) => self.group_names.get(name.as_str()).copied(),
        }
    }

    /// The partition a send with this partitioning goes to: the given one, the next in
    /// round-robin order (balanced), or the XxHash32 of the key modulo the partition count.
    pub(crate) fn pick_partition(&mut self, partitioning: &WirePartitioning) -> Option<u32> {
        let count = self.partitions.len();
        match partitioning {
            WirePartitioning::PartitionId(id) => Some(*id),
            _ if count == 0 => None,
            WirePartitioning::Balanced => {
                let index = self.round_robin % count;
                self.round_robin = (index + 1) % count;
                Some(self.partitions[index].id)
            }
            WirePartitioning::MessagesKey(key) => {
                let index = usize::try_from(XxHash32::oneshot(0, key)).ok()? % count;
                Some(self.partitions[index].id)
            }
        }
    }

    pub(crate) fn partition_ids(&self) -> Vec<u32> {
        self.partitions.iter().map(|p| p.id).collect()
    }

    pub(crate) fn messages_count(&self) -> u64 {
        self.partitions.iter().map(Partition::messages_count).sum()
    }

    pub(crate) fn size_bytes(&self) -> u64 {
        self.partitions.iter().map(Partition::size_bytes).sum()
    }

    pub(crate) fn partition_mut(&mut self, id: u32) -> Option<&mut Partition> {
        self.partitions.get_mut(usize::try_from(id).ok()?)
    }

    pub(crate) fn partition(&self, id: u32) -> Option<&Partition> {
        self.partitions.get(usize::try_from(id).ok()?)
    }
}

/// A stream: its topics.
#[derive(Debug)]
pub(crate) struct Stream {
    pub(crate) id: u32,
    pub(crate) name: String,
    pub(crate) created_at: u64,
    pub(crate) topics: Slots<Topic>,
    topic_names: HashMap<String, usize>,
}

impl Stream {
    pub(crate) fn messages_count(&self) -> u64 {
        self.topics.iter().map(|(_, t)| t.messages_count()).sum()
    }

    pub(crate) fn size_bytes(&self) -> u64 {
        self.topics.iter().map(|(_, t)| t.size_bytes()).sum()
    }
}

/// Everything the stand-in knows.
#[derive(Debug)]
pub(crate) struct State {
    users: Vec<User>,
    streams: Slots<Stream>,
    stream_names: HashMap<String, usize>,
    /// Metadata commit counter: every applied register, logout and metadata change adds one.
    commit: u64,
    connections: HashMap<u64, Connection>,
    clients: HashMap<u128, ClientEntry>,
    revocation_timeout: Duration,
    /// How many StoreConsumerOffset requests were served.
    pub(crate) stored_offset_requests: u64,
    /// How many PollMessages requests were served (refused ones included).
    pub(crate) poll_requests: u64,
    /// How many logins succeeded.
    pub(crate) logins: u64,
    /// How many of the next new metadata changes to answer with result 57.
    pub(crate) transient_refusals: u32,
    /// Answer every offset store with status 58 (`TransientNotAccepted`), as a node that does
    /// not admit requests (a replica out of its cluster) does.
    pub(crate) refuse_stores: bool,
    /// The protocol window `(min, max)` accepted at login; `None`: the crate's own.
    pub(crate) protocol_window: Option<(u32, u32)>,
    /// Answer with the pre-0.9 framing (see `IggyStandInOpts::legacy_framing`).
    pub(crate) legacy_framing: bool,
    /// The released 0.9.0 server's rule: a partition write (send messages, store or delete an
    /// offset) whose request number is not above the client's last one is a duplicate,
    /// answered with an empty success and not applied. The last number per client.
    pub(crate) partition_dedup: Option<HashMap<u128, u64>>,
}

/// Resolution failure of a partition address: the error code naming the level that missed.
pub(crate) type NotFound = u32;

impl State {
    pub(crate) fn new(users: Vec<User>, revocation_timeout: Duration) -> Self {
        State {
            users,
            streams: Slots::default(),
            stream_names: HashMap::new(),
            commit: 0,
            connections: HashMap::new(),
            clients: HashMap::new(),
            revocation_timeout,
            stored_offset_requests: 0,
            poll_requests: 0,
            logins: 0,
            transient_refusals: 0,
            refuse_stores: false,
            protocol_window: None,
            legacy_framing: false,
            partition_dedup: None,
        }
    }

    pub(crate) fn commit(&self) -> u64 {
        self.commit
    }

    fn bump_commit(&mut self) -> u64 {
        self.commit += 1;
        self.commit
    }

    // ------------------------------------------------------------------ users and sessions

    /// The id of the user with these credentials, `None` for a wrong username or password.
    pub(crate) fn check_password(&self, username: &str, password: &str) -> Option<u32> {
        self.users
            .iter()
            .find(|u| u.username == username && u.password == password)
            .map(|u| u.id)
    }

    pub(crate) fn check_token(&self, token: &str) -> Option<u32> {
        self.users
            .iter()
            .find(|u| u.tokens.iter().any(|t| t == token))
            .map(|u| u.id)
    }

    pub(crate) fn connect(&mut self, conn: u64) {
        self.connections.insert(
            conn,
            Connection {
                binding: None,
                last_request: Instant::now(),
            },
        );
    }

    pub(crate) fn heartbeat(&mut self, conn: u64) {
        let entry = self.connections.entry(conn).or_insert(Connection {
            binding: None,
            last_request: Instant::now(),
        });
        entry.last_request = Instant::now();
    }

    pub(crate) fn binding(&self, conn: u64) -> Option<Binding> {
        self.connections.get(&conn).and_then(|c| c.binding)
    }

    /// Binds `conn` to `client` (login). A connection logged in already keeps its session.
    pub(crate) fn bind(&mut self, conn: u64, client: u128) -> Binding {
        if let Some(binding) = self.binding(conn) {
            return binding;
        }
        let session = self.bump_commit();
        let binding = Binding { client, session };
        // A client id logging in again keeps its deduplication history.
        self.clients.entry(client).or_default();
        self.heartbeat(conn);
        if let Some(c) = self.connections.get_mut(&conn) {
            c.binding = Some(binding);
        }
        binding
    }

    /// Ends the session of `conn` (logout, stale eviction, closed socket): the connection is
    /// no longer logged in and its client leaves every group (full rebalance).
    pub(crate) fn unbind(&mut self, conn: u64) -> Option<Binding> {
        let binding = self.connections.get_mut(&conn)?.binding.take()?;
        self.bump_commit();
        self.clients.remove(&binding.client);
        self.remove_member_everywhere(binding.client);
        Some(binding)
    }

    /// Checks a numbered request of `client` against what it applied already.
    pub(crate) fn check_request(&self, client: u128, request: u64, checksum: u128) -> Dedup {
        let Some(entry) = self.clients.get(&client) else {
            return Dedup::New;
        };
        if request > entry.watermark {
            return Dedup::New;
        }
        if request == entry.watermark && checksums_conflict(entry.watermark_checksum, checksum) {
            return Dedup::Drop;
        }
        match entry.replies.iter().find(|(r, _, _)| *r == request) {
            Some((_, stored, _)) if checksums_conflict(*stored, checksum) => Dedup::Drop,
            Some((_, _, reply)) => Dedup::Replay(reply.clone()),
            None => Dedup::AlreadyApplied,
        }
    }

    /// Records the reply of an applied numbered request.
    pub(crate) fn record_reply(
        &mut self,
        client: u128,
        request: u64,
        checksum: u128,
        reply: &[u8],
    ) {
        let entry = self.clients.entry(client).or_default();
        entry.watermark = entry.watermark.max(request);
        if entry.watermark == request {
            entry.watermark_checksum = checksum;
        }
        if entry.replies.len() == REPLY_RING {
            entry.replies.pop_front();
        }
        entry.replies.push_back((request, checksum, reply.to_vec()));
    }

    /// The socket of `conn` closed.
    pub(crate) fn disconnect(&mut self, conn: u64) {
        self.unbind(conn);
        self.connections.remove(&conn);
    }

    /// Whether `conn` is logged in, a member of some group, and silent for longer than
    /// `timeout` (the only connections the server's heartbeat check evicts).
    pub(crate) fn is_stale(&self, conn: u64, timeout: Duration) -> bool {
        let Some(c) = self.connections.get(&conn) else {
            return false;
        };
        let Some(binding) = c.binding else {
            return false;
        };
        c.last_request.elapsed() > timeout && self.is_group_member(binding.client)
    }

    fn is_group_member(&self, client: u128) -> bool {
        self.streams.iter().any(|(_, s)| {
            s.topics
                .iter()
                .any(|(_, t)| t.groups.values().any(|g| g.is_member(client)))
        })
    }

    fn remove_member_everywhere(&mut self, client: u128) {
        for (_, stream) in self.streams.iter_mut() {
            for (_, topic) in stream.topics.iter_mut() {
                let partitions = topic.partition_ids();
                for group in topic.groups.values_mut() {
                    group.remove(client, &partitions);
                }
            }
        }
    }

    // ------------------------------------------------------------------ resolution

    pub(crate) fn resolve_stream(&self, id: &WireIdentifier) -> Option<usize> {
        match id {
            WireIdentifier::Numeric(n) => {
                let n = usize::try_from(*n).ok()?;
                self.streams.get(n).map(|_| n)
            }
            WireIdentifier::String(name) => self.stream_names.get(name.as_str()).copied(),
        }
    }

    pub(crate) fn streams(&self) -> impl Iterator<Item = &Stream> {
        self.streams.iter().map(|(_, s)| s)
    }

    pub(crate) fn stream(&self, id: &WireIdentifier) -> Option<&Stream> {
        self.streams.get(self.resolve_stream(id)?)
    }

    fn resolve_topic_in(stream: &Stream, id: &WireIdentifier) -> Option<usize> {
        match id {
            WireIdentifier::Numeric(n) => {
                let n = usize::try_from(*n).ok()?;
                stream.topics.get(n).map(|_| n)
            }
            WireIdentifier::String(name) => stream.topic_names.get(name.as_str()).copied(),
        }
    }

    /// The topic, or the code of the level that missed (1009 stream, 2010 topic).
    pub(crate) fn topic(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
    ) -> Result<&Topic, NotFound> {
        let s = self.stream(stream).ok_or(codes::STREAM_ID_NOT_FOUND)?;
        let t = Self::resolve_topic_in(s, topic).ok_or(codes::TOPIC_ID_NOT_FOUND)?;
        s.topics.get(t).ok_or(codes::TOPIC_ID_NOT_FOUND)
    }

    pub(crate) fn topic_mut(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
    ) -> Result<&mut Topic, NotFound> {
        let s = self
            .resolve_stream(stream)
            .ok_or(codes::STREAM_ID_NOT_FOUND)?;
        let s = self.streams.get_mut(s).ok_or(codes::STREAM_ID_NOT_FOUND)?;
        let t = Self::resolve_topic_in(s, topic).ok_or(codes::TOPIC_ID_NOT_FOUND)?;
        s.topics.get_mut(t).ok_or(codes::TOPIC_ID_NOT_FOUND)
    }

    /// The partition, or 1009 / 2010 / 3007 naming the level that missed.
    pub(crate) fn partition_mut(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        partition: u32,
    ) -> Result<&mut Partition, NotFound> {
        self.topic_mut(stream, topic)?
            .partition_mut(partition)
            .ok_or(codes::PARTITION_NOT_FOUND)
    }

    // ------------------------------------------------------------------ metadata changes

    pub(crate) fn create_stream(&mut self, name: &str) -> Result<&Stream, u32> {
        if self.stream_names.contains_key(name) {
            return Err(codes::STREAM_NAME_ALREADY_EXISTS);
        }
        self.bump_commit();
        let slot = self.streams.vacant();
        let id = u32::try_from(slot).map_err(|_| codes::ERROR)?;
        self.streams.insert(Stream {
            id,
            name: name.to_owned(),
            created_at: now_micros(),
            topics: Slots::default(),
            topic_names: HashMap::new(),
        });
        self.stream_names.insert(name.to_owned(), slot);
        self.streams.get(slot).ok_or(codes::ERROR)
    }

    pub(crate) fn delete_stream(&mut self, id: &WireIdentifier) -> Result<(), u32> {
        let slot = self.resolve_stream(id).ok_or(codes::STREAM_ID_NOT_FOUND)?;
        let stream = self
            .streams
            .remove(slot)
            .ok_or(codes::STREAM_ID_NOT_FOUND)?;
        self.stream_names.remove(&stream.name);
        self.bump_commit();
        Ok(())
    }

    pub(crate) fn create_topic(
        &mut self,
        stream: &WireIdentifier,
        name: &str,
        partitions: u32,
    ) -> Result<&Topic, u32> {
        let s = self
            .resolve_stream(stream)
            .ok_or(codes::STREAM_ID_NOT_FOUND)?;
        if self
            .streams
            .get(s)
            .is_some_and(|s| s.topic_names.contains_key(name))
        {
            return Err(codes::TOPIC_NAME_ALREADY_EXISTS);
        }
        self.bump_commit();
        let stream = self.streams.get_mut(s).ok_or(codes::STREAM_ID_NOT_FOUND)?;
        let slot = stream.topics.vacant();
        let created_at = now_micros();
        stream.topics.insert(Topic {
            id: u32::try_from(slot).map_err(|_| codes::ERROR)?,
            name: name.to_owned(),
            created_at,
            partitions: (0..partitions)
                .map(|p| Partition::new(p, created_at))
                .collect(),
            groups: BTreeMap::new(),
            group_names: HashMap::new(),
            next_group_id: 0,
            round_robin: 0,
        });
        stream.topic_names.insert(name.to_owned(), slot);
        stream.topics.get(slot).ok_or(codes::ERROR)
    }

    pub(crate) fn delete_topic(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
    ) -> Result<(), u32> {
        let s = self
            .resolve_stream(stream)
            .ok_or(codes::STREAM_ID_NOT_FOUND)?;
        let stream = self.streams.get_mut(s).ok_or(codes::STREAM_ID_NOT_FOUND)?;
        let t = Self::resolve_topic_in(stream, topic).ok_or(codes::TOPIC_ID_NOT_FOUND)?;
        let removed = stream.topics.remove(t).ok_or(codes::TOPIC_ID_NOT_FOUND)?;
        stream.topic_names.remove(&removed.name);
        self.bump_commit();
        Ok(())
    }

    /// Creates a group; returns `(id, partitions_count)`.
    pub(crate) fn create_group(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        name: &str,
    ) -> Result<(u64, u32), u32> {
        let topic = self.topic_mut(stream, topic)?;
        if topic.group_names.contains_key(name) {
            return Err(codes::CONSUMER_GROUP_NAME_ALREADY_EXISTS);
        }
        let id = topic.next_group_id;
        topic.next_group_id += 1;
        topic.groups.insert(id, Group::new(id, name.to_owned()));
        topic.group_names.insert(name.to_owned(), id);
        let partitions = u32::try_from(topic.partitions.len()).unwrap_or(u32::MAX);
        self.bump_commit();
        Ok((id, partitions))
    }

    pub(crate) fn delete_group(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
    ) -> Result<(), u32> {
        let topic = self.topic_mut(stream, topic)?;
        let id = topic
            .resolve_group(group)
            .ok_or(codes::CONSUMER_GROUP_ID_NOT_FOUND)?;
        if let Some(removed) = topic.groups.remove(&id) {
            topic.group_names.remove(&removed.name);
        }
        self.bump_commit();
        Ok(())
    }

    /// `client` joins the group (cooperative rebalance; a repeated join changes nothing).
    pub(crate) fn join_group(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
        client: u128,
    ) -> Result<(), u32> {
        let topic = self.topic_mut(stream, topic)?;
        let id = topic
            .resolve_group(group)
            .ok_or(codes::CONSUMER_GROUP_ID_NOT_FOUND)?;
        let partitions = topic.partition_ids();
        let assigned = topic
            .groups
            .get(&id)
            .map(Group::assigned)
            .unwrap_or_default();
        // In flight: served but not committed, on a partition a live member owns. A mark on a
        // partition nobody owns is left over from a removed member: forget it.
        let mut in_flight = HashSet::new();
        for partition in &mut topic.partitions {
            if partition.in_flight(id) {
                if assigned.contains(&partition.id) {
                    in_flight.insert(partition.id);
                } else {
                    partition.last_polled.remove(&id);
                }
            }
        }
        if let Some(g) = topic.groups.get_mut(&id) {
            g.join(client, &partitions, &in_flight, Instant::now());
        }
        self.bump_commit();
        Ok(())
    }

    pub(crate) fn leave_group(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
        client: u128,
    ) -> Result<(), u32> {
        let topic = self.topic_mut(stream, topic)?;
        let id = topic
            .resolve_group(group)
            .ok_or(codes::CONSUMER_GROUP_ID_NOT_FOUND)?;
        let partitions = topic.partition_ids();
        let left = topic
            .groups
            .get_mut(&id)
            .is_some_and(|g| g.remove(client, &partitions));
        if !left {
            return Err(codes::CONSUMER_GROUP_MEMBER_NOT_FOUND);
        }
        self.bump_commit();
        Ok(())
    }

    /// `(generation, pollable partitions)` of `client` in the group; `None` when anything does
    /// not resolve or it is not a member.
    pub(crate) fn group_assignment(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
        client: u128,
    ) -> Option<(u64, Vec<u32>)> {
        let topic = self.topic(stream, topic).ok()?;
        topic
            .groups
            .get(&topic.resolve_group(group)?)?
            .assignment(client)
    }

    /// The group's id when `client` owns `partition` in it (`for_poll`: and may poll it).
    pub(crate) fn group_fence(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
        client: u128,
        partition: u32,
        for_poll: bool,
    ) -> Option<u64> {
        let topic = self.topic(stream, topic).ok()?;
        let id = topic.resolve_group(group)?;
        topic
            .groups
            .get(&id)?
            .owns(client, partition, for_poll)
            .then_some(id)
    }

    /// Completes the handovers that can complete: the source committed what it was served, it
    /// was never served anything, or the revocation timeout passed.
    pub(crate) fn complete_handovers(&mut self) {
        let timeout = self.revocation_timeout;
        let mut completed = false;
        for (_, stream) in self.streams.iter_mut() {
            for (_, topic) in stream.topics.iter_mut() {
                let Topic {
                    partitions, groups, ..
                } = topic;
                for group in groups.values_mut() {
                    for (source, partition, since) in group.handovers() {
                        let drained = partitions
                            .iter()
                            .find(|p| p.id == partition)
                            .is_none_or(|p| !p.in_flight(group.id));
                        if (drained || since.elapsed() >= timeout)
                            && group.complete_handover(source, partition)
                        {
                            completed = true;
                        }
                    }
                }
            }
        }
        if completed {
            self.bump_commit();
        }
    }
}

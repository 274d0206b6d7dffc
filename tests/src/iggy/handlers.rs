//! One request frame in, at most one reply frame out: the stand-in's version of the server's
//! `dispatch.rs`, in the same order of checks:
//!
//! 1. A header that is not a valid request (client id 0, bad enum byte, session/request
//!    inconsistent with the operation) is dropped without an answer.
//! 2. A nonzero `request_checksum` that does not match the body: status 4 `InvalidFormat`.
//! 3. Every request counts as a heartbeat.
//! 4. Non-replicated codes (the code rides `reserved[0..4]`): the legacy login codes 38/44 get
//!    an Eviction `MalformedLogin`; anything but ping before login gets status 40.
//! 5. `Register` is the login (password or personal access token).
//! 6. A replicated operation (carrying a session number, or step 1 drops it) on a connection
//!    that is not logged in: Eviction `NoSession`.
//! 7. Partition operations (send, store/delete offset) whose target does not resolve (or, for
//!    a group offset, whose partition the connection does not own): status 20.
//! 8. Metadata operations pass the client table (request-id deduplication), then answer with a
//!    result section: `[0]` + payload, or one rejection.

use iggy_binary_protocol::batch::{BatchIntegrity, decode_batch_slice_with};
use iggy_binary_protocol::codes::{
    FLUSH_UNSAVED_BUFFER_CODE, GET_CONSUMER_OFFSET_CODE, GET_STREAM_CODE, GET_STREAMS_CODE,
    GET_TOPIC_CODE, GET_TOPICS_CODE, LOGIN_USER_CODE, LOGIN_WITH_PERSONAL_ACCESS_TOKEN_CODE,
    PING_CODE, POLL_MESSAGES_CODE, SYNC_CONSUMER_GROUP_CODE,
};
use iggy_binary_protocol::requests::consumer_groups::{
    CreateConsumerGroupRequest, DeleteConsumerGroupRequest, JoinConsumerGroupRequest,
    LeaveConsumerGroupRequest, SyncConsumerGroupRequest,
};
use iggy_binary_protocol::requests::consumer_offsets::{
    DeleteConsumerOffsetRequest, GetConsumerOffsetRequest, StoreConsumerOffsetRequest,
};
use iggy_binary_protocol::requests::messages::{PollMessagesRequest, SendMessagesHeader};
use iggy_binary_protocol::requests::streams::{
    CreateStreamRequest, DeleteStreamRequest, GetStreamRequest,
};
use iggy_binary_protocol::requests::topics::{
    CreateTopicRequest, DeleteTopicRequest, GetTopicRequest, GetTopicsRequest,
};
use iggy_binary_protocol::requests::users::{LoginRegisterRequest, LoginRegisterWithPatRequest};
use iggy_binary_protocol::responses::consumer_groups::{
    ConsumerGroupDetailsResponse, ConsumerGroupResponse, SyncConsumerGroupResponse,
};
use iggy_binary_protocol::responses::consumer_offsets::ConsumerOffsetResponse;
use iggy_binary_protocol::responses::messages::{
    PollMessagesResponseHeader, SendMessagesConfirmationResponse, SendMessagesResponse,
};
use iggy_binary_protocol::responses::streams::{
    GetStreamResponse, GetStreamsResponse, StreamResponse, TopicHeader,
};
use iggy_binary_protocol::responses::topics::{
    GetTopicResponse, GetTopicsResponse, PartitionResponse,
};
use iggy_binary_protocol::responses::users::LoginRegisterResponse;
use iggy_binary_protocol::{
    ClientVersionInfo, EvictionReason, HEADER_SIZE, IGGY_PROTOCOL_VERSION, KIND_CONSUMER_GROUP,
    MAX_PARTITIONS_PER_REQUEST, Operation, RequestHeader, WireConsumer, WireDecode, WireEncode,
    WireError, WireIdentifier, WireName, WireOptions, is_protocol_compatible, lookup_command,
};
use secrecy::ExposeSecret;
use twox_hash::{XxHash3_64, XxHash32};

use super::codes;
use super::state::{Binding, Dedup, OffsetKey, State, Strategy, Stream, Topic};
use super::wire;

/// The server version the stand-in reports at login (the real server reports its crate
/// version, 0.9.0-edge.5 for the wire format used here).
pub(crate) const SERVER_VERSION: &str = "0.9.0-edge.5 (spillway stand-in)";

/// Serves one request of connection `conn`. `None`: no answer (the server drops the frame).
pub(crate) fn handle(state: &mut State, conn: u64, frame: &[u8]) -> Option<Vec<u8>> {
    let header = wire::parse_request_header(frame)?;
    let body = frame.get(HEADER_SIZE..)?;
    if header.request_checksum != 0
        && u128::from(XxHash3_64::oneshot(body)) != header.request_checksum
    {
        return Some(wire::deny(&header, 0, codes::INVALID_FORMAT));
    }
    state.heartbeat(conn);
    state.complete_handovers();

    let reply = match header.operation {
        Operation::NonReplicated => non_replicated(state, conn, &header, body),
        Operation::Register => login(state, conn, &header, body),
        Operation::Logout => logout(state, conn, &header),
        operation => match state.binding(conn) {
            None => wire::eviction(header.client, EvictionReason::NoSession),
            Some(binding) if operation.is_partition() => {
                partition_op(state, binding, &header, body)
            }
            Some(binding) if operation.is_metadata() && operation.is_client_allowed() => {
                return numbered(state, binding, &header, body);
            }
            Some(_) => wire::deny(&header, state.commit(), codes::FEATURE_UNAVAILABLE),
        },
    };
    Some(reply)
}

/// A metadata request goes through the client table first: a retry of an applied request
/// gets the same reply again, a reused id with other bytes no answer, an id whose reply is
/// gone `RequestAlreadyApplied`. Only applied requests (ok or rejected in the result section)
/// move the watermark; a status denial does not.
fn numbered(
    state: &mut State,
    binding: Binding,
    header: &RequestHeader,
    body: &[u8],
) -> Option<Vec<u8>> {
    match state.check_request(binding.client, header.request, header.request_checksum) {
        Dedup::New if state.transient_refusals > 0 => {
            // As the real server under concurrent changes: not applied, not recorded, so the
            // same request sent again is new.
            state.transient_refusals -= 1;
            return Some(wire::result_rejected(
                header,
                binding.session,
                state.commit(),
                codes::TRANSIENT_NOT_COMMITTED,
            ));
        }
        Dedup::New => {}
        Dedup::Replay(reply) => return Some(reply),
        Dedup::Drop => return None,
        Dedup::AlreadyApplied => {
            return Some(wire::result_rejected(
                header,
                binding.session,
                state.commit(),
                codes::REQUEST_ALREADY_APPLIED,
            ));
        }
    }
    let (reply, applied) = metadata_op(state, binding, header, body);
    if applied {
        state.record_reply(
            binding.client,
            header.request,
            header.request_checksum,
            &reply,
        );
    }
    Some(reply)
}

// ------------------------------------------------------------------------------ login

fn login(state: &mut State, conn: u64, header: &RequestHeader, body: &[u8]) -> Vec<u8> {
    let Ok((version, prefix)) = ClientVersionInfo::decode(body) else {
        return wire::eviction(header.client, EvictionReason::MalformedLogin);
    };
    let compatible = match state.protocol_window {
        None => is_protocol_compatible(version.protocol_version),
        Some((min, max)) => (min..=max).contains(&version.protocol_version),
    };
    if !compatible {
        return wire::incompatible_protocol(header.client, state.protocol_window);
    }
    let tail = &body[prefix..];
    // As the server: try the password shape; on wrong credentials still try the token shape
    // (a body may parse as both), and report wrong credentials only if that fails to parse.
    let mut wrong_password = false;
    if let Ok((request, _)) = LoginRegisterRequest::decode_after_prefix(version.clone(), tail) {
        match state.check_password(request.username.as_str(), request.password.expose_secret()) {
            Some(user_id) => return login_ok(state, conn, header, user_id),
            None => wrong_password = true,
        }
    }
    if let Ok((request, _)) = LoginRegisterWithPatRequest::decode_after_prefix(version, tail) {
        return match state.check_token(request.token.expose_secret()) {
            Some(user_id) => login_ok(state, conn, header, user_id),
            None => wire::eviction(header.client, EvictionReason::InvalidToken),
        };
    }
    let reason = if wrong_password {
        EvictionReason::InvalidCredentials
    } else {
        EvictionReason::MalformedLogin
    };
    wire::eviction(header.client, reason)
}

fn login_ok(state: &mut State, conn: u64, header: &RequestHeader, user_id: u32) -> Vec<u8> {
    state.logins += 1;
    let binding = state.bind(conn, header.client);
    let Ok(server_version) = WireName::new(SERVER_VERSION) else {
        return wire::deny(header, 0, codes::ERROR);
    };
    let response = LoginRegisterResponse {
        user_id,
        session: binding.session,
        server_protocol_version: IGGY_PROTOCOL_VERSION,
        server_version,
    };
    let commit = state.commit().max(binding.session);
    wire::result_ok(header, binding.session, commit, Some(&response))
}

fn logout(state: &mut State, conn: u64, header: &RequestHeader) -> Vec<u8> {
    match state.unbind(conn) {
        Some(binding) => wire::reply(header, binding.session, state.commit(), 0, &[]),
        // Not logged in: the desired state holds already, answer ok.
        None => wire::reply(header, 0, state.commit(), 0, &[]),
    }
}

// ------------------------------------------------------------------------------ reads

fn non_replicated(state: &mut State, conn: u64, header: &RequestHeader, body: &[u8]) -> Vec<u8> {
    let code = wire::non_replicated_code(header);
    if code == LOGIN_USER_CODE || code == LOGIN_WITH_PERSONAL_ACCESS_TOKEN_CODE {
        return wire::eviction(header.client, EvictionReason::MalformedLogin);
    }
    if code != PING_CODE && state.binding(conn).is_none() {
        return wire::deny(header, 0, codes::UNAUTHENTICATED);
    }
    let answer = match code {
        PING_CODE => Ok(Vec::new()),
        POLL_MESSAGES_CODE => {
            state.poll_requests += 1;
            poll(state, header, body)
        }
        GET_CONSUMER_OFFSET_CODE => get_offset(state, body),
        SYNC_CONSUMER_GROUP_CODE => Ok(sync_group(state, header, body)),
        GET_STREAM_CODE => get_stream(state, body),
        GET_STREAMS_CODE => get_streams(state),
        GET_TOPIC_CODE => get_topic(state, body),
        GET_TOPICS_CODE => get_topics(state, body),
        // The server has no flush; it says so.
        FLUSH_UNSAVED_BUFFER_CODE => Err(codes::FEATURE_UNAVAILABLE),
        _ => match lookup_command(code) {
            // A read the real server serves but the stand-in does not.
            Some(_) => Err(codes::FEATURE_UNAVAILABLE),
            None => Err(codes::INVALID_COMMAND),
        },
    };
    match answer {
        Ok(body) => wire::reply(header, header.session, state.commit(), 0, &body),
        Err(status) => wire::reply(header, header.session, state.commit(), status, &[]),
    }
}

/// The key offsets of a plain consumer are stored under: its number, or the XxHash32 of its
/// name.
fn consumer_key(id: &WireIdentifier) -> OffsetKey {
    match id {
        WireIdentifier::Numeric(n) => OffsetKey::Consumer(*n),
        WireIdentifier::String(name) => {
            OffsetKey::Consumer(XxHash32::oneshot(0, name.as_str().as_bytes()))
        }
    }
}

/// The 16-byte poll head with no messages.
fn empty_poll(partition_id: u32) -> Vec<u8> {
    PollMessagesResponseHeader {
        partition_id,
        current_offset: 0,
        messages_count: 0,
    }
    .to_bytes()
    .to_vec()
}

fn poll(state: &mut State, header: &RequestHeader, body: &[u8]) -> Result<Vec<u8>, u32> {
    let Ok(request) = PollMessagesRequest::decode_from(body) else {
        return Ok(empty_poll(0));
    };
    let strategy = match request.strategy.kind {
        1 => Strategy::Offset(request.strategy.value),
        2 => Strategy::Timestamp(request.strategy.value),
        3 => Strategy::First,
        4 => Strategy::Last,
        5 => Strategy::Next,
        _ => return Ok(empty_poll(0)),
    };
    let (partition_id, key) = if request.consumer.kind == KIND_CONSUMER_GROUP {
        // A group poll names its partition, and the member must be allowed to poll it (owned,
        // not being handed over); otherwise an empty poll with the resync sentinel.
        let Some(partition_id) = request.partition_id else {
            return Ok(empty_poll(0));
        };
        let Some(group) = state.group_fence(
            &request.stream_id,
            &request.topic_id,
            &request.consumer.id,
            header.client,
            partition_id,
            true,
        ) else {
            return Ok(empty_poll(codes::RESYNC_REQUIRED_PARTITION));
        };
        (partition_id, OffsetKey::Group(group))
    } else {
        (
            request.partition_id.unwrap_or(0),
            consumer_key(&request.consumer.id),
        )
    };
    let partition = state.partition_mut(&request.stream_id, &request.topic_id, partition_id)?;
    let polled = partition.poll(key, strategy, request.count, request.auto_commit);
    let mut out = PollMessagesResponseHeader {
        partition_id,
        current_offset: polled.current_offset,
        messages_count: polled.count,
    }
    .to_bytes()
    .to_vec();
    out.extend_from_slice(&polled.records);
    Ok(out)
}

fn get_offset(state: &mut State, body: &[u8]) -> Result<Vec<u8>, u32> {
    let Ok(request) = GetConsumerOffsetRequest::decode_from(body) else {
        return Ok(Vec::new());
    };
    let partition_id = request.partition_id.unwrap_or(0);
    let key = if request.consumer.kind == KIND_CONSUMER_GROUP {
        match state
            .topic(&request.stream_id, &request.topic_id)
            .ok()
            .and_then(|t| t.resolve_group(&request.consumer.id))
        {
            Some(group) => OffsetKey::Group(group),
            None => return missing_partition_or_empty(state, &request, partition_id),
        }
    } else {
        consumer_key(&request.consumer.id)
    };
    let partition = match state.partition_mut(&request.stream_id, &request.topic_id, partition_id) {
        Ok(partition) => partition,
        // Only an unknown partition is an error; an unknown stream or topic reads as "none".
        Err(codes::PARTITION_NOT_FOUND) => return Err(codes::PARTITION_NOT_FOUND),
        Err(_) => return Ok(Vec::new()),
    };
    Ok(partition
        .stored_offset(key)
        .map_or_else(Vec::new, |stored| {
            ConsumerOffsetResponse {
                partition_id,
                current_offset: partition.current_offset(),
                stored_offset: stored,
            }
            .to_bytes()
            .to_vec()
        }))
}

/// A group offset read for a group that does not resolve: 3007 if the partition is what is
/// missing (the server resolves the partition first), an empty body otherwise.
fn missing_partition_or_empty(
    state: &mut State,
    request: &GetConsumerOffsetRequest,
    partition_id: u32,
) -> Result<Vec<u8>, u32> {
    match state.partition_mut(&request.stream_id, &request.topic_id, partition_id) {
        Err(codes::PARTITION_NOT_FOUND) => Err(codes::PARTITION_NOT_FOUND),
        _ => Ok(Vec::new()),
    }
}

fn sync_group(state: &State, header: &RequestHeader, body: &[u8]) -> Vec<u8> {
    let Ok(request) = SyncConsumerGroupRequest::decode_from(body) else {
        return Vec::new();
    };
    state
        .group_assignment(
            &request.stream_id,
            &request.topic_id,
            &request.group_id,
            header.client,
        )
        .map_or_else(Vec::new, |(generation, partitions)| {
            SyncConsumerGroupResponse {
                generation,
                partitions,
            }
            .to_bytes()
            .to_vec()
        })
}

fn wire_name(name: &str) -> Result<WireName, u32> {
    WireName::new(name).map_err(|_| codes::INVALID_FORMAT)
}

fn count_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn stream_response(stream: &Stream) -> Result<StreamResponse, u32> {
    Ok(StreamResponse {
        id: stream.id,
        created_at: stream.created_at,
        topics_count: count_u32(stream.topics.len()),
        size_bytes: stream.size_bytes(),
        messages_count: stream.messages_count(),
        name: wire_name(&stream.name)?,
        options: WireOptions::empty(),
    })
}

fn topic_header(topic: &Topic) -> Result<TopicHeader, u32> {
    Ok(TopicHeader {
        id: topic.id,
        created_at: topic.created_at,
        partitions_count: count_u32(topic.partitions.len()),
        message_expiry: 0,
        compression_algorithm: 1,
        max_topic_size: 0,
        size_bytes: topic.size_bytes(),
        messages_count: topic.messages_count(),
        name: wire_name(&topic.name)?,
        options: WireOptions::empty(),
        derived_options: WireOptions::empty(),
    })
}

fn topic_response(topic: &Topic) -> Result<GetTopicResponse, u32> {
    Ok(GetTopicResponse {
        topic: topic_header(topic)?,
        partitions: topic
            .partitions
            .iter()
            .map(|p| PartitionResponse {
                id: p.id,
                created_at: p.created_at,
                segments_count: 1,
                current_offset: p.current_offset(),
                size_bytes: p.size_bytes(),
                messages_count: p.messages_count(),
            })
            .collect(),
    })
}

fn stream_details(stream: &Stream) -> Result<GetStreamResponse, u32> {
    Ok(GetStreamResponse {
        stream: stream_response(stream)?,
        topics: stream
            .topics
            .iter()
            .map(|(_, t)| topic_header(t))
            .collect::<Result<_, _>>()?,
    })
}

fn get_stream(state: &State, body: &[u8]) -> Result<Vec<u8>, u32> {
    let request = GetStreamRequest::decode_from(body).map_err(|_| codes::INVALID_COMMAND)?;
    match state.stream(&request.stream_id) {
        Some(stream) => Ok(stream_details(stream)?.to_bytes().to_vec()),
        None => Ok(Vec::new()),
    }
}

fn get_streams(state: &State) -> Result<Vec<u8>, u32> {
    let streams = state
        .streams()
        .map(stream_response)
        .collect::<Result<_, _>>()?;
    Ok(GetStreamsResponse { streams }.to_bytes().to_vec())
}

fn get_topic(state: &State, body: &[u8]) -> Result<Vec<u8>, u32> {
    let request = GetTopicRequest::decode_from(body).map_err(|_| codes::INVALID_COMMAND)?;
    match state.topic(&request.stream_id, &request.topic_id) {
        Ok(topic) => Ok(topic_response(topic)?.to_bytes().to_vec()),
        Err(_) => Ok(Vec::new()),
    }
}

fn get_topics(state: &State, body: &[u8]) -> Result<Vec<u8>, u32> {
    let request = GetTopicsRequest::decode_from(body).map_err(|_| codes::INVALID_COMMAND)?;
    // A missing stream lists as empty.
    let topics = match state.stream(&request.stream_id) {
        Some(stream) => stream
            .topics
            .iter()
            .map(|(_, t)| topic_header(t))
            .collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    Ok(GetTopicsResponse { topics }.to_bytes().to_vec())
}

// ------------------------------------------------------------------------------ partition ops

fn partition_op(
    state: &mut State,
    binding: Binding,
    header: &RequestHeader,
    body: &[u8],
) -> Vec<u8> {
    let commit = state.commit();
    if let Some(last) = state.partition_dedup.as_mut() {
        let seen = last.entry(binding.client).or_insert(0);
        if header.request <= *seen {
            // A duplicate (as 0.9.0 judges it): not applied, answered as if it were.
            return wire::result_ok(header, binding.session, commit, None);
        }
        *seen = header.request;
    }
    let outcome = match header.operation {
        Operation::SendMessages => send_messages(state, body),
        Operation::StoreConsumerOffset => {
            state.stored_offset_requests += 1;
            if state.refuse_stores {
                return wire::deny(header, commit, codes::TRANSIENT_NOT_ACCEPTED);
            }
            store_offset(state, binding, body).map(|()| None)
        }
        Operation::DeleteConsumerOffset => delete_offset(state, binding, body).map(|()| None),
        _ => Err(codes::FEATURE_UNAVAILABLE),
    };
    match outcome {
        Ok(Some(payload)) => wire::reply(header, binding.session, commit, 0, &payload),
        Ok(None) => {
            // A commit may complete a handover right away.
            state.complete_handovers();
            wire::result_ok(header, binding.session, commit, None)
        }
        Err(status) => wire::deny(header, commit, status),
    }
}

/// Decodes `[metadata length][metadata]` and returns it with the rest (the batch).
fn split_send_body(body: &[u8]) -> Option<(SendMessagesHeader, usize, &[u8])> {
    let length = u32::from_le_bytes(body.get(..4)?.try_into().ok()?) as usize;
    let metadata = body.get(4..4usize.checked_add(length)?)?;
    let (header, consumed) = SendMessagesHeader::decode(metadata).ok()?;
    Some((header, length - consumed, body.get(4 + length..)?))
}

fn send_messages(state: &mut State, body: &[u8]) -> Result<Option<Vec<u8>>, u32> {
    let (metadata, leftover, batch) = split_send_body(body).ok_or(codes::RESOURCE_NOT_FOUND)?;
    let topic = state
        .topic_mut(&metadata.stream_id, &metadata.topic_id)
        .map_err(|_| codes::RESOURCE_NOT_FOUND)?;
    let partition_id = topic
        .pick_partition(&metadata.partitioning)
        .ok_or(codes::RESOURCE_NOT_FOUND)?;
    let topic_id = topic.id;
    let stream_id = state
        .stream(&metadata.stream_id)
        .map(|s| s.id)
        .ok_or(codes::RESOURCE_NOT_FOUND)?;
    let partition = state
        .partition_mut(&metadata.stream_id, &metadata.topic_id, partition_id)
        .map_err(|_| codes::RESOURCE_NOT_FOUND)?;
    // Admission, as the server checks it: metadata exactly as long as announced, a batch
    // whose message and batch checksums verify, as many messages as announced, and no bytes
    // after the batch. (The server drops a request failing these without answering; the
    // stand-in answers with the error instead so a test does not hang.)
    if leftover != 0 {
        return Err(codes::INVALID_COMMAND);
    }
    let verified = decode_batch_slice_with(batch, BatchIntegrity::Verify).map_err(|e| match e {
        WireError::InvalidMessageChecksum { .. } => codes::INVALID_MESSAGE_CHECKSUM,
        WireError::InvalidBatchChecksum { .. } => codes::INVALID_BATCH_CHECKSUM,
        _ => codes::INVALID_COMMAND,
    })?;
    if verified.message_count() == 0
        || verified.message_count() != metadata.messages_count
        || batch.len() != verified.header.total_size()
    {
        return Err(codes::INVALID_COMMAND);
    }
    let base_offset = partition.append(batch)?;
    let response = SendMessagesResponse {
        confirmations: vec![SendMessagesConfirmationResponse {
            stream_id,
            topic_id,
            partition_id,
            base_offset,
        }],
    };
    Ok(Some(response.to_bytes().to_vec()))
}

/// Resolves the offset key of a store/delete, fencing group offsets: the connection must own
/// the partition (handed over or not). Every miss is `ResourceNotFound`, as on the server.
fn offset_target(
    state: &State,
    binding: Binding,
    consumer: &WireConsumer,
    stream: &WireIdentifier,
    topic: &WireIdentifier,
    partition_id: Option<u32>,
) -> Result<(u32, OffsetKey), u32> {
    let partition_id = partition_id.ok_or(codes::RESOURCE_NOT_FOUND)?;
    let key = if consumer.kind == KIND_CONSUMER_GROUP {
        let group = state
            .group_fence(
                stream,
                topic,
                &consumer.id,
                binding.client,
                partition_id,
                false,
            )
            .ok_or(codes::RESOURCE_NOT_FOUND)?;
        OffsetKey::Group(group)
    } else {
        consumer_key(&consumer.id)
    };
    state
        .topic(stream, topic)
        .ok()
        .and_then(|t| t.partition(partition_id))
        .ok_or(codes::RESOURCE_NOT_FOUND)?;
    Ok((partition_id, key))
}

fn store_offset(state: &mut State, binding: Binding, body: &[u8]) -> Result<(), u32> {
    let request =
        StoreConsumerOffsetRequest::decode_from(body).map_err(|_| codes::RESOURCE_NOT_FOUND)?;
    let (partition_id, key) = offset_target(
        state,
        binding,
        &request.consumer,
        &request.stream_id,
        &request.topic_id,
        request.partition_id,
    )?;
    state
        .partition_mut(&request.stream_id, &request.topic_id, partition_id)
        .map_err(|_| codes::RESOURCE_NOT_FOUND)?
        .store_offset(key, request.offset)
}

fn delete_offset(state: &mut State, binding: Binding, body: &[u8]) -> Result<(), u32> {
    let request =
        DeleteConsumerOffsetRequest::decode_from(body).map_err(|_| codes::RESOURCE_NOT_FOUND)?;
    let (partition_id, key) = offset_target(
        state,
        binding,
        &request.consumer,
        &request.stream_id,
        &request.topic_id,
        request.partition_id,
    )?;
    state
        .partition_mut(&request.stream_id, &request.topic_id, partition_id)
        .map_err(|_| codes::RESOURCE_NOT_FOUND)?
        .delete_offset(key)
}

// ------------------------------------------------------------------------------ metadata ops

/// What applying a metadata request gave: a payload after the `[0]` section, or a rejection
/// code in the section. `Deny` is a status (refused before applying).
enum Applied {
    Ok(Option<Box<dyn WireEncode>>),
    Rejected(u32),
    Deny(u32),
}

fn applied<T: WireEncode + 'static>(result: Result<T, u32>) -> Applied {
    match result {
        Ok(payload) => Applied::Ok(Some(Box::new(payload))),
        Err(code) => Applied::Rejected(code),
    }
}

fn applied_empty(result: Result<(), u32>) -> Applied {
    match result {
        Ok(()) => Applied::Ok(None),
        Err(code) => Applied::Rejected(code),
    }
}

fn decode<T: WireDecode>(body: &[u8]) -> Result<T, Applied> {
    T::decode_from(body).map_err(|_| Applied::Deny(codes::INVALID_COMMAND))
}

/// Applies a metadata request; the flag says whether it was applied (rather than denied).
fn metadata_op(
    state: &mut State,
    binding: Binding,
    header: &RequestHeader,
    body: &[u8],
) -> (Vec<u8>, bool) {
    let outcome = apply_metadata(state, binding, header.operation, body).unwrap_or_else(|a| a);
    let commit = state.commit();
    match outcome {
        Applied::Ok(payload) => (
            wire::result_ok(header, binding.session, commit, payload.as_deref()),
            true,
        ),
        Applied::Rejected(code) => (
            wire::result_rejected(header, binding.session, commit, code),
            true,
        ),
        Applied::Deny(status) => (wire::deny(header, commit, status), false),
    }
}

fn apply_metadata(
    state: &mut State,
    binding: Binding,
    operation: Operation,
    body: &[u8],
) -> Result<Applied, Applied> {
    Ok(match operation {
        Operation::CreateStream => {
            let request: CreateStreamRequest = decode(body)?;
            if !request.options.is_empty() {
                return Err(Applied::Deny(codes::UNSUPPORTED_OPTION_KEY));
            }
            applied(
                state
                    .create_stream(request.name.as_str())
                    .and_then(stream_details),
            )
        }
        Operation::DeleteStream => {
            let request: DeleteStreamRequest = decode(body)?;
            applied_empty(state.delete_stream(&request.stream_id))
        }
        Operation::CreateTopic => {
            let request: CreateTopicRequest = decode(body)?;
            if request.partitions_count > MAX_PARTITIONS_PER_REQUEST {
                return Err(Applied::Deny(codes::TOO_MANY_PARTITIONS));
            }
            applied(
                state
                    .create_topic(
                        &request.stream_id,
                        request.name.as_str(),
                        request.partitions_count,
                    )
                    .and_then(topic_response),
            )
        }
        Operation::DeleteTopic => {
            let request: DeleteTopicRequest = decode(body)?;
            applied_empty(state.delete_topic(&request.stream_id, &request.topic_id))
        }
        Operation::CreateConsumerGroup => {
            let request: CreateConsumerGroupRequest = decode(body)?;
            let name = request.name.clone();
            applied(
                state
                    .create_group(&request.stream_id, &request.topic_id, request.name.as_str())
                    .map(|(id, partitions_count)| ConsumerGroupDetailsResponse {
                        group: ConsumerGroupResponse {
                            id: u32::try_from(id).unwrap_or(u32::MAX),
                            partitions_count,
                            members_count: 0,
                            name,
                        },
                        members: Vec::new(),
                    }),
            )
        }
        Operation::DeleteConsumerGroup => {
            let request: DeleteConsumerGroupRequest = decode(body)?;
            applied_empty(state.delete_group(
                &request.stream_id,
                &request.topic_id,
                &request.group_id,
            ))
        }
        Operation::JoinConsumerGroup => {
            let request: JoinConsumerGroupRequest = decode(body)?;
            applied_empty(state.join_group(
                &request.stream_id,
                &request.topic_id,
                &request.group_id,
                binding.client,
            ))
        }
        Operation::LeaveConsumerGroup => {
            let request: LeaveConsumerGroupRequest = decode(body)?;
            applied_empty(state.leave_group(
                &request.stream_id,
                &request.topic_id,
                &request.group_id,
                binding.client,
            ))
        }
        // Users, tokens, updates, purges, partitions: real operations the stand-in does not
        // implement.
        _ => Applied::Deny(codes::FEATURE_UNAVAILABLE),
    })
}

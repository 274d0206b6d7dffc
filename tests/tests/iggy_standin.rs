//! The Iggy stand-in, exercised through `IggyAdmin` and raw frames: login, streams and topics,
//! send and poll (partial batches, strategies, checksums), offsets, not-found answers,
//! consumer groups (join, sync, fence, cooperative handover, leave), heartbeat eviction and
//! killed connections.
//!
//! Tests that need no stand-in hook run against the stand-in and then the real server (see
//! `both`), so the two are checked to answer alike on every case both can run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use iggy_binary_protocol::batch::BatchHeader;
use iggy_binary_protocol::codes::{GET_STREAM_CODE, LOGIN_USER_CODE, POLL_MESSAGES_CODE};
use iggy_binary_protocol::requests::messages::PollMessagesRequest;
use iggy_binary_protocol::requests::streams::{CreateStreamRequest, GetStreamRequest};
use iggy_binary_protocol::{
    Command, EvictionHeader, EvictionReason, GenericHeader, HEADER_SIZE, RequestHeader,
    WireConsumer, WireEncode, WireIdentifier, WireName, WireOptions, WirePollingStrategy,
};
use spillway_tests::iggy::codes;
use spillway_tests::{
    DEFAULT_SERVER_NAME, HarnessError, IggyAdmin, IggyChannel, IggyServer, IggyStandIn,
    IggyStandInOpts, PolledTestMessage, TestCa, TestConsumer, TestMessage, TestPolling,
};

/// The servers a test that needs no stand-in hook runs against, one after the other: the
/// stand-in and the real server (started by the harness, or `SPILLWAY_TEST_IGGY`), so the
/// stand-in keeps answering like the real server. Only the stand-in where no real server is at
/// hand (an error under `SPILLWAY_REQUIRE_REAL_IGGY=1`).
fn both() -> Vec<IggyServer> {
    let mut servers = vec![IggyServer::StandIn(IggyStandIn::start().unwrap())];
    let default = IggyServer::start().unwrap();
    if default.is_real() {
        servers.push(default);
    }
    servers
}

/// A name no other test (or earlier run against a real server) uses.
fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{prefix}-{}-{}-{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn refusal(result: Result<impl std::fmt::Debug, HarnessError>) -> (IggyChannel, u32, String) {
    match result {
        Err(e @ HarnessError::IggyRefused { .. }) => {
            let text = e.to_string();
            let HarnessError::IggyRefused { channel, code, .. } = e else {
                unreachable!()
            };
            (channel, code, text)
        }
        other => panic!("expected an Iggy refusal, got {other:?}"),
    }
}

fn named(name: &str) -> TestConsumer {
    TestConsumer::Named(name.to_owned())
}

fn message(id: u128, payload: &str) -> TestMessage {
    TestMessage::new(id, payload.as_bytes().to_vec()).with_header("trace", &format!("t{id}"))
}

/// A stream with one topic of `partitions` partitions.
fn topic(admin: &mut IggyAdmin, partitions: u32) -> (String, String) {
    let (stream, topic) = (unique("s"), unique("t"));
    admin.create_stream(&stream).unwrap();
    admin.create_topic(&stream, &topic, partitions).unwrap();
    (stream, topic)
}

fn offsets(messages: &[PolledTestMessage]) -> Vec<u64> {
    messages.iter().map(|m| m.offset).collect()
}

fn eviction_reason(frame: &[u8]) -> EvictionReason {
    let generic: GenericHeader =
        bytemuck::checked::try_pod_read_unaligned(&frame[..HEADER_SIZE]).unwrap();
    assert_eq!(
        generic.command,
        Command::Eviction,
        "expected an Eviction frame"
    );
    let eviction: EvictionHeader =
        bytemuck::checked::try_pod_read_unaligned(&frame[..HEADER_SIZE]).unwrap();
    eviction.reason
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

// ------------------------------------------------------------------------------ login

#[test]
fn login_with_password_or_token_and_bad_credentials_are_evicted() {
    // The STAND-IN: it is given users and a personal access token at start; the real server
    // would need them created first.
    let iggy = IggyStandIn::start_with(
        IggyStandInOpts::new()
            .user("alice", "s3cret")
            .token("pat-123"),
    )
    .unwrap();
    assert_eq!((iggy.username(), iggy.password()), ("alice", "s3cret"));

    let mut admin = iggy.admin().unwrap();
    assert!(admin.session() > 0, "login returns a session");
    admin.ping().unwrap();

    let (channel, code, text) = refusal(IggyAdmin::connect(iggy.addr(), "alice", "wrong"));
    assert_eq!(channel, IggyChannel::Eviction);
    assert_eq!(code, EvictionReason::InvalidCredentials as u32);
    assert!(text.contains("invalid credentials"), "{text}");
    // The default user does not exist once users are configured.
    let (_, code, _) = refusal(IggyAdmin::connect(iggy.addr(), "iggy", "iggy"));
    assert_eq!(code, EvictionReason::InvalidCredentials as u32);

    let mut by_token = IggyAdmin::connect_with_token(iggy.addr(), "pat-123").unwrap();
    by_token.create_stream(&unique("by-token")).unwrap();
    let (channel, code, _) = refusal(IggyAdmin::connect_with_token(iggy.addr(), "pat-999"));
    assert_eq!(channel, IggyChannel::Eviction);
    assert_eq!(code, EvictionReason::InvalidToken as u32);
}

#[test]
fn before_login_only_ping_is_served() {
    for server in both() {
        let mut anon = IggyAdmin::connect_unauthenticated(server.addr()).unwrap();
        anon.ping().unwrap();

        let get = GetStreamRequest {
            stream_id: WireIdentifier::numeric(0),
        };
        let (channel, code, _) =
            refusal(anon.request("get_stream", GET_STREAM_CODE, &get.to_bytes()));
        assert_eq!(
            (channel, code),
            (IggyChannel::Status, codes::UNAUTHENTICATED)
        );

        // A replicated request with session 0 fails header validation: dropped, no answer.
        let body = CreateStreamRequest {
            name: WireName::new(unique("anon")).unwrap(),
            options: WireOptions::empty(),
        }
        .to_bytes();
        let frame = anon.encode_request(202, &body);
        anon.send_raw(&frame).unwrap();
        assert!(
            anon.read_frame(Duration::from_millis(300))
                .unwrap()
                .is_none()
        );
        // With a session number the connection does not hold: Eviction NoSession.
        let mut frame = anon.encode_request(202, &body);
        frame[184..192].copy_from_slice(&7u64.to_le_bytes());
        anon.send_raw(&frame).unwrap();
        let reply = anon.read_frame(Duration::from_secs(5)).unwrap().unwrap();
        assert_eq!(eviction_reason(&reply), EvictionReason::NoSession);

        // The legacy login code: Eviction MalformedLogin.
        let mut legacy = IggyAdmin::connect_unauthenticated(server.addr()).unwrap();
        let (channel, code, _) = refusal(legacy.request("legacy login", LOGIN_USER_CODE, b"x"));
        assert_eq!(channel, IggyChannel::Eviction);
        assert_eq!(code, EvictionReason::MalformedLogin as u32);
    }
}

// ------------------------------------------------------------------------------ framing

#[test]
fn bad_request_checksum_invalid_header_and_unknown_code() {
    for server in both() {
        let mut admin = server.admin().unwrap();

        // A stamped checksum that does not match the body: status 4.
        let body = CreateStreamRequest {
            name: WireName::new(unique("sum")).unwrap(),
            options: WireOptions::empty(),
        }
        .to_bytes();
        let mut frame = admin.encode_request(202, &body);
        frame[144] ^= 0xff;
        admin.send_raw(&frame).unwrap();
        let reply = admin.read_frame(Duration::from_secs(5)).unwrap().unwrap();
        let header: iggy_binary_protocol::ReplyHeader =
            bytemuck::checked::try_pod_read_unaligned(&reply[..HEADER_SIZE]).unwrap();
        assert_eq!(header.status, codes::INVALID_FORMAT);
        assert_eq!(reply.len(), HEADER_SIZE, "a denial has no body");

        // Client id 0 fails header validation: the server drops the frame, no answer.
        let mut frame = admin.encode_request(1, &[]);
        frame[128..144].fill(0);
        admin.send_raw(&frame).unwrap();
        assert!(
            admin
                .read_frame(Duration::from_millis(300))
                .unwrap()
                .is_none(),
            "no reply to an invalid header"
        );

        // An unknown non-replicated code: status 3.
        let (channel, code, _) = refusal(admin.request("unknown", 9999, &[]));
        assert_eq!(
            (channel, code),
            (IggyChannel::Status, codes::INVALID_COMMAND)
        );
        admin.ping().unwrap();
    }
}

#[test]
fn metadata_request_ids_are_deduplicated() {
    for server in both() {
        let mut admin = server.admin().unwrap();
        let create = |name: &str| {
            CreateStreamRequest {
                name: WireName::new(name).unwrap(),
                options: WireOptions::empty(),
            }
            .to_bytes()
        };
        let first = admin.encode_request(202, &create(&unique("dedup")));
        admin.send_raw(&first).unwrap();
        let reply = admin.read_frame(Duration::from_secs(5)).unwrap().unwrap();
        // A retry with the same id and bytes gets the same reply, not "already exists".
        admin.send_raw(&first).unwrap();
        let replay = admin.read_frame(Duration::from_secs(5)).unwrap().unwrap();
        assert_eq!(replay, reply);
        assert_eq!(
            &reply[HEADER_SIZE..HEADER_SIZE + 4],
            &[0, 0, 0, 0],
            "a success"
        );

        // The same id with other bytes: no answer.
        let mut reused = admin.encode_request(202, &create(&unique("dedup")));
        reused[168..176].copy_from_slice(&first[168..176]);
        admin.send_raw(&reused).unwrap();
        assert!(
            admin
                .read_frame(Duration::from_millis(300))
                .unwrap()
                .is_none()
        );

        // Once its reply aged out (five newer ones), the old id is refused.
        for _ in 0..5 {
            admin.create_stream(&unique("dedup")).unwrap();
        }
        admin.send_raw(&first).unwrap();
        let reply = admin.read_frame(Duration::from_secs(5)).unwrap().unwrap();
        let body = &reply[HEADER_SIZE..];
        assert_eq!(body.len(), 12);
        assert_eq!(
            u32::from_le_bytes(body[8..12].try_into().unwrap()),
            codes::REQUEST_ALREADY_APPLIED
        );
    }
}

// ------------------------------------------------------------------------------ streams, topics

#[test]
fn streams_and_topics_with_zero_based_partitions() {
    for server in both() {
        let mut admin = server.admin().unwrap();
        let (stream, topic) = topic(&mut admin, 3);
        assert_eq!(
            admin.partition_heads(&stream, &topic).unwrap(),
            vec![(0, 0, 0), (1, 0, 0), (2, 0, 0)]
        );

        let (channel, code, text) = refusal(admin.create_stream(&stream));
        assert_eq!(
            (channel, code),
            (IggyChannel::Result, codes::STREAM_NAME_ALREADY_EXISTS)
        );
        assert!(text.contains("1012 StreamNameAlreadyExists"), "{text}");
        let (channel, code, _) = refusal(admin.create_topic(&stream, &topic, 1));
        assert_eq!(
            (channel, code),
            (IggyChannel::Result, codes::TOPIC_NAME_ALREADY_EXISTS)
        );
        let (channel, code, _) = refusal(admin.create_topic(&unique("none"), "t", 1));
        assert_eq!(
            (channel, code),
            (IggyChannel::Result, codes::STREAM_ID_NOT_FOUND)
        );

        admin.delete_stream(&stream).unwrap();
        assert!(matches!(
            admin.partition_heads(&stream, &topic),
            Err(HarnessError::IggyNotFound(_))
        ));
        let (channel, code, _) = refusal(admin.delete_stream(&stream));
        assert_eq!(
            (channel, code),
            (IggyChannel::Result, codes::STREAM_ID_NOT_FOUND)
        );
    }
}

// ------------------------------------------------------------------------------ send and poll

#[test]
fn three_batches_poll_from_the_middle_of_a_batch() {
    for server in both() {
        let mut admin = server.admin().unwrap();
        let (stream, topic) = topic(&mut admin, 2);
        let reader = named("reader");

        // Batches of 3, 4 and 2 messages into partition 1: offsets 0..=2, 3..=6, 7..=8.
        let mut id = 100u128;
        for size in [3, 4, 2] {
            let batch: Vec<TestMessage> = (0..size)
                .map(|_| {
                    id += 1;
                    message(id, &format!("payload-{id}"))
                })
                .collect();
            admin.send(&stream, &topic, 1, &batch).unwrap();
            thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(
            admin.partition_heads(&stream, &topic).unwrap(),
            vec![(0, 0, 0), (1, 8, 9)]
        );

        // From offset 4, three messages: inside the second batch, stopping inside it too.
        let polled = admin.poll(&reader, &stream, &topic, 1, 4, 3).unwrap();
        assert_eq!(offsets(&polled), vec![4, 5, 6]);
        assert_eq!(polled[0].id, 105);
        assert_eq!(&polled[0].payload[..], b"payload-105");
        assert_eq!(
            polled[0].headers,
            vec![("trace".to_owned(), "t105".to_owned())]
        );
        assert!(polled[0].origin_timestamp <= polled[0].timestamp);

        // The same poll raw: one rewritten batch header, same base offset, new count.
        let request = PollMessagesRequest {
            consumer: WireConsumer::consumer(WireIdentifier::named("reader").unwrap()),
            stream_id: WireIdentifier::named(stream.as_str()).unwrap(),
            topic_id: WireIdentifier::named(topic.as_str()).unwrap(),
            partition_id: Some(1),
            strategy: WirePollingStrategy::offset(4),
            count: 2,
            auto_commit: false,
        };
        let body = admin
            .request("poll", POLL_MESSAGES_CODE, &request.to_bytes())
            .unwrap();
        let header = BatchHeader::decode(&body[16..]).unwrap();
        assert_eq!((header.base_offset, header.message_count), (3, 2));
        assert_eq!(header.partition_id, 1);
        assert_eq!(header.total_size(), body.len() - 16, "one batch, exactly");
        iggy_binary_protocol::batch::decode_batch_slice(&body[16..]).expect("checksums verify");

        // Across all three batches; ids, payloads and batch timestamps in order.
        let all = admin.poll(&reader, &stream, &topic, 1, 2, 100).unwrap();
        assert_eq!(offsets(&all), (2..=8).collect::<Vec<_>>());
        assert_eq!(
            all.iter().map(|m| m.id).collect::<Vec<_>>(),
            (103..=109).collect::<Vec<_>>()
        );
        assert!(all.windows(2).all(|w| w[0].timestamp <= w[1].timestamp));
        assert!(
            all[0].timestamp < all[6].timestamp,
            "each batch is stamped when appended"
        );

        // Past the end, and an empty partition: no messages.
        assert!(
            admin
                .poll(&reader, &stream, &topic, 1, 9, 10)
                .unwrap()
                .is_empty()
        );
        let empty = admin
            .poll_with(
                &reader,
                &stream,
                &topic,
                Some(0),
                TestPolling::First,
                10,
                false,
            )
            .unwrap();
        assert_eq!((empty.partition_id, empty.current_offset), (0, 0));
        assert!(empty.messages.is_empty());

        // Strategies.
        let first = admin
            .poll_with(
                &reader,
                &stream,
                &topic,
                Some(1),
                TestPolling::First,
                2,
                false,
            )
            .unwrap();
        assert_eq!(offsets(&first.messages), vec![0, 1]);
        assert_eq!(first.current_offset, 8);
        let last = admin
            .poll_with(
                &reader,
                &stream,
                &topic,
                Some(1),
                TestPolling::Last,
                2,
                false,
            )
            .unwrap();
        assert_eq!(offsets(&last.messages), vec![7, 8]);
        let since = admin
            .poll_with(
                &reader,
                &stream,
                &topic,
                Some(1),
                TestPolling::Timestamp(all[1].timestamp),
                100,
                false,
            )
            .unwrap();
        assert_eq!(offsets(&since.messages), (3..=8).collect::<Vec<_>>());
    }
}

#[test]
fn next_and_auto_commit_follow_the_stored_offset() {
    for server in both() {
        let mut admin = server.admin().unwrap();
        let (stream, topic) = topic(&mut admin, 1);
        let batch: Vec<TestMessage> = (0..5).map(|i| message(i + 1, "x")).collect();
        admin.send(&stream, &topic, 0, &batch).unwrap();
        let c = named("next-reader");

        let next = |admin: &mut IggyAdmin, auto: bool| {
            admin
                .poll_with(&c, &stream, &topic, Some(0), TestPolling::Next, 2, auto)
                .unwrap()
        };
        // Nothing stored: from 0. Without auto-commit it stays there.
        assert_eq!(offsets(&next(&mut admin, false).messages), vec![0, 1]);
        assert_eq!(offsets(&next(&mut admin, false).messages), vec![0, 1]);
        // Auto-commit stores the last offset served; next continues after it.
        assert_eq!(offsets(&next(&mut admin, true).messages), vec![0, 1]);
        assert_eq!(
            admin.stored_offset(&c, &stream, &topic, 0).unwrap(),
            Some(1)
        );
        assert_eq!(offsets(&next(&mut admin, true).messages), vec![2, 3]);
        assert_eq!(offsets(&next(&mut admin, true).messages), vec![4]);
        assert!(next(&mut admin, true).messages.is_empty());
        assert_eq!(
            admin.stored_offset(&c, &stream, &topic, 0).unwrap(),
            Some(4)
        );
    }
}

// ------------------------------------------------------------------------------ offsets

#[test]
fn stored_offsets_round_trip_and_are_counted() {
    // The STAND-IN: it counts the StoreConsumerOffset requests it serves, which the real
    // server does not tell.
    let iggy = IggyStandIn::start().unwrap();
    let mut admin = iggy.admin().unwrap();
    let (stream, topic) = topic(&mut admin, 2);
    let (a, b) = (named("consumer-a"), named("consumer-b"));

    assert_eq!(admin.stored_offset(&a, &stream, &topic, 0).unwrap(), None);
    // An empty partition takes no offset.
    let (channel, code, _) = refusal(admin.store_offset(&a, &stream, &topic, 0, 0));
    assert_eq!(
        (channel, code),
        (IggyChannel::Status, codes::INVALID_OFFSET)
    );

    let batch: Vec<TestMessage> = (0..10).map(|i| message(i + 1, "m")).collect();
    admin.send(&stream, &topic, 0, &batch).unwrap();
    admin.store_offset(&a, &stream, &topic, 0, 5).unwrap();
    assert_eq!(
        admin.stored_offset(&a, &stream, &topic, 0).unwrap(),
        Some(5)
    );
    // An explicit store overwrites, also backwards.
    admin.store_offset(&a, &stream, &topic, 0, 2).unwrap();
    assert_eq!(
        admin.stored_offset(&a, &stream, &topic, 0).unwrap(),
        Some(2)
    );
    // Per consumer and per partition.
    assert_eq!(admin.stored_offset(&b, &stream, &topic, 0).unwrap(), None);
    assert_eq!(admin.stored_offset(&a, &stream, &topic, 1).unwrap(), None);
    // Past the head.
    let (channel, code, _) = refusal(admin.store_offset(&a, &stream, &topic, 0, 10));
    assert_eq!(
        (channel, code),
        (IggyChannel::Status, codes::INVALID_OFFSET)
    );

    // Four stores: two refused, two applied.
    assert_eq!(iggy.stored_offset_requests(), 4);
}

#[test]
fn unknown_targets_answer_the_server_codes() {
    for server in both() {
        let mut admin = server.admin().unwrap();
        let (stream, topic) = topic(&mut admin, 1);
        let c = named("c");
        let missing = unique("missing");

        let (ch, code, _) = refusal(admin.poll(&c, &missing, &topic, 0, 0, 1));
        assert_eq!(
            (ch, code),
            (IggyChannel::Status, codes::STREAM_ID_NOT_FOUND)
        );
        let (ch, code, _) = refusal(admin.poll(&c, &stream, &missing, 0, 0, 1));
        assert_eq!((ch, code), (IggyChannel::Status, codes::TOPIC_ID_NOT_FOUND));
        let (ch, code, _) = refusal(admin.poll(&c, &stream, &topic, 1, 0, 1));
        assert_eq!(
            (ch, code),
            (IggyChannel::Status, codes::PARTITION_NOT_FOUND)
        );

        // Offsets: an unknown partition is an error, an unknown stream reads as "none".
        let (ch, code, _) = refusal(admin.stored_offset(&c, &stream, &topic, 7));
        assert_eq!(
            (ch, code),
            (IggyChannel::Status, codes::PARTITION_NOT_FOUND)
        );
        assert_eq!(admin.stored_offset(&c, &missing, &topic, 0).unwrap(), None);

        // Partition operations on what does not resolve: ResourceNotFound.
        let (ch, code, _) = refusal(admin.send(&stream, &topic, 3, &[message(1, "x")]));
        assert_eq!((ch, code), (IggyChannel::Status, codes::RESOURCE_NOT_FOUND));
        let (ch, code, _) = refusal(admin.store_offset(&c, &missing, &topic, 0, 0));
        assert_eq!((ch, code), (IggyChannel::Status, codes::RESOURCE_NOT_FOUND));

        // Groups.
        let (ch, code, _) = refusal(admin.join_group(&stream, &topic, "no-group"));
        assert_eq!(
            (ch, code),
            (IggyChannel::Result, codes::CONSUMER_GROUP_ID_NOT_FOUND)
        );
        let (ch, code, _) = refusal(admin.create_consumer_group(&stream, &missing, "g"));
        assert_eq!((ch, code), (IggyChannel::Result, codes::TOPIC_ID_NOT_FOUND));
        admin.create_consumer_group(&stream, &topic, "g").unwrap();
        let (ch, code, _) = refusal(admin.create_consumer_group(&stream, &topic, "g"));
        assert_eq!(
            (ch, code),
            (
                IggyChannel::Result,
                codes::CONSUMER_GROUP_NAME_ALREADY_EXISTS
            )
        );
    }
}

// ------------------------------------------------------------------------------ groups

#[test]
fn group_join_sync_fence_and_leave() {
    for server in both() {
        let mut a = server.admin().unwrap();
        let mut b = server.admin().unwrap();
        let (stream, topic) = topic(&mut a, 4);
        a.create_consumer_group(&stream, &topic, "g").unwrap();
        for p in 0..4 {
            a.send(&stream, &topic, p, &[message(u128::from(p) + 1, "m")])
                .unwrap();
        }

        assert_eq!(
            b.sync_group(&stream, &topic, "g").unwrap(),
            None,
            "not a member"
        );
        a.join_group(&stream, &topic, "g").unwrap();
        a.join_group(&stream, &topic, "g").unwrap(); // a second join changes nothing
        let (gen1, parts) = a.sync_group(&stream, &topic, "g").unwrap().unwrap();
        assert_eq!(parts, vec![0, 1, 2, 3]);

        // B joins; nothing is in flight, so half of A's partitions move at once.
        b.join_group(&stream, &topic, "g").unwrap();
        let (gen_a, parts_a) = a.sync_group(&stream, &topic, "g").unwrap().unwrap();
        let (gen_b, parts_b) = b.sync_group(&stream, &topic, "g").unwrap().unwrap();
        assert!(gen_a > gen1 && gen_a == gen_b);
        assert_eq!((parts_a.len(), parts_b.len()), (2, 2));
        let mut all: Vec<u32> = parts_a.iter().chain(&parts_b).copied().collect();
        all.sort_unstable();
        assert_eq!(all, vec![0, 1, 2, 3]);

        // A polls a partition of B: the resync sentinel, no messages.
        let fenced = a
            .poll_group(
                &stream,
                &topic,
                "g",
                parts_b[0],
                TestPolling::First,
                10,
                false,
            )
            .unwrap();
        assert_eq!(fenced.partition_id, codes::RESYNC_REQUIRED_PARTITION);
        assert!(fenced.messages.is_empty());
        // Its own partition: served, under the real partition id.
        let own = a
            .poll_group(
                &stream,
                &topic,
                "g",
                parts_a[0],
                TestPolling::Next,
                10,
                true,
            )
            .unwrap();
        assert_eq!((own.partition_id, own.messages.len()), (parts_a[0], 1));
        // Committing a partition it does not own: refused.
        let g = TestConsumer::Group("g".into());
        let (ch, code, _) = refusal(a.store_offset(&g, &stream, &topic, parts_b[0], 0));
        assert_eq!((ch, code), (IggyChannel::Status, codes::RESOURCE_NOT_FOUND));
        // Group offsets are readable by anyone.
        assert_eq!(
            b.stored_offset(&g, &stream, &topic, parts_a[0]).unwrap(),
            Some(0)
        );

        // A leaves: B gets everything.
        a.leave_group(&stream, &topic, "g").unwrap();
        let (gen_after, parts_after) = b.sync_group(&stream, &topic, "g").unwrap().unwrap();
        assert!(gen_after > gen_b);
        assert_eq!(parts_after, vec![0, 1, 2, 3]);
        assert_eq!(a.sync_group(&stream, &topic, "g").unwrap(), None);
        let (ch, code, _) = refusal(a.leave_group(&stream, &topic, "g"));
        assert_eq!(
            (ch, code),
            (IggyChannel::Result, codes::CONSUMER_GROUP_MEMBER_NOT_FOUND)
        );
    }
}

#[test]
fn in_flight_partition_moves_after_the_source_commits() {
    // The STAND-IN's own handover: its timing is asserted against the stand-in's documented rule.
    let iggy = IggyStandIn::start().unwrap();
    let mut a = iggy.admin().unwrap();
    let mut b = iggy.admin().unwrap();
    let (stream, topic) = topic(&mut a, 2);
    a.create_consumer_group(&stream, &topic, "g").unwrap();
    a.send(&stream, &topic, 1, &[message(1, "a"), message(2, "b")])
        .unwrap();
    a.join_group(&stream, &topic, "g").unwrap();

    // A polls partition 1 without committing: it is in flight.
    let polled = a
        .poll_group(&stream, &topic, "g", 1, TestPolling::Next, 10, false)
        .unwrap();
    assert_eq!(offsets(&polled.messages), vec![0, 1]);

    b.join_group(&stream, &topic, "g").unwrap();
    // Partition 1 is pending handover: A may no longer poll it, B does not have it yet.
    let (gen_pending, parts_a) = a.sync_group(&stream, &topic, "g").unwrap().unwrap();
    assert_eq!(parts_a, vec![0]);
    assert_eq!(
        b.sync_group(&stream, &topic, "g").unwrap().unwrap().1,
        Vec::<u32>::new()
    );
    let fenced = a
        .poll_group(&stream, &topic, "g", 1, TestPolling::Next, 10, false)
        .unwrap();
    assert_eq!(fenced.partition_id, codes::RESYNC_REQUIRED_PARTITION);

    // A still owns it for commits; committing what it polled completes the handover.
    let g = TestConsumer::Group("g".into());
    a.store_offset(&g, &stream, &topic, 1, 0).unwrap();
    assert_eq!(
        b.sync_group(&stream, &topic, "g").unwrap().unwrap().1,
        Vec::<u32>::new()
    );
    a.store_offset(&g, &stream, &topic, 1, 1).unwrap();
    let (gen_done, parts_b) = b.sync_group(&stream, &topic, "g").unwrap().unwrap();
    assert_eq!(parts_b, vec![1]);
    assert!(gen_done > gen_pending);
    let next = b
        .poll_group(&stream, &topic, "g", 1, TestPolling::Next, 10, false)
        .unwrap();
    assert!(next.messages.is_empty(), "B continues after A's commit");
}

#[test]
fn in_flight_partition_moves_after_the_revocation_timeout() {
    // The STAND-IN: a revocation timeout of a second, which the real server does not take per test.
    let iggy = IggyStandIn::start_with(
        IggyStandInOpts::new().revocation_timeout(Duration::from_millis(300)),
    )
    .unwrap();
    let mut a = iggy.admin().unwrap();
    let mut b = iggy.admin().unwrap();
    let (stream, topic) = topic(&mut a, 2);
    a.create_consumer_group(&stream, &topic, "g").unwrap();
    a.send(&stream, &topic, 1, &[message(1, "a")]).unwrap();
    a.join_group(&stream, &topic, "g").unwrap();
    a.poll_group(&stream, &topic, "g", 1, TestPolling::Next, 10, false)
        .unwrap();
    b.join_group(&stream, &topic, "g").unwrap();
    assert_eq!(
        b.sync_group(&stream, &topic, "g").unwrap().unwrap().1,
        Vec::<u32>::new()
    );

    wait_until("the handover timeout", Duration::from_secs(5), || {
        b.sync_group(&stream, &topic, "g").unwrap().unwrap().1 == vec![1]
    });
    // Nothing was committed: B starts over at the beginning (at-least-once).
    let polled = b
        .poll_group(&stream, &topic, "g", 1, TestPolling::Next, 10, false)
        .unwrap();
    assert_eq!(offsets(&polled.messages), vec![0]);
}

// ------------------------------------------------------------------------------ eviction

#[test]
fn silent_group_member_is_evicted_and_leaves_its_group() {
    // The STAND-IN: an eviction timeout of a second (the real server's is 1.2 x its 30 s
    // heartbeat).
    let iggy = IggyStandIn::start_with(
        IggyStandInOpts::new().eviction_timeout(Duration::from_millis(400)),
    )
    .unwrap();
    let mut silent = iggy.admin().unwrap();
    let mut alive = iggy.admin().unwrap();
    let mut bystander = iggy.admin().unwrap();
    let (stream, topic) = topic(&mut alive, 2);
    alive.create_consumer_group(&stream, &topic, "g").unwrap();
    silent.join_group(&stream, &topic, "g").unwrap();
    alive.join_group(&stream, &topic, "g").unwrap();
    assert_eq!(
        alive
            .sync_group(&stream, &topic, "g")
            .unwrap()
            .unwrap()
            .1
            .len(),
        1
    );

    // `alive` keeps talking, `silent` and `bystander` (in no group) say nothing.
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(1200) {
        alive.ping().unwrap();
        thread::sleep(Duration::from_millis(100));
    }

    // The silent member got an unsolicited Eviction StaleClient and is out of the group.
    let frame = silent
        .read_frame(Duration::from_secs(2))
        .unwrap()
        .expect("an eviction");
    assert_eq!(eviction_reason(&frame), EvictionReason::StaleClient);
    assert_eq!(
        alive.sync_group(&stream, &topic, "g").unwrap().unwrap().1,
        vec![0, 1]
    );
    // Its socket stays open, but the session is gone.
    let (ch, code, _) = refusal(silent.sync_group(&stream, &topic, "g"));
    assert_eq!((ch, code), (IggyChannel::Status, codes::UNAUTHENTICATED));
    let (ch, code, _) = refusal(silent.join_group(&stream, &topic, "g"));
    assert_eq!(ch, IggyChannel::Eviction);
    assert_eq!(code, EvictionReason::NoSession as u32);
    assert_eq!(iggy.connection_count(), 3);

    // A connection in no group is never evicted.
    bystander.create_stream(&unique("still-here")).unwrap();
}

// ------------------------------------------------------------------------------ connections

#[test]
fn killed_connections_leave_their_groups() {
    // The STAND-IN: it can cut every client connection at once (`kill_connections`).
    let iggy = IggyStandIn::start().unwrap();
    let mut a = iggy.admin().unwrap();
    let mut b = iggy.admin().unwrap();
    let (stream, topic) = topic(&mut a, 2);
    a.create_consumer_group(&stream, &topic, "g").unwrap();
    a.join_group(&stream, &topic, "g").unwrap();
    b.join_group(&stream, &topic, "g").unwrap();
    assert_eq!(iggy.connection_count(), 2);

    iggy.kill_connections();
    assert_eq!(iggy.connection_count(), 0);
    assert!(a.ping().is_err(), "the connection is gone");

    let mut c = iggy.admin().unwrap();
    c.join_group(&stream, &topic, "g").unwrap();
    assert_eq!(
        c.sync_group(&stream, &topic, "g").unwrap().unwrap().1,
        vec![0, 1],
        "the killed members were removed"
    );
    assert_eq!(iggy.connection_count(), 1);
}

#[test]
fn dropping_the_stand_in_closes_everything() {
    // The STAND-IN itself: what dropping it does.
    let iggy = IggyStandIn::start().unwrap();
    let addr = iggy.addr();
    let mut admin = iggy.admin().unwrap();
    drop(iggy);
    assert!(admin.ping().is_err());
    assert!(IggyAdmin::connect(addr, "iggy", "iggy").is_err());
}

#[test]
fn the_default_server_is_the_real_one_when_its_binary_is_here() {
    let server = IggyServer::start().unwrap();
    if std::env::var("SPILLWAY_TEST_IGGY").is_ok_and(|v| !v.trim().is_empty()) {
        assert!(matches!(server, IggyServer::External { .. }), "{server:?}");
    } else if spillway_tests::iggy::server_binary().unwrap().is_some() {
        assert!(matches!(server, IggyServer::Real(_)), "{server:?}");
        assert!(server.is_real());
    } else {
        assert!(
            !spillway_tests::iggy::real_iggy_required(),
            "SPILLWAY_REQUIRE_REAL_IGGY is set: start() must have failed"
        );
        let stand_in = server.stand_in().expect("a stand-in");
        assert_eq!(stand_in.addr(), server.addr());
    }
    assert_eq!((server.username(), server.password()), ("iggy", "iggy"));
    server.admin().unwrap().ping().unwrap();
}

/// A raw request header round trip: what `IggyAdmin::encode_request` puts on the wire.
#[test]
fn requests_carry_the_code_only_when_non_replicated() {
    // The STAND-IN: it shows the raw request frames it received.
    let iggy = IggyStandIn::start().unwrap();
    let mut admin = iggy.admin().unwrap();
    let read = admin.encode_request(GET_STREAM_CODE, &[]);
    let header: RequestHeader =
        bytemuck::checked::try_pod_read_unaligned(&read[..HEADER_SIZE]).unwrap();
    assert_eq!(
        u32::from_le_bytes(header.reserved[..4].try_into().unwrap()),
        GET_STREAM_CODE
    );
    assert_eq!(header.request_checksum, 0);
    let body = b"abc";
    let create = admin.encode_request(202, body);
    let header: RequestHeader =
        bytemuck::checked::try_pod_read_unaligned(&create[..HEADER_SIZE]).unwrap();
    assert_eq!(header.reserved[..4], [0, 0, 0, 0]);
    assert_ne!(header.request_checksum, 0);
    assert_eq!(header.session, admin.session());
}

// ------------------------------------------------------------------------------------- TLS

#[test]
fn a_tls_stand_in_serves_the_protocol_over_tls_with_its_ca() {
    // The STAND-IN's own TLS listener (TLS to the real server: engine/tests/integration/e2e_tls.rs).
    let iggy = IggyStandIn::start_with(IggyStandInOpts::new().tls()).unwrap();
    let ca_pem = iggy.ca_pem().expect("a TLS stand-in has a CA").to_owned();
    assert!(ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
    assert!(IggyStandIn::start().unwrap().ca_pem().is_none());

    // Through admin() (TLS, since the stand-in serves TLS) and through connect_tls by name and
    // by IP address: a large batch too, so replies span several TLS records.
    let mut admin = iggy.admin().unwrap();
    let (stream, topic) = topic(&mut admin, 1);
    let big: Vec<TestMessage> = (1..=40u128)
        .map(|id| TestMessage::new(id, vec![b'x'; 4096]))
        .collect();
    admin.send(&stream, &topic, 0, &big).unwrap();
    for name in [DEFAULT_SERVER_NAME, "127.0.0.1"] {
        let mut other =
            IggyAdmin::connect_tls(iggy.addr(), &ca_pem, name, iggy.username(), iggy.password())
                .unwrap();
        let polled = other
            .poll(&named("tls-reader"), &stream, &topic, 0, 0, 100)
            .unwrap();
        assert_eq!(offsets(&polled), (0..40).collect::<Vec<u64>>());
        assert!(polled.iter().all(|m| m.payload.len() == 4096));
        other.ping().unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while iggy.connection_count() != 1 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        iggy.connection_count(),
        1,
        "closed TLS connections are cleaned up"
    );

    // A wrong password over TLS is refused as over plain TCP.
    let wrong = IggyAdmin::connect_tls(
        iggy.addr(),
        &ca_pem,
        DEFAULT_SERVER_NAME,
        iggy.username(),
        "not-the-password",
    );
    assert!(
        matches!(wrong, Err(HarnessError::IggyRefused { .. })),
        "{wrong:?}"
    );

    // Killed connections end over TLS too.
    iggy.kill_connections();
    assert_eq!(iggy.connection_count(), 0);
    assert!(admin.ping().is_err());
}

#[test]
fn a_tls_stand_in_is_refused_by_a_client_trusting_another_ca_or_name() {
    // The STAND-IN's own TLS listener (TLS to the real server: engine/tests/integration/e2e_tls.rs).
    let iggy = IggyStandIn::start_with(IggyStandInOpts::new().tls()).unwrap();
    let other_ca = TestCa::new("another CA").unwrap();
    let wrong_ca = IggyAdmin::connect_tls(
        iggy.addr(),
        other_ca.cert_pem(),
        DEFAULT_SERVER_NAME,
        iggy.username(),
        iggy.password(),
    );
    assert!(
        matches!(wrong_ca, Err(HarnessError::Tls(_))),
        "{wrong_ca:?}"
    );
    let wrong_name = IggyAdmin::connect_tls(
        iggy.addr(),
        iggy.ca_pem().unwrap(),
        "not-the-server.example",
        iggy.username(),
        iggy.password(),
    );
    assert!(
        matches!(wrong_name, Err(HarnessError::Tls(_))),
        "{wrong_name:?}"
    );
    // The stand-in survives the failed handshakes.
    iggy.admin().unwrap().ping().unwrap();
}

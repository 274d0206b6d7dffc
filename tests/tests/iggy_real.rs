//! The real Iggy server as the harness runs it ([`IggyProcess`]: temporary data directory, free
//! loopback port, stopped on drop), and the admin client's answer to its transient refusals.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Barrier};
use std::thread;

use spillway_tests::iggy::{real_iggy_required, server_binary};
use spillway_tests::{
    IggyAdmin, IggyProcess, IggyProcessOpts, IggyServer, IggyStandIn, TestConsumer, TestMessage,
};

/// The real server, or `None` (with a line saying so) on a machine without its binary.
fn real() -> Option<IggyProcess> {
    if server_binary().unwrap().is_none() {
        assert!(
            !real_iggy_required(),
            "SPILLWAY_REQUIRE_REAL_IGGY is set and there is no Iggy server binary"
        );
        eprintln!("no Iggy server binary here: skipped");
        return None;
    }
    Some(IggyProcess::start_with(IggyProcessOpts::new()).unwrap())
}

fn admin(server: &IggyProcess) -> IggyAdmin {
    IggyAdmin::connect(server.addr(), "iggy", "iggy").unwrap()
}

#[test]
fn the_real_server_serves_a_fresh_directory_and_keeps_offsets_through_a_crash() {
    let Some(mut server) = real() else { return };
    assert!(server.pid().is_some());
    let mut a = admin(&server);
    a.create_stream("s").unwrap();
    a.create_topic("s", "t", 2).unwrap();
    // The server writes a topic's messages to disk every 1,024 messages (or 1 MiB) unless the
    // topic asks for fsync; what a SIGKILL finds unwritten is gone after the restart, and an
    // offset stored past it reads back as the partition's new head. 1,024 are written.
    let batch: Vec<TestMessage> = (0..1024)
        .map(|n| TestMessage::new(n + 1, format!("m{n}").into_bytes()))
        .collect();
    a.send("s", "t", 1, &batch).unwrap();
    let consumer = TestConsumer::Named("c".into());
    a.store_offset(&consumer, "s", "t", 1, 6).unwrap();
    let addr = server.addr();

    server.kill_and_restart().unwrap();
    assert_eq!(server.addr(), addr, "the same port after a restart");
    let mut a = admin(&server);
    assert_eq!(a.stored_offset(&consumer, "s", "t", 1).unwrap(), Some(6));
    let polled = a.poll(&consumer, "s", "t", 1, 7, 10).unwrap();
    let offsets: Vec<u64> = polled.iter().map(|m| m.offset).collect();
    assert_eq!(offsets, (7..17).collect::<Vec<u64>>());
    assert_eq!(polled[0].payload.as_ref(), b"m7");

    // A second server at the same time has its own port and its own (empty) data.
    let other = IggyProcess::start_with(IggyProcessOpts::new()).unwrap();
    assert_ne!(other.addr(), server.addr());
    assert_ne!(other.dir(), server.dir());
    let err = admin(&other).partition_heads("s", "t").unwrap_err();
    assert!(
        err.iggy_code().is_some() || err.to_string().contains("no topic"),
        "{err}"
    );
}

#[test]
fn a_transiently_refused_request_is_sent_again_by_the_admin() {
    // The STAND-IN: it refuses the next metadata changes with 57 on demand; the real server
    // does so only at times, under concurrent changes.
    let stand_in = IggyStandIn::start().unwrap();
    let mut a = stand_in.admin().unwrap();
    stand_in.refuse_transiently(3);
    a.create_stream("after-three-refusals").unwrap();
    assert_eq!(a.transient_retries(), 3);
    assert_eq!(stand_in.transient_refusals_left(), 0);
    // Applied once: creating it again is refused as a duplicate, not retried.
    let err = a.create_stream("after-three-refusals").unwrap_err();
    assert_eq!(err.iggy_code(), Some(1012), "{err}");
    assert_eq!(a.transient_retries(), 3);
}

#[test]
fn concurrent_metadata_changes_on_the_real_server_all_succeed() {
    let Some(server) = real() else { return };
    let server = Arc::new(IggyServer::Real(server));
    admin_of(&server)
        .create_stream("shared")
        .and_then(|()| admin_of(&server).create_topic("shared", "t", 8))
        .and_then(|()| admin_of(&server).create_consumer_group("shared", "t", "g"))
        .unwrap();
    let threads = 8;
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let server = Arc::clone(&server);
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                let mut a = admin_of(&server);
                barrier.wait();
                let stream = format!("own-{i}");
                a.create_stream(&stream)?;
                a.create_topic(&stream, "t", 2)?;
                a.create_consumer_group(&stream, "t", "g")?;
                a.join_group("shared", "t", "g")?;
                let assigned = a.sync_group("shared", "t", "g")?;
                Ok::<_, spillway_tests::HarnessError>((a.transient_retries(), assigned))
            })
        })
        .collect();
    let mut retries = 0;
    for (i, h) in handles.into_iter().enumerate() {
        let (n, assigned) = h
            .join()
            .unwrap()
            .unwrap_or_else(|e| panic!("thread {i}: {e}"));
        assert!(assigned.is_some(), "thread {i} is a member");
        retries += n;
    }
    eprintln!("transient refusals answered by sending again: {retries}");
}

fn admin_of(server: &IggyServer) -> IggyAdmin {
    server.admin().unwrap()
}

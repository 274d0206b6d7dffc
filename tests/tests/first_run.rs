//! The first-run demo end to end: `spillway-first-run` with a small message count against the
//! debug `spillway` binary, real mosquitto and moto's S3, with the generate source and with
//! `--iggy` against the real Iggy server. It must exit 0 and report the three counts
//! (sent, received, in objects) equal.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

use spillway_tests::ports::free_loopback_port;
use spillway_tests::{
    HarnessError, IggyProcess, IggyProcessOpts, IggyServer, IggyStandIn, IggyStandInOpts,
};

/// `target/debug/spillway`, built with `cargo build -p spillway` when it is missing.
fn engine() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let path = target.join("debug").join("spillway");
    if !path.is_file() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let status = Command::new(cargo)
            .args(["build", "-p", "spillway", "--bin", "spillway"])
            .current_dir(&root)
            .status()
            .expect("run cargo build -p spillway");
        assert!(status.success(), "cargo build -p spillway failed");
    }
    path
}

/// Runs `spillway-first-run --messages n` with `extra` arguments and environment; asserts it
/// exits 0 with the three counts equal, and returns (stdout, stderr).
fn run_ok(n: u64, extra: &[&str], env: &[(&str, &str)]) -> (String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_spillway-first-run"));
    cmd.args(["--messages", &n.to_string()])
        .args(extra)
        .arg("--engine")
        .arg(engine())
        .env_remove("SPILLWAY_IGGY_ADDRESS")
        .env_remove("SPILLWAY_IGGY_TOKEN");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run spillway-first-run");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "first-run {extra:?} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let expected = format!("sent {n} = received {n} = in objects {n}");
    assert!(
        stdout.contains(&expected),
        "summary without `{expected}`:\n{stdout}"
    );
    (stdout, stderr)
}

#[test]
fn first_run_delivers_every_message_to_mqtt_and_s3() {
    run_ok(2000, &[], &[]);
}

/// `--iggy`: the program logs in, creates a stream, sends the messages, runs the engine with
/// the Iggy source, stops it once both sinks stored their last offsets, checks the counts and
/// deletes the stream. The server here is the real Iggy server the harness starts (the
/// stand-in only where no server binary is at hand). Its root user is not the default
/// `iggy`/`iggy`, so the run only succeeds if
/// the credentials really come from `SPILLWAY_IGGY_USERNAME` / `SPILLWAY_IGGY_PASSWORD`, and
/// the password must appear nowhere in the output. (Before `--iggy` was implemented the
/// program exited 2 with "not supported yet", which fails the first assertion.)
#[test]
fn first_run_with_iggy_delivers_every_message_to_mqtt_and_s3() {
    let password = "first-run-secret-7f3a";
    let iggy = match spillway_tests::iggy::server_binary().expect("server binary") {
        Some(_) => IggyServer::Real(
            IggyProcess::start_with(IggyProcessOpts::new().root_user("first-run", password))
                .expect("start the Iggy server"),
        ),
        None => {
            assert!(
                !spillway_tests::iggy::real_iggy_required(),
                "no Iggy server binary"
            );
            IggyServer::StandIn(
                IggyStandIn::start_with(IggyStandInOpts::new().user("first-run", password))
                    .expect("start the Iggy stand-in"),
            )
        }
    };
    let addr = iggy.addr().to_string();
    let (stdout, stderr) = run_ok(
        2000,
        &["--iggy", &addr],
        &[
            ("SPILLWAY_IGGY_USERNAME", iggy.username()),
            ("SPILLWAY_IGGY_PASSWORD", iggy.password()),
        ],
    );
    assert!(
        stdout.contains(&format!("Iggy server at {}", iggy.addr())),
        "the output does not say which Iggy it used:\n{stdout}"
    );
    assert!(
        !stdout.contains(password) && !stderr.contains(password),
        "the password was printed:\n{stdout}\n{stderr}"
    );
    // The stream it created is gone again.
    let stream = stdout
        .split_whitespace()
        .skip_while(|w| *w != "deleted")
        .nth(2)
        .unwrap_or_else(|| panic!("no `deleted stream` line:\n{stdout}"));
    assert!(stream.starts_with("spillway-first-run-"), "{stdout}");
    let mut admin = iggy.admin().expect("admin");
    assert!(
        matches!(
            admin.partition_heads(stream, "demo"),
            Err(HarnessError::IggyNotFound(_))
        ),
        "stream {stream} still exists"
    );
}

/// An Iggy address nothing listens on: exit 2 before any server is started, naming the address.
#[test]
fn first_run_with_an_unreachable_iggy_exits_2() {
    let port = free_loopback_port().expect("free port");
    let address = format!("127.0.0.1:{port}");
    let out = Command::new(env!("CARGO_BIN_EXE_spillway-first-run"))
        .args(["--iggy", &address, "--engine"])
        .arg(engine())
        .output()
        .expect("run spillway-first-run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&address), "{stderr}");
}

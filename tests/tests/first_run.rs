//! The first-run demo end to end: `spillway-first-run` with a small message count against the
//! debug `spillway` binary, real mosquitto and s3s-fs. It must exit 0 and report the three
//! counts (sent, received, in objects) equal.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

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

#[test]
fn first_run_delivers_every_message_to_mqtt_and_s3() {
    let n = 2000;
    let out = Command::new(env!("CARGO_BIN_EXE_spillway-first-run"))
        .args(["--messages", &n.to_string(), "--engine"])
        .arg(engine())
        .env_remove("SPILLWAY_IGGY_ADDRESS")
        .output()
        .expect("run spillway-first-run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "first-run failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let expected = format!("sent {n} = received {n} = in objects {n}");
    assert!(
        stdout.contains(&expected),
        "summary without `{expected}`:\n{stdout}"
    );
}

#[test]
fn first_run_refuses_an_iggy_address_for_now() {
    let out = Command::new(env!("CARGO_BIN_EXE_spillway-first-run"))
        .args(["--iggy", "127.0.0.1:8090"])
        .output()
        .expect("run spillway-first-run");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not supported yet"), "{stderr}");
}

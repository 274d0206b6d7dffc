//! The engine's logs as an operator's tools see them: `spillway run` (the generate source to a
//! file sink, no servers needed) with stderr going to a file, as under systemd or a pipe.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::{Engine, wait_exit_code};

fn config(out: &std::path::Path) -> String {
    format!(
        r#"
[metrics]
address = ""
log_interval = "50ms"

[[sink]]
name = "logs"
type = "file"
source = "generate"

[sink.file]
path = "{}"

[sink.generate]
partitions = 2
rate = 2000
size = 50
messages = 400
"#,
        out.display()
    )
}

/// With stderr not a terminal the text log has no colour codes, though NO_COLOR is not set
/// (the harness sets it for every other test; here it is set empty, which means unset). Seen
/// failing before: tracing's default writes `ESC[` sequences whatever stderr is.
#[test]
fn text_logs_to_a_file_have_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    let mut engine = Engine::start_with_env(dir.path(), "text", &config(&out), &[("NO_COLOR", "")]);
    assert_eq!(
        wait_exit_code(&mut engine, Duration::from_secs(60)),
        Some(0)
    );
    let log = engine.log();
    assert!(log.contains("running"), "{log}");
    assert!(!log.contains('\u{1b}'), "no ANSI escapes:\n{log:?}");
}

/// `SPILLWAY_LOG_FORMAT=json` (as `--log-format json`): every line is one JSON object with the
/// time, the level, the message and the fields at the top, for a log shipper to take as it is.
/// The progress line is among them, with its own message.
#[test]
fn json_logs_are_one_object_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    let mut engine = Engine::start_with_env(
        dir.path(),
        "json",
        &config(&out),
        &[("SPILLWAY_LOG_FORMAT", "json")],
    );
    assert_eq!(
        wait_exit_code(&mut engine, Duration::from_secs(60)),
        Some(0)
    );
    let log = engine.log();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}")))
        .collect();
    assert!(lines.len() >= 3, "{log}");
    for l in &lines {
        assert!(l["timestamp"].is_string(), "{l}");
        assert!(
            matches!(
                l["level"].as_str(),
                Some("INFO" | "WARN" | "ERROR" | "DEBUG")
            ),
            "{l}"
        );
        assert!(l["message"].is_string(), "{l}");
    }
    assert!(
        lines
            .iter()
            .any(|l| l["message"].as_str().is_some_and(|m| m.contains("running"))),
        "{log}"
    );
}

/// A bad `--log-format` is refused by name before anything runs.
#[test]
fn an_unknown_log_format_is_refused() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["--log-format", "xml", "check", "--config", "/nonexistent"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("xml") && err.contains("json"), "{err}");
}

/// `--help` and `run --help` point at the config reference, the environment and the examples.
#[test]
fn help_points_at_the_config_reference_the_environment_and_the_examples() {
    for args in [
        &["--help"][..],
        &["run", "--help"][..],
        &["check", "--help"][..],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_spillway"))
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        for needle in [
            "Configuration",
            "README",
            "examples/",
            "SPILLWAY_IGGY_PASSWORD",
            "SPILLWAY_MQTT_PASSWORD_<SINK>",
            "AWS_ACCESS_KEY_ID",
            "${NAME}",
            "--log-format",
        ] {
            assert!(text.contains(needle), "{args:?} lacks {needle:?}:\n{text}");
        }
    }
}

//! The example configs in `examples/` load, validate and resolve (so they stay true to the code).
//!
//! The examples are written for a real deployment, so the check stands in for what only a
//! deployment has, and nothing else:
//! - Secrets: an example keeps them out of the file (checked) and names the environment variable
//!   each one comes from (checked: the name must appear in the file, spelled as the engine reads
//!   it). The check supplies a placeholder for exactly those variables; nothing is read from this
//!   machine's environment, so a stray `AWS_REGION` or `SPILLWAY_IGGY_ADDRESS` cannot change the
//!   outcome.
//! - Certificate and key files (`tls_ca`, `tls_cert`, `tls_key`): validation insists that they
//!   exist, so each path (which must be absolute) is swapped for an empty stand-in file before
//!   validating.

#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use toml::{Table, Value};

/// What the check puts into the environment variables an example relies on.
const PLACEHOLDER: &str = "placeholder-not-a-secret";

/// Keys that name a file the engine reads (validation requires a readable file).
const FILE_KEYS: [&str; 3] = ["tls_ca", "tls_cert", "tls_key"];

#[test]
fn every_example_config_is_valid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    let stand_ins = tempfile::tempdir().unwrap();
    let mut stand_in_count = 0;
    for path in &files {
        let shown = path.display();
        let text = std::fs::read_to_string(path).unwrap();
        // A build without Iceberg tables refuses such a sink (naming the feature): the example
        // is checked by the builds that have them (CI's).
        if !cfg!(feature = "iceberg") && text.contains("[sink.s3.iceberg]") {
            continue;
        }
        let mut doc: Table = text
            .parse()
            .unwrap_or_else(|e| panic!("{shown}: not valid TOML: {e}"));
        no_inline_secrets(path, &doc);
        let vars = env_relied_on(&doc);
        for var in &vars {
            assert!(
                text.contains(var.as_str()),
                "{shown}: takes a secret from {var} but does not say so; name the variable in a comment"
            );
        }
        let swapped = swap_files(path, &mut doc, stand_ins.path(), &mut stand_in_count);
        let checked = if swapped > 0 {
            toml::to_string(&doc).unwrap()
        } else {
            text
        };
        let env = |name: &str| vars.contains(name).then(|| PLACEHOLDER.to_owned());
        let cfg = spillway::config::parse(&checked, path, &env).unwrap_or_else(|e| panic!("{e}"));
        let machine = spillway::coremap::Machine {
            cores: vec![0, 1, 2, 3],
        };
        spillway::coremap::resolve(&cfg, &machine)
            .unwrap_or_else(|(k, m)| panic!("{shown}: {k}: {m}"));
    }
    assert!(
        files.len() >= 2,
        "examples/ should hold the example configs"
    );
}

fn sinks(doc: &Table) -> impl Iterator<Item = &Table> {
    doc.get("sink")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_table)
}

fn table<'a>(t: &'a Table, key: &str) -> Option<&'a Table> {
    t.get(key).and_then(Value::as_table)
}

/// Secrets belong in the environment. The one exception is `iggy.password = "iggy"`, the stock
/// password of a fresh local Iggy server.
fn no_inline_secrets(path: &Path, doc: &Table) {
    let shown = path.display();
    if let Some(iggy) = table(doc, "iggy") {
        assert!(
            !iggy.contains_key("token"),
            "{shown}: iggy.token belongs in SPILLWAY_IGGY_TOKEN"
        );
        if let Some(p) = iggy.get("password") {
            assert_eq!(
                p.as_str(),
                Some("iggy"),
                "{shown}: iggy.password belongs in SPILLWAY_IGGY_PASSWORD"
            );
        }
    }
    for sink in sinks(doc) {
        if let Some(mqtt) = table(sink, "mqtt") {
            assert!(
                !mqtt.contains_key("password"),
                "{shown}: mqtt.password belongs in SPILLWAY_MQTT_PASSWORD_<SINK>"
            );
        }
        if let Some(s3) = table(sink, "s3") {
            for key in ["secret_access_key", "session_token"] {
                assert!(
                    !s3.contains_key(key),
                    "{shown}: s3.{key} belongs in the AWS_* environment variables"
                );
            }
        }
    }
}

/// The environment variables the file needs for the secrets it leaves out.
fn env_relied_on(doc: &Table) -> HashSet<String> {
    let mut vars = HashSet::new();
    let iggy = table(doc, "iggy");
    let has = |key: &str| iggy.is_some_and(|t| t.contains_key(key));
    let reads_iggy =
        sinks(doc).any(|s| s.get("source").and_then(Value::as_str) != Some("generate"));
    if reads_iggy && !has("token") && !has("password") {
        vars.insert("SPILLWAY_IGGY_PASSWORD".to_owned());
    }
    for sink in sinks(doc) {
        if let Some(mqtt) = table(sink, "mqtt")
            && mqtt.contains_key("username")
            && !mqtt.contains_key("password")
        {
            let name = sink.get("name").and_then(Value::as_str).unwrap_or_default();
            vars.insert(spillway::config::password_env(name));
        }
        if let Some(s3) = table(sink, "s3") {
            for (key, var) in [
                ("access_key_id", "AWS_ACCESS_KEY_ID"),
                ("secret_access_key", "AWS_SECRET_ACCESS_KEY"),
            ] {
                if !s3.contains_key(key) {
                    vars.insert(var.to_owned());
                }
            }
        }
    }
    vars
}

/// Replaces every certificate or key path in `doc` (at any depth) by an empty file in `dir`;
/// how many there were. `count` numbers the files over all examples.
fn swap_files(path: &Path, doc: &mut Table, dir: &Path, count: &mut usize) -> usize {
    let mut swapped = 0;
    for (key, value) in doc.iter_mut() {
        match value {
            Value::String(file) if FILE_KEYS.contains(&key.as_str()) => {
                assert!(
                    Path::new(file.as_str()).is_absolute(),
                    "{}: {key} = {file:?}: use an absolute path (a relative one depends on the directory spillway starts in)",
                    path.display()
                );
                *count += 1;
                let stand_in = dir.join(format!("{count}-{key}.pem"));
                std::fs::write(&stand_in, b"").unwrap();
                *file = stand_in.to_str().unwrap().to_owned();
                swapped += 1;
            }
            Value::Table(t) => swapped += swap_files(path, t, dir, count),
            Value::Array(items) => {
                for item in items {
                    if let Value::Table(t) = item {
                        swapped += swap_files(path, t, dir, count);
                    }
                }
            }
            _ => {}
        }
    }
    swapped
}

//! README.md's configuration table against the config types: every key the code accepts has a
//! row, and every key a row names is one the code accepts.
//!
//! The keys come from the code, not from a list kept by hand. serde's derived `Deserialize` for a
//! struct hands the names of its fields (after `rename`) to `Deserializer::deserialize_struct`. A
//! probe deserializer records them, then walks into each field in turn to learn whether it is a
//! value or a table of its own (`[sink.mqtt]`, `[[runtime.pin]]`), starting from `Config`, so a
//! new field or a new nested table is seen without touching this file.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Deserialize;
use serde::de::value::StrDeserializer;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use spillway::config::Config;

const README: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"));

// ---------------------------------------------------------------------------------------------
// The keys in the code.

/// Whether a key holds a value or a table of further keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Value,
    Table,
}

/// Config tables whose keys are the user's own names (read as maps): the README documents
/// each as one row, not key by key.
const FREE_TABLES: [&str; 2] = ["sink.s3.user_metadata", "sink.s3.tags"];

/// What the probe found at the end of its route. It travels as the deserializer's error: that is
/// how it gets back out through the derived code, which passes errors on unchanged.
#[derive(Debug)]
enum Found {
    /// A struct: a table with these keys.
    Table(&'static [&'static str]),
    /// Anything else: a string, number, bool, duration, size, unit enum, or a list of values.
    Value,
    /// Something whose keys the probe cannot list (a map, as `#[serde(flatten)]` asks for), or a
    /// message from the derived code itself.
    Unsupported(String),
}

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for Found {}

impl de::Error for Found {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Found::Unsupported(msg.to_string())
    }
}

/// A deserializer that follows `route` (one key per table level, e.g. `["sink", "mqtt"]`) into
/// the config types and reports what it finds at the end of it, as its error.
struct Probe<'r> {
    route: &'r [&'static str],
}

impl<'de> Deserializer<'de> for Probe<'_> {
    type Error = Found;

    /// Every value type ends here (directly or through `forward_to_deserialize_any!`).
    /// Self-describing values such as durations, sizes and `runtime.cores` call it themselves.
    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Found> {
        Err(Found::Value)
    }

    /// An optional key is still a key: look at what it holds when present.
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Found> {
        visitor.visit_some(self)
    }

    /// A wrapper struct is what it wraps.
    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Found> {
        visitor.visit_newtype_struct(self)
    }

    /// A list: its keys are those of its elements (`[[sink]]` has `sink.name`), and a list of
    /// values (`sink.partitions`) is a value.
    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Found> {
        visitor.visit_seq(OneElement {
            route: Some(self.route),
        })
    }

    /// A table: at the end of the route, its keys; otherwise offer it the route's next key only,
    /// and follow that key's value.
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Found> {
        match self.route.split_first() {
            None => Err(Found::Table(fields)),
            Some((key, rest)) => visitor.visit_map(OneEntry {
                key: Some(key),
                rest,
            }),
        }
    }

    fn deserialize_map<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Found> {
        Err(Found::Unsupported(
            "it is read as a map (a map type, or a struct with `#[serde(flatten)]`), so its keys \
             cannot be listed from the code"
                .to_owned(),
        ))
    }

    // Enums count as values: the config's enums all have unit variants, written as strings
    // (`type = "mqtt"`). An enum with table variants would need its own rule here.
    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf unit
        unit_struct tuple tuple_struct enum identifier ignored_any
    }
}

/// The one entry a probed table is given: the route's next key, whose value is probed further.
struct OneEntry<'r> {
    key: Option<&'static str>,
    rest: &'r [&'static str],
}

impl<'de> MapAccess<'de> for OneEntry<'_> {
    type Error = Found;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Found> {
        match self.key.take() {
            Some(key) => seed
                .deserialize(StrDeserializer::<Found>::new(key))
                .map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Found> {
        seed.deserialize(Probe { route: self.rest })
    }
}

/// The one element a probed list is given, probed with the same route.
struct OneElement<'r> {
    route: Option<&'r [&'static str]>,
}

impl<'de> SeqAccess<'de> for OneElement<'_> {
    type Error = Found;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Found> {
        match self.route.take() {
            Some(route) => seed.deserialize(Probe { route }).map(Some),
            None => Ok(None),
        }
    }
}

/// Every key the config file accepts, dotted as the README writes it (`sink.mqtt.will.qos`;
/// arrays of tables without brackets), with its kind.
fn code_keys() -> BTreeMap<String, Kind> {
    fn walk(route: &mut Vec<&'static str>, keys: &mut BTreeMap<String, Kind>) {
        assert!(
            route.len() < 8,
            "the config types nest suspiciously deep at `{}`",
            route.join(".")
        );
        let found = match Config::deserialize(Probe {
            route: route.as_slice(),
        }) {
            Ok(_) => Found::Unsupported("the probe unexpectedly produced a value".to_owned()),
            Err(found) => found,
        };
        match found {
            Found::Table(fields) => {
                if !route.is_empty() {
                    keys.insert(route.join("."), Kind::Table);
                }
                for field in fields {
                    route.push(field);
                    walk(route, keys);
                    route.pop();
                }
            }
            Found::Value => {
                keys.insert(route.join("."), Kind::Value);
            }
            // Tables whose keys the user chooses (S3 user metadata and tags): one row each.
            Found::Unsupported(_) if FREE_TABLES.contains(&route.join(".").as_str()) => {
                keys.insert(route.join("."), Kind::Value);
            }
            Found::Unsupported(why) => panic!(
                "config key `{}`: {why}; teach engine/tests/integration/config_reference.rs to list its keys",
                route.join(".")
            ),
        }
    }
    let mut keys = BTreeMap::new();
    walk(&mut Vec::new(), &mut keys);
    keys
}

// ---------------------------------------------------------------------------------------------
// The keys in the README.

/// The key cells (first column) of the table under "### Configuration", each with its line
/// number in README.md.
fn readme_key_cells() -> Vec<(usize, &'static str)> {
    let mut lines = README
        .lines()
        .enumerate()
        .skip_while(|(_, line)| line.trim() != "### Configuration")
        .skip(1)
        .take_while(|(_, line)| !line.starts_with('#'))
        .skip_while(|(_, line)| !line.starts_with("| key |"));
    assert!(
        lines.next().is_some(),
        "README.md has no `| key | type | default | meaning |` table under \"### Configuration\""
    );
    let separator = lines.next().map(|(_, line)| line.trim()).unwrap_or("");
    assert!(
        separator.starts_with("| ---"),
        "the configuration table's header is not followed by `| --- |`: {separator:?}"
    );
    let cells: Vec<(usize, &str)> = lines
        .take_while(|(_, line)| line.starts_with('|'))
        .map(|(i, line)| {
            let cell = line[1..].split('|').next().unwrap_or("");
            (i + 1, cell.trim())
        })
        .collect();
    assert!(
        !cells.is_empty(),
        "README.md's configuration table is empty"
    );
    cells
}

/// The full dotted keys one key cell names. Code spans are read in order:
///
/// - `iggy.address` (a dotted name whose first part is a top-level section) is a key;
/// - `[[runtime.pin]]` or `[sink.mqtt]` names a table;
/// - a bare name (`secret_access_key`, `topic`) is a key of the table named just before it, or,
///   when the name before it is a value, a key next to that one
///   (`sink.s3.access_key_id` / `secret_access_key`);
/// - anything else (`"s3"`, `0`) is a value, not a key; values in the key column are therefore
///   written quoted, or a bare one would be read as a key (and reported as unknown).
fn keys_named_in(cell: &str, code: &BTreeMap<String, Kind>) -> Vec<String> {
    let is_section = |name: &str| !name.contains('.') && code.contains_key(name);
    let is_name = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    };
    let mut keys = Vec::new();
    // The table that bare names belong to.
    let mut context: Option<String> = None;
    for span in cell.split('`').skip(1).step_by(2) {
        let table = span
            .strip_prefix("[[")
            .and_then(|s| s.strip_suffix("]]"))
            .or_else(|| span.strip_prefix('[').and_then(|s| s.strip_suffix(']')));
        let dotted = table.unwrap_or(span);
        let first = dotted.split('.').next().unwrap_or("");
        if dotted.split('.').all(is_name)
            && is_section(first)
            && (dotted.contains('.') || table.is_some())
        {
            keys.push(dotted.to_owned());
            context = if table.is_some() || code.get(dotted) == Some(&Kind::Table) {
                Some(dotted.to_owned())
            } else {
                dotted.rsplit_once('.').map(|(parent, _)| parent.to_owned())
            };
        } else if is_name(span)
            && let Some(table) = &context
        {
            keys.push(format!("{table}.{span}"));
        }
    }
    keys
}

/// Every key the table names, with the README line of each row that names it.
fn readme_keys(code: &BTreeMap<String, Kind>) -> BTreeMap<String, Vec<usize>> {
    let mut keys: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (line, cell) in readme_key_cells() {
        for key in keys_named_in(cell, code) {
            keys.entry(key).or_default().push(line);
        }
    }
    keys
}

// ---------------------------------------------------------------------------------------------
// The tests.

#[test]
fn the_probe_finds_keys_at_every_depth() {
    let code = code_keys();
    for (key, kind) in [
        ("iggy", Kind::Table),
        ("iggy.address", Kind::Value),
        ("runtime.cores", Kind::Value),
        ("runtime.pin", Kind::Table),
        ("runtime.pin.core", Kind::Value),
        ("sink", Kind::Table),
        ("sink.type", Kind::Value),
        ("sink.partitions", Kind::Value),
        ("sink.mqtt", Kind::Table),
        ("sink.mqtt.will", Kind::Table),
        ("sink.mqtt.will.qos", Kind::Value),
        ("sink.s3.part_size", Kind::Value),
        ("sink.generate.rate", Kind::Value),
    ] {
        assert_eq!(code.get(key), Some(&kind), "{key}");
    }
    // `Config::path` is `#[serde(skip)]`: not a key.
    assert!(!code.contains_key("path"));
}

#[test]
fn key_cells_are_read_with_their_shorthands() {
    let code = code_keys();
    let read = |cell: &str| keys_named_in(cell, &code);
    assert_eq!(
        read("`iggy.username` / `iggy.password`"),
        ["iggy.username", "iggy.password"]
    );
    assert_eq!(
        read("`sink.s3.access_key_id` / `secret_access_key` / `session_token`"),
        [
            "sink.s3.access_key_id",
            "sink.s3.secret_access_key",
            "sink.s3.session_token"
        ]
    );
    assert_eq!(
        read(
            "`sink.s3.storage_class`, `sink.s3.sse` (`\"s3\"`, `\"kms\"`), `sink.s3.sse_kms_key_id`"
        ),
        [
            "sink.s3.storage_class",
            "sink.s3.sse",
            "sink.s3.sse_kms_key_id"
        ]
    );
    assert_eq!(
        read("`[[runtime.pin]]` `sink`, `partition`, `core`"),
        [
            "runtime.pin",
            "runtime.pin.sink",
            "runtime.pin.partition",
            "runtime.pin.core"
        ]
    );
    assert_eq!(
        read("`sink.mqtt.will` `topic`, `qos`"),
        [
            "sink.mqtt.will",
            "sink.mqtt.will.topic",
            "sink.mqtt.will.qos"
        ]
    );
    // Values and names outside the config are not keys.
    assert!(read("`\"auto\"` or `0` or `tuning.md`").is_empty());
}

#[test]
fn every_config_key_has_a_row_in_the_readme() {
    let code = code_keys();
    let documented = readme_keys(&code);
    let missing: Vec<&str> = code
        .iter()
        .filter(|(key, kind)| **kind == Kind::Value && !documented.contains_key(key.as_str()))
        .map(|(key, _)| key.as_str())
        .collect();
    assert!(
        missing.is_empty(),
        "README.md's configuration table (\"### Configuration\") has no row for {} key(s) the \
         config accepts; add each with its type, default (from the code) and meaning (from its \
         doc comment):\n  {}",
        missing.len(),
        missing.join("\n  ")
    );
}

#[test]
fn every_key_in_the_readme_is_a_config_key() {
    let code = code_keys();
    let stale: BTreeSet<String> = readme_keys(&code)
        .into_iter()
        .filter(|(key, _)| !code.contains_key(key))
        .map(|(key, lines)| {
            let lines: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
            format!("{key} (README.md line {})", lines.join(", "))
        })
        .collect();
    assert!(
        stale.is_empty(),
        "README.md's configuration table names {} key(s) the config does not accept (renamed or \
         removed?):\n  {}",
        stale.len(),
        stale.into_iter().collect::<Vec<_>>().join("\n  ")
    );
}

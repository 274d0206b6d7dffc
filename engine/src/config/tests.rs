use std::path::Path;

use super::*;

fn parse_with(text: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    parse(text, Path::new("spillway.toml"), &move |name| {
        env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    })
}

const GOOD: &str = r#"
[iggy]
address = "127.0.0.1:8090"
username = "iggy"
password = "secret"

[runtime]
cores = [1]
shard_memory_budget = "64MiB"

[metrics]
address = "127.0.0.1:0"

[[sink]]
name = "to-file"
type = "file"
stream = "events"
topic = "orders"
partitions = [0, 1]
window_messages = 500
poll_interval = "2ms"

[sink.file]
path = "/tmp/out.jsonl"
"#;

#[test]
fn a_good_file_loads_with_defaults() {
    let c = parse_with(GOOD, &[]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.sinks.len(), 1);
    let s = &c.sinks[0];
    assert_eq!(s.window_messages, 500);
    assert_eq!(s.batch_size, 1000);
    assert_eq!(s.poll_interval.0, std::time::Duration::from_millis(2));
    assert_eq!(s.consumer_name(), "to-file");
    assert_eq!(c.runtime.cores, Cores::List(vec![1]));
    assert_eq!(c.runtime.shard_memory_budget.0, 64 << 20);
    assert_eq!(s.stream, Some(Ident::Name("events".into())));
}

fn error_of(text: &str) -> ConfigError {
    match parse_with(text, &[]) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e,
    }
}

#[test]
fn an_unknown_key_is_named_with_the_file() {
    let e = error_of(&GOOD.replace("window_messages = 500", "window_mesages = 500"));
    let text = e.to_string();
    assert!(text.starts_with("spillway.toml: "), "{text}");
    assert!(text.contains("window_mesages"), "{text}");
    assert_eq!(e.key, "sink[0].window_mesages");
}

#[test]
fn a_wrong_type_is_named() {
    let e = error_of(&GOOD.replace("window_messages = 500", "window_messages = \"lots\""));
    assert_eq!(e.key, "sink[0].window_messages");
    assert!(e.message.contains("invalid type"), "{}", e.message);
}

#[test]
fn impossible_values_are_named() {
    let e = error_of(&GOOD.replace("window_messages = 500", "window_messages = 0"));
    assert_eq!(e.key, "sink[0].window_messages");
    let e = error_of(&GOOD.replace(
        "poll_interval = \"2ms\"",
        "poll_interval = \"2 fortnights\"",
    ));
    assert_eq!(e.key, "sink[0].poll_interval");
    assert!(e.message.contains("unknown duration unit"), "{}", e.message);
    let e = error_of(&GOOD.replace("partitions = [0, 1]", "partitions = [0, 0]"));
    assert!(e.message.contains("listed twice"));
    let e = error_of(&GOOD.replace("partitions = [0, 1]", ""));
    assert_eq!(e.key, "sink[0].partitions");
    let e = error_of(&GOOD.replace("path = \"/tmp/out.jsonl\"", ""));
    assert_eq!(e.key, "sink[0].file.path");
    // Templated strings are parsed when the file is read: the key and the placeholder named.
    let e = error_of(&GOOD.replace("/tmp/out.jsonl", "/tmp/out-{conn}.jsonl"));
    assert_eq!(e.key, "sink[0].file.path");
    assert!(
        e.message.contains("{conn}") && e.message.contains("{shard}"),
        "{}",
        e.message
    );
    let e = error_of(&GOOD.replace("address = \"127.0.0.1:0\"", "address = \"localhost\""));
    assert_eq!(e.key, "metrics.address");
}

#[test]
fn credentials_come_from_the_file_or_the_environment() {
    let without = GOOD.replace("password = \"secret\"", "");
    let e = error_of(&without);
    assert_eq!(e.key, "iggy.password");
    assert!(e.message.contains("SPILLWAY_IGGY_PASSWORD"));
    let c =
        parse_with(&without, &[(ENV_IGGY_PASSWORD, "from-env")]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.iggy.password.as_ref().map(Secret::expose),
        Some("from-env")
    );
    assert!(
        !format!("{c:?}").contains("from-env"),
        "Debug must redact the password"
    );
    assert!(!format!("{c:?}").contains("secret"));
}

#[test]
fn generate_sources_need_no_iggy() {
    let text = r#"
[[sink]]
name = "demo"
type = "stdout"
source = "generate"
[sink.generate]
partitions = 4
rate = 1000
size = 128
messages = 10000
"#;
    let c = parse_with(text, &[]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.sinks[0].generate.as_ref().map(|g| g.partitions), Some(4));
    let e = error_of(&format!("{text}\n").replace(
        "source = \"generate\"",
        "source = \"generate\"\nstream = \"x\"",
    ));
    assert_eq!(e.key, "sink[0].stream");
}

#[test]
fn bad_toml_is_reported() {
    let e = error_of("[[sink]\nname = ");
    assert!(e.message.contains("not valid TOML"), "{}", e.message);
    assert!(e.key.is_empty());
}

const MQTT: &str = r#"
[[sink]]
name = "to-mqtt"
type = "mqtt"
source = "generate"
[sink.mqtt]
address = "127.0.0.1:1883"
topic = "plant/{stream}/{partition}"
"#;

#[test]
fn an_mqtt_sink_loads_with_defaults() {
    let c = parse_with(MQTT, &[]).unwrap_or_else(|e| panic!("{e}"));
    let m = c.sinks[0]
        .mqtt
        .as_ref()
        .unwrap_or_else(|| panic!("no [sink.mqtt]"));
    assert_eq!(m.protocol, MqttVersion::V5);
    assert_eq!(m.qos, 1);
    assert_eq!(m.max_inflight, None);
    assert_eq!(m.window(), 1000);
    assert_eq!(m.connections, 1);
    assert!(m.clean_start);
    assert_eq!(
        m.client_id.template().text(),
        "spillway-{host}-{pid}-{sink}-{shard}-{conn}"
    );
    assert_eq!(m.max_incoming_packet(), 64 * 1024);
    let c = parse_with(
        &MQTT.replace("topic = ", "protocol = \"3.1.1\"\ntopic = "),
        &[],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.sinks[0].mqtt.as_ref().map(|m| m.protocol),
        Some(MqttVersion::V311)
    );
}

#[test]
fn mqtt_mistakes_are_named() {
    let with = |extra: &str| MQTT.replace("topic = ", &format!("{extra}\ntopic = "));
    let cases: [(String, &str, &str); 12] = [
        (with("protocol = \"4\""), "sink[0].mqtt.protocol", "3.1.1"),
        (
            with("max_incoming_packet_size = 64"),
            "sink[0].mqtt.max_incoming_packet_size",
            "128 B to 256 MiB",
        ),
        (
            with("max_incoming_packet_size = \"1GiB\""),
            "sink[0].mqtt.max_incoming_packet_size",
            "128 B to 256 MiB",
        ),
        (with("qos = 3"), "sink[0].mqtt.qos", "not 0, 1 or 2"),
        (
            MQTT.replace("{partition}", "{parttion}"),
            "sink[0].mqtt.topic",
            "{parttion}",
        ),
        (
            MQTT.replace("plant/{stream}/{partition}", "a/#"),
            "sink[0].mqtt.topic",
            "not a topic name",
        ),
        (
            MQTT.replace("topic = \"plant/{stream}/{partition}\"", ""),
            "sink[0].mqtt.topic",
            "missing",
        ),
        (
            with("protocol = \"3.1.1\"\nenvelope = \"properties\""),
            "sink[0].mqtt.envelope",
            "protocol = \"5\"",
        ),
        (
            with("protocol = \"3.1.1\"\ncontent_type_header = \"ct\""),
            "sink[0].mqtt.content_type_header",
            "MQTT 5",
        ),
        (
            with("connections = 2\nclient_id = \"fixed\""),
            "sink[0].mqtt.client_id",
            "{conn}",
        ),
        (
            with("tls_ca = \"/nonexistent.pem\""),
            "sink[0].mqtt.tls_ca",
            "tls is false",
        ),
        (
            with("password = \"p\""),
            "sink[0].mqtt.username",
            "needs a username",
        ),
    ];
    for (text, key, words) in cases {
        let e = error_of(&text);
        assert_eq!(e.key, key, "{e}");
        assert!(e.to_string().contains(words), "{e}");
    }
    let e = error_of(&MQTT.replace(
        "source = \"generate\"",
        "source = \"generate\"\non_error = \"dead_letter\"",
    ));
    assert_eq!(e.key, "sink[0].mqtt.dead_letter_topic");
    let e = error_of(&with("dead_letter_topic = \"dlq\""));
    assert!(e.message.contains("on_error"), "{e}");
    let e = error_of(&with("adress = \"x\""));
    assert_eq!(e.key, "sink[0].mqtt.adress");
}

#[test]
fn the_mqtt_password_comes_from_the_environment_and_is_redacted() {
    let text = MQTT.replace("topic = ", "username = \"u\"\ntopic = ");
    let c = parse_with(&text, &[("SPILLWAY_MQTT_PASSWORD_TO_MQTT", "hunter2")])
        .unwrap_or_else(|e| panic!("{e}"));
    let m = c.sinks[0]
        .mqtt
        .as_ref()
        .unwrap_or_else(|| panic!("no [sink.mqtt]"));
    assert_eq!(m.password.as_ref().map(Secret::expose), Some("hunter2"));
    assert!(!format!("{c:?}").contains("hunter2"));
}

const S3: &str = r#"
[[sink]]
name = "to-s3"
type = "s3"
source = "generate"
[sink.s3]
bucket = "lake"
endpoint = "http://127.0.0.1:9000"
access_key_id = "ak"
secret_access_key = "sk"
"#;

#[test]
fn an_s3_sink_loads_with_defaults_and_names_its_mistakes() {
    let c = parse_with(S3, &[]).unwrap_or_else(|e| panic!("{e}"));
    let s = c.sinks[0]
        .s3
        .as_ref()
        .unwrap_or_else(|| panic!("no [sink.s3]"));
    assert_eq!(s.format, Format::JsonLines);
    assert_eq!(s.compression, Compression::None);
    assert_eq!(s.part_size.0, 8 << 20);
    assert_eq!(s.max_object_size.0, 64 << 20);
    assert!(
        !format!("{c:?}").contains("\"sk\""),
        "the secret key is redacted"
    );
    let with = |extra: &str| S3.replace("access_key_id", &format!("{extra}\naccess_key_id"));
    let dead_letter = |extra: &str| {
        with(extra).replace(
            "source = \"generate\"",
            "source = \"generate\"\non_error = \"dead_letter\"",
        )
    };
    let cases: [(String, &str, &str); 14] = [
        (
            with("format = \"parquet\"\ncompression = \"zstd\""),
            "sink[0].s3.compression",
            "s3.parquet.compression",
        ),
        (dead_letter(""), "sink[0].s3.dead_letter_prefix", "missing"),
        (
            dead_letter("prefix = \"p/\"\ndead_letter_prefix = \"p/\""),
            "sink[0].s3.dead_letter_prefix",
            "differ",
        ),
        (
            with("dead_letter_prefix = \"dead/\""),
            "sink[0].s3.dead_letter_prefix",
            "on_error",
        ),
        (
            with("request_timeout = \"10ms\""),
            "sink[0].s3.request_timeout",
            "100ms",
        ),
        (
            with("key = \"{stream}/{partition}.json\""),
            "sink[0].s3.key",
            "first_offset",
        ),
        (
            with("key = \"{partition}/{first_offset}/{nope}\""),
            "sink[0].s3.key",
            "{nope}",
        ),
        (
            with("key = \"{partition}/{first_offset}}\""),
            "sink[0].s3.key",
            "unmatched",
        ),
        (
            with("time_zone = \"+15:00\""),
            "sink[0].s3.time_zone",
            "+02:00",
        ),
        (
            with("key = \"{partition}-{first_offset}-{last_offset}\""),
            "sink[0].s3.key",
            "part_size",
        ),
        (
            with("time_zone = \"Mars/Olympus\""),
            "sink[0].s3.time_zone",
            "UTC",
        ),
        (
            with("part_size = \"1MiB\""),
            "sink[0].s3.part_size",
            "5 MiB",
        ),
        (
            S3.replace("bucket = \"lake\"", "bucket = \"\""),
            "sink[0].s3.bucket",
            "empty",
        ),
        (
            S3.replace("http://127.0.0.1:9000", "ftp://x"),
            "sink[0].s3.endpoint",
            "scheme",
        ),
    ];
    for (text, key, words) in cases {
        // A build without Parquet refuses the format itself (tested in validate's own tests).
        if !cfg!(feature = "parquet") && text.contains("format = \"parquet\"") {
            continue;
        }
        let e = error_of(&text);
        assert_eq!(e.key, key, "{e}");
        assert!(e.to_string().contains(words), "{e}");
    }
    // A secret without its key id is refused; neither means the AWS credential chain,
    // unless credentials = "static".
    let e = error_of(&S3.replace("access_key_id = \"ak\"", ""));
    assert_eq!(e.key, "sink[0].s3.access_key_id");
    let neither = S3
        .replace("access_key_id = \"ak\"", "")
        .replace("secret_access_key = \"sk\"", "");
    if cfg!(feature = "aws-chain") {
        let c = parse_with(&neither, &[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            c.sinks[0].s3.as_ref().map(|s| s.credentials),
            Some(CredentialSource::Auto)
        );
    } else {
        // A build without the chain refuses it, naming the keys to set.
        assert_eq!(error_of(&neither).key, "sink[0].s3.access_key_id");
    }
    let e = error_of(&neither.replace("[sink.s3]", "[sink.s3]\ncredentials = \"static\""));
    assert_eq!(e.key, "sink[0].s3.access_key_id");
    assert!(e.message.contains("credentials = \"static\""), "{e}");
    let c = parse_with(
        &S3.replace("access_key_id = \"ak\"", ""),
        &[("AWS_ACCESS_KEY_ID", "from-env")],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.sinks[0]
            .s3
            .as_ref()
            .and_then(|s| s.access_key_id.as_deref()),
        Some("from-env")
    );
    // Empty credentials are refused at start-up, not at the first signed request.
    let no_key = S3.replace("access_key_id = \"ak\"", "");
    let e = parse_with(&no_key, &[("AWS_ACCESS_KEY_ID", "")]).err();
    assert!(
        e.as_ref().is_some_and(|e| e.key == "sink[0].s3.access_key_id"
            && e.to_string().contains("empty")),
        "{e:?}"
    );
    let e = error_of(&S3.replace("access_key_id = \"ak\"", "access_key_id = \" \""));
    assert!(e.to_string().contains("empty"), "{e}");
    let e = error_of(&S3.replace("secret_access_key = \"sk\"", "secret_access_key = \"\""));
    assert_eq!(e.key, "sink[0].s3.secret_access_key", "{e}");
    assert!(e.to_string().contains("empty"), "{e}");
}

#[test]
fn env_variables_in_values_are_replaced_and_an_unset_one_names_its_key() {
    let text = GOOD
        .replace(
            "\"127.0.0.1:8090\"",
            "\"${IGGY_HOST:-127.0.0.1}:${IGGY_PORT}\"",
        )
        .replace("password = \"secret\"", "password = \"${IGGY_PW}\"")
        .replace("username = \"iggy\"", "username = \"$${literal}\"");
    let c = parse_with(&text, &[("IGGY_PORT", "9090"), ("IGGY_PW", "hunter2")])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.iggy.address, "127.0.0.1:9090");
    assert_eq!(
        c.iggy.password.as_ref().map(Secret::expose),
        Some("hunter2")
    );
    assert!(
        !format!("{c:?}").contains("hunter2"),
        "a secret from a variable stays hidden"
    );
    assert_eq!(c.iggy.username.as_deref(), Some("${literal}"));

    let Err(e) = parse_with(&text, &[("IGGY_PORT", "9090")]) else {
        panic!("loaded without IGGY_PW");
    };
    assert_eq!(e.key, "iggy.password");
    assert!(e.message.contains("IGGY_PW is not set"), "{e}");
    // Interpolation happens before types are checked: a variable that makes a bad value is
    // reported as that key's problem.
    let text = GOOD.replace("window_messages = 500", "window_messages = \"${N}\"");
    let Err(e) = parse_with(&text, &[("N", "500")]) else {
        panic!("a string window_messages was taken");
    };
    assert_eq!(e.key, "sink[0].window_messages");
}

#[test]
#[cfg(feature = "parquet")]
fn parquet_settings_load_and_their_mistakes_name_the_key() {
    let with = |extra: &str| format!("{S3}{extra}\n");
    let c = parse_with(
        &with(
            "format = \"parquet\"\n[sink.s3.parquet]\ncompression = \"snappy\"\n\
             row_group_size = \"1MiB\"\npayload = \"string\"\n[[sink.s3.parquet.columns]]\n\
             name = \"user\"\npointer = \"/user/id\"\ntype = \"int64\"\nrequired = true",
        ),
        &[],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let s = c.sinks[0]
        .s3
        .as_ref()
        .unwrap_or_else(|| panic!("no [sink.s3]"));
    assert_eq!(s.format, Format::Parquet);
    assert_eq!(s.parquet.compression, super::ParquetCompression::Snappy);
    assert_eq!(s.parquet.row_group_size.0, 1 << 20);
    assert_eq!(s.parquet.row_group_rows, 1 << 20);
    assert_eq!(s.parquet.payload, super::ParquetPayload::String);
    assert_eq!(s.parquet.columns[0].kind, super::ColumnType::Int64);
    assert!(s.parquet.columns[0].required);
    let pq = |table: &str| with(&format!("format = \"parquet\"\n{table}"));
    let column = |name: &str, pointer: &str| {
        pq(&format!(
            "[[sink.s3.parquet.columns]]\nname = \"{name}\"\npointer = \"{pointer}\"\ntype = \"string\""
        ))
    };
    let cases = [
        (
            with("[sink.s3.parquet]\ncompression = \"none\""),
            "sink[0].s3.parquet",
            "only for format = \"parquet\"",
        ),
        (
            pq("[sink.s3.parquet]\ncompression = \"snappy\"\ncompression_level = 3"),
            "sink[0].s3.parquet.compression_level",
            "only for parquet.compression = \"zstd\"",
        ),
        (
            pq("[sink.s3.parquet]\ncompression_level = 30"),
            "sink[0].s3.parquet.compression_level",
            "1 to 22",
        ),
        (
            pq("[sink.s3.parquet]\nrow_group_rows = 0"),
            "sink[0].s3.parquet.row_group_rows",
            "at least 1",
        ),
        (
            column("offset", "/o"),
            "sink[0].s3.parquet.columns[0]",
            "the sink's own columns",
        ),
        (
            column("x", "o"),
            "sink[0].s3.parquet.columns[0]",
            "not a JSON pointer",
        ),
        (
            pq("[[sink.s3.parquet.columns]]\nname = \"x\"\npointer = \"/x\"\ntype = \"decimal\""),
            "sink[0].s3.parquet.columns",
            "decimal",
        ),
        (
            pq("metadata = false\n[sink.s3.parquet]\npayload = \"none\""),
            "sink[0].s3.parquet.payload",
            "no column",
        ),
    ];
    for (text, key, needle) in cases {
        let e = error_of(&text);
        assert!(e.key.starts_with(key), "{key}: {e}");
        assert!(e.message.contains(needle), "{needle:?} not in: {e}");
    }
}

#[test]
#[cfg(feature = "iceberg")]
fn iceberg_settings_load_and_their_mistakes_name_the_key() {
    const COLS: &str = "[[sink.s3.parquet.columns]]\nname = \"region\"\npointer = \"/r\"\ntype = \"string\"\n[[sink.s3.parquet.columns]]\nname = \"ts\"\npointer = \"/ts\"\ntype = \"timestamp\"\n";
    let with = |extra: &str| format!("{S3}{extra}\n");
    let table = "[sink.s3.iceberg]\ncatalog = \"sql\"\nuri = \"sqlite:///tmp/c.db?mode=rwc\"\n\
                 namespace = \"lake.raw\"\ntable = \"events\"";
    let c = parse_with(&with(&format!("format = \"parquet\"\n{table}")), &[])
        .unwrap_or_else(|e| panic!("{e}"));
    let s = c.sinks[0]
        .s3
        .as_ref()
        .unwrap_or_else(|| panic!("no [sink.s3]"));
    let t = s
        .iceberg
        .as_ref()
        .unwrap_or_else(|| panic!("no [sink.s3.iceberg]"));
    assert_eq!(t.catalog, super::CatalogKind::Sql);
    assert_eq!(t.catalog_name, "spillway");
    assert_eq!(t.commit_interval.0, std::time::Duration::from_secs(10));
    assert!(
        s.format_options().parquet.table,
        "the data files carry field ids"
    );
    // A REST catalog with its token from the environment, never printed.
    let rest = table
        .replace("catalog = \"sql\"", "catalog = \"rest\"")
        .replace(
            "sqlite:///tmp/c.db?mode=rwc",
            "https://catalog.internal:8181/api",
        );
    let c = parse_with(
        &with(&format!(
            "format = \"parquet\"\n{rest}\ntoken = \"${{ICEBERG_TOKEN}}\""
        )),
        &[("ICEBERG_TOKEN", "tok-3c1e7")],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let t = c.sinks[0]
        .s3
        .as_ref()
        .and_then(|s| s.iceberg.as_ref())
        .unwrap_or_else(|| panic!("no [sink.s3.iceberg]"));
    assert_eq!(t.catalog, super::CatalogKind::Rest);
    assert_eq!(
        t.token.as_ref().map(super::Secret::expose),
        Some("tok-3c1e7")
    );
    assert!(
        !format!("{c:?}").contains("tok-3c1e7"),
        "the token in Debug output"
    );
    let cases = [
        (with(table), "sink[0].s3.format", "must be \"parquet\""),
        (
            with(&format!(
                "format = \"parquet\"\n{COLS}{table}\npartition_by = [\"region\"]"
            )),
            "sink[0].s3.iceberg.partition_by[0]",
            "required = true",
        ),
        (
            with(&format!(
                "format = \"parquet\"\nkey = \"{{partition}}-{{first_offset}}.{{ext}}\"\n{}{table}\npartition_by = [\"region\"]",
                COLS.replace("type = \"string\"", "type = \"string\"\nrequired = true")
            )),
            "sink[0].s3.key",
            "{json./r}",
        ),
        (
            with(&format!(
                "format = \"parquet\"\n{COLS}{table}\npartition_by = [\"hour(ts)\"]"
            )),
            "sink[0].s3.time_source",
            "\"json:/ts\"",
        ),
        (
            with(&format!(
                "format = \"parquet\"\ntime_source = \"json:/ts\"\nrecord_interval = \"7m\"\n{COLS}{table}\npartition_by = [\"hour(ts)\"]"
            )),
            "sink[0].s3.record_interval",
            "divide the hour",
        ),
        (
            with(&format!(
                "format = \"parquet\"\n{COLS}{table}\npartition_by = [\"day(region)\"]"
            )),
            "sink[0].s3.iceberg.partition_by[0]",
            "timestamp column",
        ),
        (
            with(&format!("format = \"parquet\"\n{table}\ntoken = \"t\"")),
            "sink[0].s3.iceberg.token",
            "rest",
        ),
        (
            with(&format!(
                "format = \"parquet\"\n{}",
                table
                    .replace("catalog = \"sql\"", "catalog = \"rest\"")
                    .replace("sqlite:///tmp/c.db?mode=rwc", "sqlite:///x")
            )),
            "sink[0].s3.iceberg.uri",
            "http[s]://",
        ),
        (
            with(&format!(
                "format = \"parquet\"\n{}\ntoken = \"a\"\ncredential = \"b:c\"",
                table
                    .replace("catalog = \"sql\"", "catalog = \"rest\"")
                    .replace("sqlite:///tmp/c.db?mode=rwc", "https://catalog:8181")
            )),
            "sink[0].s3.iceberg.credential",
            "not both",
        ),
        (
            with(&format!(
                "format = \"parquet\"\ntls_ca = \"{}/Cargo.toml\"\n{table}",
                env!("CARGO_MANIFEST_DIR")
            )),
            "sink[0].s3.tls_ca",
            "OpenDAL",
        ),
        (
            with(&format!(
                "format = \"parquet\"\n{COLS}{table}\npartition_by = [\"nope\"]"
            )),
            "sink[0].s3.iceberg.partition_by[0]",
            "no column",
        ),
        (
            with(&format!(
                "format = \"parquet\"\n{COLS}{table}\npartition_by = [\"month(ts)\"]"
            )),
            "sink[0].s3.iceberg.partition_by",
            "identity, day or hour",
        ),
        (
            with(&format!(
                "format = \"parquet\"\n{}",
                table.replace("sqlite:///tmp/c.db?mode=rwc", "postgres://db")
            )),
            "sink[0].s3.iceberg.uri",
            "SQLite",
        ),
        (
            with(&format!(
                "format = \"parquet\"\n{}",
                table.replace("lake.raw", "lake..raw")
            )),
            "sink[0].s3.iceberg.namespace",
            "empty level",
        ),
        (
            with(&format!(
                "format = \"parquet\"\n{table}\nwarehouse = \"s3://other/wh\""
            )),
            "sink[0].s3.iceberg.warehouse",
            "s3://lake/",
        ),
    ];
    for (text, key, needle) in cases {
        let e = error_of(&text);
        assert!(e.key.starts_with(key), "{key}: {e}");
        assert!(e.message.contains(needle), "{needle:?} not in: {e}");
    }
}

#[test]
// Without Parquet, `format = "parquet"` is refused first.
#[cfg(all(feature = "parquet", not(feature = "iceberg")))]
fn a_build_without_iceberg_refuses_a_table_naming_the_feature() {
    let text = format!(
        "{S3}format = \"parquet\"\n[sink.s3.iceberg]\ncatalog = \"sql\"\n\
         uri = \"sqlite:///tmp/c.db\"\nnamespace = \"n\"\ntable = \"t\"\n"
    );
    let e = error_of(&text);
    assert_eq!(e.key, "sink[0].s3.iceberg");
    assert!(e.message.contains("--features iceberg"), "{e}");
}

#[test]
fn object_options_load_and_their_mistakes_name_the_key() {
    let with = |extra: &str| format!("{S3}{extra}\n");
    let c = parse_with(
        &with(
            "acl = \"bucket-owner-full-control\"\n[sink.s3.user_metadata]\nteam = \"a\"\n\
             src = \"{stream}-{header.x}\"\n[sink.s3.tags]\nday = \"{date}\"",
        ),
        &[],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let s = c.sinks[0]
        .s3
        .as_ref()
        .unwrap_or_else(|| panic!("no [sink.s3]"));
    assert_eq!(s.acl, Some(AclKind::BucketOwnerFullControl));
    assert_eq!(s.user_metadata.len(), 2);
    assert_eq!(s.tags.len(), 1);
    let cases = [
        (with("acl = \"world\""), "sink[0].s3.acl", "world"),
        (
            with("[sink.s3.user_metadata]\nstream = \"x\""),
            "sink[0].s3.user_metadata.stream",
            "sets \"stream\" itself",
        ),
        (
            with("[sink.s3.user_metadata]\n\"a b\" = \"x\""),
            "sink[0].s3.user_metadata.a b",
            "HTTP token",
        ),
        (
            with("[sink.s3.tags]\nend = \"{last_offset}\""),
            "sink[0].s3.tags.end",
            "last_offset",
        ),
        (
            with("sse_customer_key_env = \"K\""),
            "sink[0].s3.sse_customer_key_env",
            "only for sse = \"customer\"",
        ),
        (
            with(&format!(
                "[sink.s3.tags]\n{}",
                (0..11)
                    .map(|i| format!("t{i} = \"v\"\n"))
                    .collect::<String>()
            )),
            "sink[0].s3.tags",
            "at most 10",
        ),
    ];
    for (text, key, needle) in cases {
        let e = error_of(&text);
        assert_eq!(e.key, key, "{e}");
        assert!(e.message.contains(needle), "{needle:?} not in: {e}");
    }
}

#[test]
fn the_sse_c_key_comes_from_a_file_or_a_variable_and_is_never_shown() {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let raw = dir.path().join("raw.key");
    let text = dir.path().join("b64.key");
    let short = dir.path().join("short.key");
    let write = |p: &Path, b: &[u8]| std::fs::write(p, b).unwrap_or_else(|e| panic!("{e}"));
    write(&raw, &[9u8; 32]);
    write(&text, format!("{}\n", b64.encode([5u8; 32])).as_bytes());
    write(&short, b"not a key");
    let load = |extra: String, env: &[(&str, &str)]| {
        let c = parse_with(&format!("{S3}sse = \"customer\"\n{extra}\n"), &[])
            .unwrap_or_else(|e| panic!("{e}"));
        let s = c.sinks[0].s3.clone().unwrap_or_else(|| panic!("no s3"));
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        s.customer_key(&move |n| env.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone()))
    };
    let file = |p: &Path| format!("sse_customer_key_file = {:?}", p.display().to_string());
    assert_eq!(load(file(&raw), &[]), Ok(Some([9u8; 32])));
    assert_eq!(load(file(&text), &[]), Ok(Some([5u8; 32])));
    let Err((key, msg)) = load(file(&short), &[]) else {
        panic!("a 9-byte key was taken");
    };
    assert_eq!(key, "sse_customer_key_file");
    assert!(
        msg.contains("holds 9 bytes") && !msg.contains("not a key"),
        "{msg}"
    );
    let var = "sse_customer_key_env = \"MY_KEY\"".to_owned();
    let good = b64.encode([3u8; 32]);
    assert_eq!(load(var.clone(), &[("MY_KEY", &good)]), Ok(Some([3u8; 32])));
    let Err((key, msg)) = load(var.clone(), &[("MY_KEY", "c2hvcnQ=")]) else {
        panic!("a short key was taken");
    };
    assert_eq!(key, "sse_customer_key_env");
    assert!(msg.contains("MY_KEY") && !msg.contains("c2hvcnQ="), "{msg}");
    let Err((key, _)) = load(String::new(), &[]) else {
        panic!("sse = customer without a key was taken");
    };
    assert_eq!(key, "sse");
}

//! S3 credentials from the AWS credential chain (`aws-config`), with everything on loopback:
//! the real Iggy server, s3s-fs (which checks every signature) behind the harness's recording
//! proxy, and a FAKE IMDSv2 (`spillway_tests::imds`; no real instance metadata service exists
//! here, and none may be reached: `AWS_EC2_METADATA_SERVICE_ENDPOINT` points at the fake, the
//! shared config and credentials files at paths that do not exist).
//!
//! The fake's credentials live 4 s, each set with a new session token, while the engine uploads
//! objects for about 12 s: the chain must hand new credentials to the shard before the old ones
//! expire, mid-run, without a failed request. The same fake also plays the ECS container
//! credentials endpoint, run the same way.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{Engine, engine_sections, s3_sink, stop_clean, topic, wait_stored};
use spillway_tests::imds::FakeImds;
use spillway_tests::{FaultPlan, FaultProxy, IggyServer, S3Server, TestMessage};

const TTL: Duration = Duration::from_secs(4);

/// An engine config with one S3 sink `name` and no keys in it (`extra` in `[sink.s3]`),
/// reaching the store through `via` (a proxy's host:port) when given.
fn keyless(
    iggy: &IggyServer,
    t: &common::Topic,
    s3: &S3Server,
    name: &str,
    extra: &str,
    via: Option<&str>,
) -> String {
    let mut sink = s3_sink(name, t, s3, extra);
    if let Some(via) = via {
        sink = sink.replace(&s3.endpoint(), &format!("http://{via}"));
    }
    let sink: String = sink
        .lines()
        .filter(|l| !l.starts_with("access_key_id") && !l.starts_with("secret_access_key"))
        .map(|l| format!("{l}\n"))
        .collect();
    engine_sections(iggy) + &sink
}

/// The shared config and credentials files the chain reads: a path that does not exist.
fn no_files(dir: &std::path::Path) -> String {
    dir.join("no-such-file").to_str().unwrap().to_owned()
}

/// Where the chain finds the fake's credentials.
#[derive(Clone, Copy, Debug)]
enum Source {
    /// EC2 instance metadata (IMDSv2).
    Imds,
    /// The ECS container endpoint (`AWS_CONTAINER_CREDENTIALS_FULL_URI` with an
    /// authorization token); IMDS switched off.
    Ecs,
}

#[test]
fn credentials_from_imds_rotate_mid_run_and_no_request_uses_expired_keys() {
    rotate_mid_run(Source::Imds);
}

#[test]
fn credentials_from_the_ecs_endpoint_rotate_mid_run_and_no_request_uses_expired_keys() {
    rotate_mid_run(Source::Ecs);
}

fn rotate_mid_run(source: Source) {
    let s3 = S3Server::start().unwrap();
    let proxy = FaultProxy::start(s3.addr(), FaultPlan::passthrough()).unwrap();
    let imds = FakeImds::start(s3.access_key(), s3.secret_key(), TTL).unwrap();
    let iggy = IggyServer::start().unwrap();
    let mut admin = iggy.admin().unwrap();
    let t = topic(&iggy, "s3creds", 1);
    let dir = tempfile::tempdir().unwrap();

    // No keys in the config: the chain (environment, profile files and web identity find
    // nothing; the ECS endpoint or IMDS answers).
    let cfg = keyless(
        &iggy,
        &t,
        &s3,
        "creds",
        "credentials = \"chain\"\nidle_flush = \"200ms\"",
        Some(&proxy.host_port()),
    );
    let missing = no_files(dir.path());
    let missing = missing.as_str();
    let endpoint = imds.endpoint();
    let ecs_uri = format!("{endpoint}{}", spillway_tests::imds::ECS_PATH);
    let mut env = vec![
        ("AWS_CONFIG_FILE", missing),
        ("AWS_SHARED_CREDENTIALS_FILE", missing),
        ("SPILLWAY_LOG", "info,spillway::sink::s3=debug"),
    ];
    match source {
        Source::Imds => env.push(("AWS_EC2_METADATA_SERVICE_ENDPOINT", endpoint.as_str())),
        Source::Ecs => env.extend([
            ("AWS_CONTAINER_CREDENTIALS_FULL_URI", ecs_uri.as_str()),
            (
                "AWS_CONTAINER_AUTHORIZATION_TOKEN",
                spillway_tests::imds::ECS_AUTH,
            ),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ]),
    }
    let mut engine = Engine::start_with_env(dir.path(), "creds", &cfg, &env);
    eprintln!("credentials from {source:?}");

    // About 12 s of objects: a batch every 300 ms, each closed by idle_flush.
    let started = Instant::now();
    let mut next = 0u64;
    while started.elapsed() < TTL * 3 {
        let batch: Vec<TestMessage> = (next..next + 20)
            .map(|n| TestMessage::new(u128::from(n) + 1, format!("{{\"n\":{n}}}")))
            .collect();
        common::send_all(&mut admin, &t, 0, &batch);
        next += 20;
        std::thread::sleep(Duration::from_millis(300));
        assert!(engine.running(), "{}", engine.log());
    }
    wait_stored(
        &mut engine,
        &mut admin,
        &t,
        "creds",
        next - 1,
        Duration::from_secs(60),
    );
    stop_clean(&mut engine, Duration::from_secs(30));
    let log = engine.log();

    let served = imds.served();
    assert!(
        served.len() >= 3,
        "credentials rotated mid-run: {} sets served\n{log}",
        served.len()
    );
    assert_eq!(
        imds.refused(),
        0,
        "every IMDS request carried the IMDSv2 token"
    );
    // Every request the store got was signed with a session token the fake served, and sent
    // before that token expired.
    let requests = proxy.requests();
    assert!(requests.len() >= 20, "{} requests", requests.len());
    let mut used = BTreeSet::new();
    for r in &requests {
        let token = r
            .headers
            .iter()
            .find(|(k, _)| k == "x-amz-security-token")
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("{} {}: no session token", r.method, r.target));
        let set = served
            .iter()
            .find(|s| s.token == token)
            .unwrap_or_else(|| panic!("{token} was never served"));
        assert!(
            r.received < set.expires,
            "{} {} was signed with {token}, which had expired {:?} before",
            r.method,
            r.target,
            r.received.duration_since(set.expires).unwrap_or_default()
        );
        used.insert(token);
    }
    assert!(used.len() >= 3, "the requests used {used:?}");
    // No failed request: no retry, no failed upload.
    assert!(!log.contains("S3 request failed"), "{log}");
    assert!(!log.contains("S3 upload failed"), "{log}");
    assert!(
        log.contains("AWS credentials from the credential chain"),
        "{log}"
    );
    assert!(!log.contains(s3.secret_key()), "the secret is never logged");
}

/// With `credentials = "chain"` and nothing to find (IMDS switched off by
/// `AWS_EC2_METADATA_DISABLED`, no files, no variables), the sink does not start: the error
/// says why, and nothing is polled or committed.
#[test]
fn a_chain_that_finds_nothing_stops_the_sink_at_start_saying_why() {
    let s3 = S3Server::start().unwrap();
    let iggy = IggyServer::start().unwrap();
    let t = topic(&iggy, "s3nocreds", 1);
    let dir = tempfile::tempdir().unwrap();
    let cfg = keyless(
        &iggy,
        &t,
        &s3,
        "nocreds",
        "credentials = \"chain\"\nrequest_timeout = \"2s\"",
        None,
    );
    let missing = no_files(dir.path());
    let missing = missing.as_str();
    let env = [
        ("AWS_EC2_METADATA_DISABLED", "true"),
        ("AWS_CONFIG_FILE", missing),
        ("AWS_SHARED_CREDENTIALS_FILE", missing),
    ];
    let mut engine = Engine::start_with_env(dir.path(), "nocreds", &cfg, &env);
    let code = common::wait_exit_code(&mut engine, Duration::from_secs(60));
    let log = engine.log();
    assert_eq!(code, Some(1), "{log}");
    assert!(
        log.contains("no credentials within s3.request_timeout"),
        "{log}"
    );
    assert!(log.contains("credential chain"), "{log}");
}

/// Web identity (IRSA on EKS): the chain reads the token file and the role from
/// `AWS_WEB_IDENTITY_TOKEN_FILE` / `AWS_ROLE_ARN` and calls AssumeRoleWithWebIdentity on STS,
/// here a REAL moto server (PyPI `moto[server]`, which `scripts/setup.sh` installs) on a
/// loopback port named by `AWS_ENDPOINT_URL_STS`. moto issues keys of its own, which s3s-fs
/// (which knows one key pair) refuses: the run stops at the start-up probe with
/// `InvalidAccessKeyId`, and the probe's request shows it was signed with the key and session
/// token STS issued, not with anything else.
#[test]
fn web_identity_credentials_come_from_sts() {
    use spillway_tests::ServerProcess;
    let s3 = S3Server::start().unwrap();
    let proxy = FaultProxy::start(s3.addr(), FaultPlan::passthrough()).unwrap();
    let iggy = IggyServer::start().unwrap();
    let t = topic(&iggy, "s3irsa", 1);
    let dir = tempfile::tempdir().unwrap();
    let port = spillway_tests::ports::free_loopback_port().unwrap();
    let sts_addr = std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, port));
    let mut sts = ServerProcess::new(
        "moto_server",
        "moto_server",
        [
            "-H".to_owned(),
            "127.0.0.1".to_owned(),
            "-p".to_owned(),
            port.to_string(),
        ],
        dir.path().join("moto.log"),
    );
    sts.spawn().unwrap();
    sts.wait_until_accepting(sts_addr, Duration::from_secs(30))
        .unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(
        &token_file,
        "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzcGlsbHdheSJ9.c2ln",
    )
    .unwrap();

    let cfg = keyless(
        &iggy,
        &t,
        &s3,
        "irsa",
        "request_timeout = \"10s\"",
        Some(&proxy.host_port()),
    );
    let missing = no_files(dir.path());
    let missing = missing.as_str();
    let sts_url = format!("http://{sts_addr}");
    let env = [
        ("AWS_WEB_IDENTITY_TOKEN_FILE", token_file.to_str().unwrap()),
        ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/spillway"),
        ("AWS_ROLE_SESSION_NAME", "spillway-test"),
        ("AWS_ENDPOINT_URL_STS", sts_url.as_str()),
        ("AWS_EC2_METADATA_DISABLED", "true"),
        ("AWS_CONFIG_FILE", missing),
        ("AWS_SHARED_CREDENTIALS_FILE", missing),
    ];
    let mut engine = Engine::start_with_env(dir.path(), "irsa", &cfg, &env);
    let code = common::wait_exit_code(&mut engine, Duration::from_secs(60));
    let log = engine.log();
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains("InvalidAccessKeyId"), "{log}");
    let moto_log = sts.log();
    assert!(
        moto_log.contains("POST / ") || moto_log.contains("POST /?"),
        "STS was asked: {moto_log}"
    );
    let head = proxy
        .requests()
        .into_iter()
        .find(|r| r.method == "HEAD")
        .unwrap_or_else(|| panic!("no HeadBucket reached the store\n{log}"));
    let header = |name: &str| {
        head.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let authorization = header("authorization");
    let key = authorization
        .split("Credential=")
        .nth(1)
        .and_then(|c| c.split('/').next())
        .unwrap_or_default()
        .to_owned();
    assert!(
        !key.is_empty() && key != s3.access_key(),
        "signed with a key from STS, not the store's: {authorization}"
    );
    assert!(
        log.contains(&format!("access_key_id={key}"))
            || log.contains(&format!("access_key_id=\"{key}\"")),
        "the log names the key the chain found: {key}\n{log}"
    );
    assert!(
        !header("x-amz-security-token").is_empty(),
        "a session token from STS"
    );
}

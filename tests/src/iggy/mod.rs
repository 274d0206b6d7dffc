//! Iggy for tests: the real server started by the harness ([`IggyProcess`]), a stand-in for
//! what the real server cannot be made to do, [`IggyServer`] to pick between them, and a small
//! synchronous admin client.
//!
//! [`IggyStandIn`] is a STAND-IN for the Iggy server, not the real server. It is built on the
//! real wire-format crate (`iggy_binary_protocol =0.11.0`, the format of servers 0.9.0 and
//! 0.9.0-edge.5) and imitates the server's observable behaviour, as read from the server source
//! (`core/server/src/dispatch.rs`, `responses.rs`, `core/metadata/src/stm/consumer_group.rs`,
//! `core/partitions`): VSR 256-byte framing, login (password or personal access token),
//! streams, topics, 0-based partitions, send, poll (offset / timestamp / first / last / next,
//! auto-commit, partial batches re-headed), consumer offsets, consumer groups with cooperative
//! rebalancing, the resync sentinel, heartbeat eviction, and the error codes and empty bodies
//! the server answers with. Tests use the real server by default (see [`IggyServer::start`]);
//! the stand-in is for tests that need what the real server cannot be made to do (corrupted
//! replies, hooks into its state), and for machines without the server binary.
//!
//! With [`IggyStandInOpts::tls`] the stand-in serves TLS only, on its one listener, with a
//! certificate from a CA made for it ([`IggyStandIn::ca_pem`]); setup goes through
//! [`IggyAdmin::connect_tls`] (which [`IggyStandIn::admin`] uses), so there is no plain side
//! door and the admin exercises the same TLS path as the client under test.
//!
//! Known differences from the real server, all deliberate:
//! - A `SendMessages` whose batch fails admission (bad checksum, count mismatch, trailing
//!   bytes) is answered with a status (3, 4027 or 4039); the server drops it without an answer.
//! - A join/leave body that does not decode is answered with status 3; the server drops it.
//! - Reads the server serves but the stand-in does not (stats, users, clients, consumer group
//!   details...) and metadata changes it does not implement (users, tokens, updates, purges,
//!   partitions) are answered with status 5 `FeatureUnavailable`.
//! - Nothing is persisted, there is no retention, no replication (so no transient errors) and
//!   no permissions (every user may do everything). Request-id deduplication of metadata
//!   requests is there (replay of the last 5 replies, silence for a reused id with another
//!   body, `RequestAlreadyApplied` for an older id).
//! - The Eviction `StaleClient` frame names the connection's logged-in client id (the server
//!   puts its internal transport id there).
//! - A drained cooperative handover completes as soon as the commit is served (the server's
//!   reconciler does it within about 10 ms); one that times out completes within 10 ms of the
//!   timeout (the server checks the heartbeat every interval, so 1.2 to 2.2 intervals).
//! - Consumer group polls check membership by the request's client id, joins and offset
//!   commits by the connection's logged-in client id, as the server does.

mod admin;
mod cluster;
pub mod codes;
mod groups;
mod handlers;
mod real;
mod server;
mod state;
mod wire;

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

pub use admin::{
    IggyAdmin, PolledTestBatch, PolledTestMessage, TestConsumer, TestMessage, TestPolling,
};
pub use cluster::{IggyCluster, LEADER_TIMEOUT, leader_admin};
pub use real::{IggyProcess, IggyProcessOpts, server_binary};

use crate::HarnessError;
use crate::certs::TestCa;
use crate::tls::{DEFAULT_SERVER_NAME, server_config};
use server::Server;
use state::{State, User};

/// Username and password of the stand-in's default user.
pub const DEFAULT_CREDENTIALS: (&str, &str) = ("iggy", "iggy");

/// Options of an [`IggyStandIn`] (a builder: each method returns the changed options).
#[derive(Clone)]
pub struct IggyStandInOpts {
    users: Vec<(String, String)>,
    tokens: Vec<String>,
    eviction_timeout: Duration,
    revocation_timeout: Duration,
    tls: bool,
    protocol_window: Option<(u32, u32)>,
    legacy_framing: bool,
    partition_dedup: bool,
}

impl fmt::Debug for IggyStandInOpts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IggyStandInOpts")
            .field(
                "users",
                &self
                    .users
                    .iter()
                    .map(|(u, _)| u.as_str())
                    .collect::<Vec<_>>(),
            )
            .field("tokens", &self.tokens.len())
            .field("eviction_timeout", &self.eviction_timeout)
            .field("revocation_timeout", &self.revocation_timeout)
            .field("tls", &self.tls)
            .field("protocol_window", &self.protocol_window)
            .field("legacy_framing", &self.legacy_framing)
            .field("partition_dedup", &self.partition_dedup)
            .finish()
    }
}

impl Default for IggyStandInOpts {
    fn default() -> Self {
        IggyStandInOpts {
            users: Vec::new(),
            tokens: Vec::new(),
            eviction_timeout: Duration::from_secs(36),
            revocation_timeout: Duration::from_secs(30),
            tls: false,
            protocol_window: None,
            legacy_framing: false,
            partition_dedup: false,
        }
    }
}

impl IggyStandInOpts {
    /// Default options: user `iggy`/`iggy`, eviction after 36 s of silence (1.2 x the server's
    /// 30 s heartbeat interval), handovers forced after 30 s (the server's
    /// `rebalancing_timeout`).
    pub fn new() -> Self {
        IggyStandInOpts::default()
    }

    /// Adds a user. Once any user is added, the default `iggy`/`iggy` user is not created;
    /// the first user added is the one [`IggyStandIn::username`] reports.
    pub fn user(mut self, name: &str, password: &str) -> Self {
        self.users.push((name.to_owned(), password.to_owned()));
        self
    }

    /// Adds a personal access token that logs in as the first user.
    pub fn token(mut self, token: &str) -> Self {
        self.tokens.push(token.to_owned());
        self
    }

    /// How long a logged-in consumer group member may send nothing before it is evicted: its
    /// session ends, it leaves its groups and it gets an Eviction `StaleClient` frame. As on
    /// the server, connections that are in no group are never evicted.
    pub fn eviction_timeout(mut self, timeout: Duration) -> Self {
        self.eviction_timeout = timeout;
        self
    }

    /// How long a cooperative handover waits for the source member to commit what it polled
    /// before the partition moves anyway.
    pub fn revocation_timeout(mut self, timeout: Duration) -> Self {
        self.revocation_timeout = timeout;
        self
    }

    /// Serves TLS only (no plain listener), with a server certificate for
    /// [`DEFAULT_SERVER_NAME`] and `127.0.0.1` issued by a CA made for this stand-in (see
    /// [`IggyStandIn::ca_pem`]). [`IggyStandIn::admin`] then connects over TLS too.
    pub fn tls(mut self) -> Self {
        self.tls = true;
        self
    }

    /// Deduplicates partition writes by request number as the released 0.9.0 server does
    /// (apache/iggy PR 3959): a send or offset store whose request number is not above the
    /// client's last one is answered with an empty success and not applied. The real
    /// 0.9.0-edge.5 server in `../shared/iggy/` does not do this, and no 0.9.0 build can be made
    /// here.
    pub fn partition_dedup(mut self) -> Self {
        self.partition_dedup = true;
        self
    }

    /// Plays an Iggy server older than 0.9, which has the old framing (a request is a 4-byte
    /// length, a 4-byte code and the payload; a reply an 8-byte status and length head): it
    /// reads the 256-byte header as 8-byte requests of its own and answers each with the error
    /// head `InvalidCommand` (3), length 0, as seen from an 0.8.x server. The real 0.9.0-edge.5
    /// server cannot be made to speak the old framing.
    pub fn legacy_framing(mut self) -> Self {
        self.legacy_framing = true;
        self
    }

    /// Accepts only logins whose protocol version (packed `major << 20 | minor << 10 | patch`)
    /// is within `min..=max`, and evicts the others with `IncompatibleProtocol` carrying that
    /// window: an Iggy server of another version, which the real 0.9.0-edge.5 server cannot
    /// be made to be.
    pub fn protocol_window(mut self, min: u32, max: u32) -> Self {
        self.protocol_window = Some((min, max));
        self
    }
}

/// A STAND-IN for the Iggy server (not the real server), built on the real wire-format crate,
/// listening on an ephemeral loopback port. Dropping it closes the listener and every
/// connection and joins its threads. See the [module docs](self) for what it does and how it
/// differs from the real server.
pub struct IggyStandIn {
    server: Server,
    username: String,
    password: String,
    /// The PEM certificate of the CA that issued the server certificate, when serving TLS.
    ca_pem: Option<String>,
}

// By hand: the password stays out of `Debug`.
impl std::fmt::Debug for IggyStandIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IggyStandIn")
            .field("server", &self.server)
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .field("tls", &self.ca_pem.is_some())
            .finish()
    }
}

impl IggyStandIn {
    /// Starts a stand-in with the default user `iggy`/`iggy`.
    pub fn start() -> Result<Self, HarnessError> {
        Self::start_with(IggyStandInOpts::default())
    }

    /// Starts a stand-in with these options.
    pub fn start_with(opts: IggyStandInOpts) -> Result<Self, HarnessError> {
        let mut credentials = opts.users.clone();
        if credentials.is_empty() {
            credentials.push((
                DEFAULT_CREDENTIALS.0.to_owned(),
                DEFAULT_CREDENTIALS.1.to_owned(),
            ));
        }
        let users = credentials
            .iter()
            .zip(0u32..)
            .map(|((username, password), id)| User {
                id,
                username: username.clone(),
                password: password.clone(),
                tokens: if id == 0 {
                    opts.tokens.clone()
                } else {
                    Vec::new()
                },
            })
            .collect();
        let (username, password) = credentials.swap_remove(0);
        let mut state = State::new(users, opts.revocation_timeout);
        state.protocol_window = opts.protocol_window;
        if opts.partition_dedup {
            state.partition_dedup = Some(std::collections::HashMap::new());
        }
        let (ca_pem, tls) = if opts.tls {
            let ca = TestCa::new("spillway Iggy stand-in CA")?;
            let cert = ca.issue_server_cert(&[DEFAULT_SERVER_NAME, "127.0.0.1"])?;
            let config = server_config(&cert)?;
            (Some(ca.cert_pem().to_owned()), Some(config))
        } else {
            (None, None)
        };
        state.legacy_framing = opts.legacy_framing;
        let server = Server::start(state, opts.eviction_timeout, tls)?;
        Ok(IggyStandIn {
            server,
            username,
            password,
            ca_pem,
        })
    }

    /// The address it listens on (`127.0.0.1:<ephemeral>`); TLS only with
    /// [`IggyStandInOpts::tls`].
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// The PEM certificate of the CA that issued the server certificate, when it serves TLS
    /// (clients trust it and verify the name [`DEFAULT_SERVER_NAME`]).
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// The first user's name.
    pub fn username(&self) -> &str {
        &self.username
    }

    /// The first user's password.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// Closes every client connection abruptly (a network loss). Their sessions end and they
    /// leave their consumer groups as on a real disconnect; returns once that is done.
    pub fn kill_connections(&self) {
        self.server.kill_connections();
    }

    /// How many client connections are open.
    pub fn connection_count(&self) -> usize {
        self.server.connection_count()
    }

    /// How many StoreConsumerOffset requests were served so far (refused ones included).
    pub fn stored_offset_requests(&self) -> u64 {
        self.server.stored_offset_requests()
    }

    /// How many PollMessages requests were served so far (refused ones included).
    pub fn poll_requests(&self) -> u64 {
        self.server.poll_requests()
    }

    /// How many logins succeeded so far (each new connection of a client logs in once).
    pub fn logins(&self) -> u64 {
        self.server.logins()
    }

    /// Answers the next `count` new metadata changes (create, delete, join, leave ...) with
    /// result 57 `TransientNotCommitted`, applying nothing, as the real server does at times
    /// under concurrent changes (on demand here, which the real server cannot be made to do).
    pub fn refuse_transiently(&self, count: u32) {
        self.server.refuse_transiently(count);
    }

    /// From now on (`on`), answers every offset store with status 58 `TransientNotAccepted`,
    /// as a node that admits no requests does (the real server cannot be made to do this).
    pub fn refuse_stores(&self, on: bool) {
        self.server.refuse_stores(on);
    }

    /// How many of the refusals asked for by [`IggyStandIn::refuse_transiently`] are left.
    pub fn transient_refusals_left(&self) -> u32 {
        self.server.transient_refusals_left()
    }

    /// A logged-in admin client for the first user (over TLS when the stand-in serves TLS).
    pub fn admin(&self) -> Result<IggyAdmin, HarnessError> {
        match self.ca_pem() {
            None => IggyAdmin::connect(self.addr(), &self.username, &self.password),
            Some(ca_pem) => IggyAdmin::connect_tls(
                self.addr(),
                ca_pem,
                DEFAULT_SERVER_NAME,
                &self.username,
                &self.password,
            ),
        }
    }
}

/// Where a test's Iggy lives. [`IggyServer::start`] picks, in this order:
///
/// 1. `SPILLWAY_TEST_IGGY=host:port`: a real server someone else runs ([`IggyServer::External`];
///    credentials from `SPILLWAY_TEST_IGGY_USERNAME` / `SPILLWAY_TEST_IGGY_PASSWORD`, default
///    `iggy`/`iggy`);
/// 2. the real server binary (`SPILLWAY_IGGY_SERVER_BIN`, `../shared/iggy/iggy-server`,
///    `iggy-server` on `PATH`), started for this test ([`IggyServer::Real`]);
/// 3. otherwise the stand-in, with a one-line notice per process on standard error; with
///    `SPILLWAY_REQUIRE_REAL_IGGY=1` (CI sets it) a missing server is an error instead.
pub enum IggyServer {
    /// The real server, started by the harness for this test.
    Real(IggyProcess),
    /// The stand-in (not the real server), started for this test.
    StandIn(IggyStandIn),
    /// A real server someone else runs.
    External {
        /// Its address.
        addr: SocketAddr,
        /// The user to log in as.
        username: String,
        /// That user's password.
        password: String,
    },
}

// By hand: the password stays out of `Debug`.
impl std::fmt::Debug for IggyServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IggyServer::Real(p) => f.debug_tuple("Real").field(p).finish(),
            IggyServer::StandIn(s) => f.debug_tuple("StandIn").field(s).finish(),
            IggyServer::External { addr, username, .. } => f
                .debug_struct("External")
                .field("addr", addr)
                .field("username", username)
                .field("password", &"<redacted>")
                .finish(),
        }
    }
}

/// Whether `SPILLWAY_REQUIRE_REAL_IGGY` asks for the real server (set and not `0`/empty).
pub fn real_iggy_required() -> bool {
    std::env::var("SPILLWAY_REQUIRE_REAL_IGGY")
        .map(|v| !v.is_empty() && v != "0")
        .unwrap_or(false)
}

impl IggyServer {
    /// The server for a test, as the [type docs](IggyServer) say: external, real, or the
    /// stand-in.
    pub fn start() -> Result<Self, HarnessError> {
        Self::start_with(IggyProcessOpts::new())
    }

    /// As [`IggyServer::start`], with options for a real server the harness starts (a TLS
    /// real server falls back to a TLS stand-in; an external server ignores them).
    pub fn start_with(opts: IggyProcessOpts) -> Result<Self, HarnessError> {
        let target = std::env::var("SPILLWAY_TEST_IGGY").unwrap_or_default();
        if !target.trim().is_empty() {
            return Self::external(&target, "SPILLWAY_TEST_IGGY");
        }
        Self::real_or_stand_in(opts)
    }

    /// The real server, started by the harness, or the stand-in where there is none (an error
    /// under `SPILLWAY_REQUIRE_REAL_IGGY=1`).
    pub fn real_or_stand_in(opts: IggyProcessOpts) -> Result<Self, HarnessError> {
        match real::server_binary()? {
            Some(binary) => IggyProcess::start_binary(&binary, opts).map(IggyServer::Real),
            None if real_iggy_required() => Err(HarnessError::InvalidOption(format!(
                "SPILLWAY_REQUIRE_REAL_IGGY is set but no Iggy server binary was found \
                 (SPILLWAY_IGGY_SERVER_BIN, {}, iggy-server on PATH)",
                real::shared_binary().display()
            ))),
            None => {
                static NOTICE: std::sync::Once = std::sync::Once::new();
                NOTICE.call_once(|| {
                    eprintln!(
                        "spillway-tests: no Iggy server binary (SPILLWAY_IGGY_SERVER_BIN, {}, \
                         iggy-server on PATH): Iggy tests run against the harness's stand-in, \
                         not the real server",
                        real::shared_binary().display()
                    );
                });
                let stand_in = if opts.is_tls() {
                    IggyStandInOpts::new().tls()
                } else {
                    IggyStandInOpts::new()
                };
                IggyStandIn::start_with(stand_in).map(IggyServer::StandIn)
            }
        }
    }

    /// The external server at `target` (`host:port`; `what` names where it came from in
    /// errors), or, when `target` is empty, as [`IggyServer::start`] without
    /// `SPILLWAY_TEST_IGGY`. Credentials as for [`IggyServer::External`].
    pub fn at_or_start(target: &str, what: &str) -> Result<Self, HarnessError> {
        if target.trim().is_empty() {
            return Self::real_or_stand_in(IggyProcessOpts::new());
        }
        Self::external(target, what)
    }

    fn external(target: &str, what: &str) -> Result<Self, HarnessError> {
        let target = target.trim();
        let addr = target
            .to_socket_addrs()
            .map_err(|e| HarnessError::InvalidOption(format!("{what}={target}: {e}")))?
            .next()
            .ok_or_else(|| HarnessError::InvalidOption(format!("{what}={target}: no address")))?;
        let env_or = |name: &str, default: &str| {
            std::env::var(name)
                .ok()
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| default.to_owned())
        };
        Ok(IggyServer::External {
            addr,
            username: env_or("SPILLWAY_TEST_IGGY_USERNAME", DEFAULT_CREDENTIALS.0),
            password: env_or("SPILLWAY_TEST_IGGY_PASSWORD", DEFAULT_CREDENTIALS.1),
        })
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        match self {
            IggyServer::Real(p) => p.addr(),
            IggyServer::StandIn(s) => s.addr(),
            IggyServer::External { addr, .. } => *addr,
        }
    }

    /// The user to log in as.
    pub fn username(&self) -> &str {
        match self {
            IggyServer::Real(p) => p.username(),
            IggyServer::StandIn(s) => s.username(),
            IggyServer::External { username, .. } => username,
        }
    }

    /// That user's password.
    pub fn password(&self) -> &str {
        match self {
            IggyServer::Real(p) => p.password(),
            IggyServer::StandIn(s) => s.password(),
            IggyServer::External { password, .. } => password,
        }
    }

    /// The PEM certificate of the CA to trust when the server serves TLS.
    pub fn ca_pem(&self) -> Option<&str> {
        match self {
            IggyServer::Real(p) => p.ca_pem(),
            IggyServer::StandIn(s) => s.ca_pem(),
            IggyServer::External { .. } => None,
        }
    }

    /// The stand-in, when this is one (for its test hooks).
    pub fn stand_in(&self) -> Option<&IggyStandIn> {
        match self {
            IggyServer::StandIn(s) => Some(s),
            _ => None,
        }
    }

    /// The harness-started real server, when this is one (to crash and restart it).
    pub fn real(&mut self) -> Option<&mut IggyProcess> {
        match self {
            IggyServer::Real(p) => Some(p),
            _ => None,
        }
    }

    /// Whether this is the real server (started here or external), not the stand-in.
    pub fn is_real(&self) -> bool {
        !matches!(self, IggyServer::StandIn(_))
    }

    /// What this is, in one phrase for reports and logs.
    pub fn describe(&self) -> String {
        match self {
            IggyServer::Real(p) => format!(
                "the real Iggy server ({}) at {}, started by the harness",
                p.binary().display(),
                p.addr()
            ),
            IggyServer::StandIn(s) => {
                format!(
                    "the harness's Iggy stand-in (not the real server) at {}",
                    s.addr()
                )
            }
            IggyServer::External { addr, .. } => format!("the external Iggy server at {addr}"),
        }
    }

    /// A logged-in admin client (over TLS when the server serves TLS).
    pub fn admin(&self) -> Result<IggyAdmin, HarnessError> {
        match self.ca_pem() {
            None => IggyAdmin::connect(self.addr(), self.username(), self.password()),
            Some(ca_pem) => IggyAdmin::connect_tls(
                self.addr(),
                ca_pem,
                DEFAULT_SERVER_NAME,
                self.username(),
                self.password(),
            ),
        }
    }
}

#[cfg(test)]
mod debug_tests {
    use super::*;

    #[test]
    fn passwords_stay_out_of_debug() {
        let real = IggyServer::External {
            addr: std::net::SocketAddr::from(([127, 0, 0, 1], 8090)),
            username: "u".into(),
            password: "hunter2-secret".into(),
        };
        let text = format!("{real:?}");
        assert!(
            !text.contains("hunter2-secret") && text.contains("redacted"),
            "{text}"
        );
    }
}

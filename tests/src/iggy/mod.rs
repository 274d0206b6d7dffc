//! Iggy for tests: a stand-in server, a way to use a real server instead, and a small
//! synchronous admin client.
//!
//! [`IggyStandIn`] is a STAND-IN for the Iggy server, not the real server. It is built on the
//! real wire-format crate (`iggy_binary_protocol =0.11.0-edge.4`, the format of server
//! 0.9.0-edge.5) and imitates the server's observable behaviour, as read from the server source
//! (`core/server/src/dispatch.rs`, `responses.rs`, `core/metadata/src/stm/consumer_group.rs`,
//! `core/partitions`): VSR 256-byte framing, login (password or personal access token),
//! streams, topics, 0-based partitions, send, poll (offset / timestamp / first / last / next,
//! auto-commit, partial batches re-headed), consumer offsets, consumer groups with cooperative
//! rebalancing, the resync sentinel, heartbeat eviction, and the error codes and empty bodies
//! the server answers with. Tests run against a real server instead when
//! `SPILLWAY_TEST_IGGY=host:port` is set (see [`IggyServer::from_env_or_stand_in`]).
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
pub mod codes;
mod groups;
mod handlers;
mod server;
mod state;
mod wire;

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

pub use admin::{
    IggyAdmin, PolledTestBatch, PolledTestMessage, TestConsumer, TestMessage, TestPolling,
};

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
        let state = State::new(users, opts.revocation_timeout);
        let (ca_pem, tls) = if opts.tls {
            let ca = TestCa::new("spillway Iggy stand-in CA")?;
            let cert = ca.issue_server_cert(&[DEFAULT_SERVER_NAME, "127.0.0.1"])?;
            let config = server_config(&cert)?;
            (Some(ca.cert_pem().to_owned()), Some(config))
        } else {
            (None, None)
        };
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

/// Where a test's Iggy lives: the stand-in, or a real server when `SPILLWAY_TEST_IGGY=host:port`
/// is set (credentials from `SPILLWAY_TEST_IGGY_USERNAME` / `SPILLWAY_TEST_IGGY_PASSWORD`,
/// default `iggy`/`iggy`).
pub enum IggyServer {
    /// The stand-in, started for this test.
    StandIn(IggyStandIn),
    /// A real server someone else runs.
    Real {
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
            IggyServer::StandIn(s) => f.debug_tuple("StandIn").field(s).finish(),
            IggyServer::Real { addr, username, .. } => f
                .debug_struct("Real")
                .field("addr", addr)
                .field("username", username)
                .field("password", &"<redacted>")
                .finish(),
        }
    }
}

impl IggyServer {
    /// The real server named by `SPILLWAY_TEST_IGGY`, or a fresh stand-in when it is unset
    /// or empty.
    pub fn from_env_or_stand_in() -> Result<Self, HarnessError> {
        let target = std::env::var("SPILLWAY_TEST_IGGY").unwrap_or_default();
        Self::at_or_stand_in(&target, "SPILLWAY_TEST_IGGY")
    }

    /// The real server at `target` (`host:port`; `what` names where it came from in errors),
    /// or a fresh stand-in when `target` is empty. Credentials as for
    /// [`IggyServer::from_env_or_stand_in`].
    pub fn at_or_stand_in(target: &str, what: &str) -> Result<Self, HarnessError> {
        let target = target.trim();
        if target.is_empty() {
            return IggyStandIn::start().map(IggyServer::StandIn);
        }
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
        Ok(IggyServer::Real {
            addr,
            username: env_or("SPILLWAY_TEST_IGGY_USERNAME", DEFAULT_CREDENTIALS.0),
            password: env_or("SPILLWAY_TEST_IGGY_PASSWORD", DEFAULT_CREDENTIALS.1),
        })
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        match self {
            IggyServer::StandIn(s) => s.addr(),
            IggyServer::Real { addr, .. } => *addr,
        }
    }

    /// The user to log in as.
    pub fn username(&self) -> &str {
        match self {
            IggyServer::StandIn(s) => s.username(),
            IggyServer::Real { username, .. } => username,
        }
    }

    /// That user's password.
    pub fn password(&self) -> &str {
        match self {
            IggyServer::StandIn(s) => s.password(),
            IggyServer::Real { password, .. } => password,
        }
    }

    /// The stand-in, when this is one (for its test hooks).
    pub fn stand_in(&self) -> Option<&IggyStandIn> {
        match self {
            IggyServer::StandIn(s) => Some(s),
            IggyServer::Real { .. } => None,
        }
    }

    /// A logged-in admin client (over TLS to a stand-in that serves TLS).
    pub fn admin(&self) -> Result<IggyAdmin, HarnessError> {
        match self {
            IggyServer::StandIn(s) => s.admin(),
            IggyServer::Real { .. } => {
                IggyAdmin::connect(self.addr(), self.username(), self.password())
            }
        }
    }
}

#[cfg(test)]
mod debug_tests {
    use super::*;

    #[test]
    fn passwords_stay_out_of_debug() {
        let real = IggyServer::Real {
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

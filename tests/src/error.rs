//! The one error type of the harness: every way starting a server or talking to it can fail.

use std::fmt;
use std::io;
use std::time::Duration;

/// Something the harness could not do. `Display` names the problem and, where it helps, what to
/// do about it (a missing binary) or what the server said (the tail of its log).
#[derive(Debug)]
#[non_exhaustive]
pub enum HarnessError {
    /// A program the harness runs is not installed (or not on `PATH`).
    BinaryMissing {
        /// The program name, e.g. `mosquitto`.
        binary: String,
    },
    /// An I/O operation failed; `context` says which one.
    Io {
        /// What the harness was doing.
        context: String,
        /// The underlying error.
        source: io::Error,
    },
    /// A helper command (such as `mosquitto_passwd`) ran but failed.
    CommandFailed {
        /// The command line, secrets left out.
        command: String,
        /// How it ended.
        status: String,
        /// What it wrote to stderr.
        stderr: String,
    },
    /// A server did not become ready (accept TCP connections) in time.
    StartTimeout {
        /// Which server.
        server: &'static str,
        /// How long the harness waited.
        waited: Duration,
        /// The last lines of the server log.
        log_tail: String,
    },
    /// A server process exited while the harness waited for it to become ready.
    ServerExited {
        /// Which server.
        server: &'static str,
        /// Its exit status.
        status: String,
        /// The last lines of the server log.
        log_tail: String,
    },
    /// The caller asked for something the harness cannot do (e.g. QoS 3, `start_again` while
    /// running).
    InvalidOption(String),
    /// Generating a certificate or key failed.
    Certificate(String),
    /// A TLS configuration or handshake error.
    Tls(String),
    /// The peer sent bytes that are not a valid MQTT packet, or an unexpected one.
    Protocol(String),
    /// An S3 server answered a harness request with an error, or not in HTTP.
    S3(String),
    /// The broker answered CONNECT with a refusal.
    ConnectRefused {
        /// The raw CONNACK return code (3.1.1) or reason code (5).
        code: u8,
        /// A readable name of the code.
        reason: String,
    },
    /// The broker refused one of the subscriptions in SUBACK.
    SubscribeRefused {
        /// The raw return / reason codes, in filter order.
        codes: Vec<u8>,
    },
    /// The connection closed (or failed) before the expected packet arrived.
    ConnectionClosed {
        /// What the harness was waiting for.
        waiting_for: &'static str,
        /// Why, if known.
        detail: String,
    },
    /// A reply did not arrive in time.
    Timeout {
        /// What the harness was waiting for.
        waiting_for: &'static str,
        /// How long it waited.
        waited: Duration,
    },
    /// A subscriber did not receive the expected number of messages in time.
    MessagesTimeout {
        /// How many messages were expected.
        expected: usize,
        /// How many arrived.
        received: usize,
        /// How long the harness waited.
        waited: Duration,
    },
    /// A container could not be started (feature `containers`).
    Container(String),
    /// An Iggy server refused a request: a nonzero reply `status`, a rejection in the result
    /// section of a replicated reply, or a session-terminal Eviction frame.
    IggyRefused {
        /// Which request, e.g. `create_stream`.
        request: String,
        /// Which of the three refusal channels carried the code.
        channel: IggyChannel,
        /// The Iggy error code (`status` / result code), or the eviction reason.
        code: u32,
        /// A readable name of the code, e.g. `StreamIdNotFound`.
        name: String,
    },
    /// An Iggy server answered with an empty body where something was expected (the server's
    /// way of saying "no such resource" for reads such as get topic).
    IggyNotFound(String),
    /// An Iggy peer sent bytes that are not a valid frame or body, or an unexpected one.
    IggyProtocol(String),
}

/// How an Iggy server said no (see [`HarnessError::IggyRefused`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IggyChannel {
    /// `ReplyHeader.status`: a denial before the request took effect; the body is empty.
    Status,
    /// The result section of a replicated reply: the request was applied as a rejection.
    Result,
    /// An Eviction frame: the session is over (bad credentials, no session, stale client...).
    Eviction,
}

impl fmt::Display for IggyChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IggyChannel::Status => "status",
            IggyChannel::Result => "result",
            IggyChannel::Eviction => "eviction reason",
        })
    }
}

impl HarnessError {
    /// The Iggy code of an [`HarnessError::IggyRefused`] (status, result code or eviction
    /// reason), `None` for every other error.
    pub fn iggy_code(&self) -> Option<u32> {
        match self {
            HarnessError::IggyRefused { code, .. } => Some(*code),
            _ => None,
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        HarnessError::Io {
            context: context.into(),
            source,
        }
    }
}

impl fmt::Display for HarnessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HarnessError::BinaryMissing { binary } => write!(
                f,
                "`{binary}` is not installed or not on PATH: run scripts/setup.sh to install the \
                 test servers"
            ),
            HarnessError::Io { context, source } => write!(f, "{context}: {source}"),
            HarnessError::CommandFailed {
                command,
                status,
                stderr,
            } => write!(f, "`{command}` failed ({status}): {}", stderr.trim()),
            HarnessError::StartTimeout {
                server,
                waited,
                log_tail,
            } => write!(
                f,
                "{server} did not accept connections within {waited:?}; log tail:\n{log_tail}"
            ),
            HarnessError::ServerExited {
                server,
                status,
                log_tail,
            } => write!(
                f,
                "{server} exited during start-up ({status}); log tail:\n{log_tail}"
            ),
            HarnessError::InvalidOption(msg) => write!(f, "invalid harness option: {msg}"),
            HarnessError::Certificate(msg) => write!(f, "certificate generation failed: {msg}"),
            HarnessError::Tls(msg) => write!(f, "TLS error: {msg}"),
            HarnessError::Protocol(msg) => write!(f, "MQTT protocol error: {msg}"),
            HarnessError::S3(msg) => write!(f, "S3: {msg}"),
            HarnessError::ConnectRefused { code, reason } => {
                write!(f, "broker refused CONNECT with code {code} ({reason})")
            }
            HarnessError::SubscribeRefused { codes } => {
                write!(f, "broker refused a subscription, SUBACK codes {codes:?}")
            }
            HarnessError::ConnectionClosed {
                waiting_for,
                detail,
            } => write!(
                f,
                "connection closed while waiting for {waiting_for}: {detail}"
            ),
            HarnessError::Timeout {
                waiting_for,
                waited,
            } => write!(f, "no {waiting_for} within {waited:?}"),
            HarnessError::MessagesTimeout {
                expected,
                received,
                waited,
            } => write!(
                f,
                "expected {expected} messages within {waited:?}, but only {received} arrived"
            ),
            HarnessError::Container(msg) => write!(f, "container error: {msg}"),
            HarnessError::IggyRefused {
                request,
                channel,
                code,
                name,
            } => write!(f, "Iggy refused `{request}`: {channel} {code} {name}"),
            HarnessError::IggyNotFound(what) => write!(f, "Iggy has no {what}"),
            HarnessError::IggyProtocol(msg) => write!(f, "Iggy protocol error: {msg}"),
        }
    }
}

impl std::error::Error for HarnessError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HarnessError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

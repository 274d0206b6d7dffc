//! Errors of the Iggy source: transport, protocol, and the server's codes by name.

use std::fmt;
use std::io;

use iggy_binary_protocol::IGGY_PROTOCOL_VERSION;

/// The Iggy server versions whose wire protocol Spillway speaks.
pub const SUPPORTED_SERVER: &str = "0.9.0 and 0.9.0-edge.5";
/// The `iggy_binary_protocol` crate version that protocol comes from.
pub const PROTOCOL_CRATE_VERSION: &str = "0.11.0";

/// A packed protocol version (`major << 20 | minor << 10 | patch`) as `major.minor.patch`.
pub fn version_text(packed: u32) -> String {
    format!(
        "{}.{}.{}",
        packed >> 20,
        (packed >> 10) & 0x3ff,
        packed & 0x3ff
    )
}

/// What went wrong talking to Iggy.
#[derive(Debug)]
pub enum IggyError {
    /// The connection failed or broke.
    Io(io::Error),
    /// No reply within the deadline.
    Timeout(&'static str),
    /// The server closed the session (bad login, stale client, incompatible protocol...).
    Evicted {
        /// `EvictionReason` code.
        reason: u8,
    },
    /// The server refused the request with an Iggy error code.
    Status {
        /// The server's result code.
        code: ResultCode,
    },
    /// The server does not accept this client's wire protocol version (eviction reason 14):
    /// it is another Iggy version than the one Spillway speaks.
    IncompatibleProtocol {
        /// The newest protocol the server accepts (packed `major << 20 | minor << 10 | patch`).
        server_max: u32,
        /// The oldest protocol the server accepts (packed).
        server_min: u32,
    },
    /// The server answered with the framing of Iggy before 0.9 (an 8-byte status and length
    /// head, not the 256-byte header): a server older than the protocol Spillway speaks.
    LegacyServer {
        /// The status code of its first answer.
        status: u32,
    },
    /// A frame or body that does not decode, or a checksum that does not match.
    Malformed(String),
    /// A TLS configuration or handshake problem.
    Tls(String),
    /// A stream, topic, partition or group the config names does not exist.
    NotFound(String),
    /// A reply to another request than the one sent: the connection is out of step (seen on
    /// a cluster's node right after a view change); a new connection cures it.
    OutOfStep {
        /// The request number sent.
        expected: u64,
        /// The one the reply answers.
        got: u64,
    },
    /// No node of the configured addresses (or of the cluster's roster) could be reached and
    /// name a leader that answers: what each said.
    NoLeader(String),
}

impl IggyError {
    /// Whether reconnecting (or retrying) may help: lost connections, timeouts, a stale
    /// session, transient server states. Bad credentials, missing streams and malformed data
    /// do not go away by retrying.
    pub fn is_transient(&self) -> bool {
        match self {
            IggyError::Io(_)
            | IggyError::Timeout(_)
            | IggyError::NoLeader(_)
            | IggyError::OutOfStep { .. } => true,
            IggyError::Evicted { reason } => matches!(reason, 1 | 7 | 8 | 13),
            // 40: the session is gone (e.g. after a stale-client eviction): log in again.
            IggyError::Status { code } => matches!(
                code,
                ResultCode::StaleClient
                    | ResultCode::Unauthenticated
                    | ResultCode::TransientNotCommitted
                    | ResultCode::TransientNotAccepted
                    | ResultCode::RequestAlreadyApplied
            ),
            IggyError::IncompatibleProtocol { .. }
            | IggyError::LegacyServer { .. }
            | IggyError::Malformed(_)
            | IggyError::Tls(_)
            | IggyError::NotFound(_) => false,
        }
    }

    /// Whether the configuration cannot work with this server (the process exits 2): it
    /// speaks another protocol version.
    pub fn is_config(&self) -> bool {
        matches!(
            self,
            IggyError::IncompatibleProtocol { .. } | IggyError::LegacyServer { .. }
        )
    }

    /// The class the engine acts on: transient errors reconnect, the others end the run.
    pub fn class(&self) -> crate::error::ErrorClass {
        use crate::error::ErrorClass;
        if self.is_transient() {
            ErrorClass::Transient
        } else if self.is_config() {
            ErrorClass::Config
        } else {
            ErrorClass::Permanent
        }
    }
}

impl fmt::Display for IggyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IggyError::Io(e) => write!(f, "connection to Iggy failed: {e}"),
            IggyError::Timeout(what) => write!(f, "Iggy did not answer {what} in time"),
            IggyError::Evicted { reason } => write!(
                f,
                "Iggy closed the session: {} (eviction reason {reason})",
                eviction_name(*reason)
            ),
            IggyError::Status { code } => {
                write!(
                    f,
                    "Iggy refused the request: {} (error {})",
                    code.name(),
                    code.raw()
                )
            }
            IggyError::IncompatibleProtocol {
                server_max,
                server_min,
            } => {
                write!(
                    f,
                    "this Iggy server does not accept protocol {ours} (wire version {}); \
                     Spillway {} supports Iggy server {SUPPORTED_SERVER}",
                    version_text(IGGY_PROTOCOL_VERSION),
                    env!("CARGO_PKG_VERSION"),
                    ours = PROTOCOL_CRATE_VERSION,
                )?;
                if *server_max != 0 {
                    write!(
                        f,
                        "; the server accepts wire versions {} to {}",
                        version_text(*server_min),
                        version_text(*server_max)
                    )?;
                }
                f.write_str(
                    " (Iggy changes its wire protocol between releases: run the supported \
                     server version, or a Spillway built for yours; see README.md, Supported \
                     Iggy server)",
                )
            }
            IggyError::LegacyServer { status } => write!(
                f,
                "this Iggy server answers with the framing of Iggy before 0.9 (an 8-byte head, \
                 error {status} {}), not the 256-byte header of protocol {PROTOCOL_CRATE_VERSION}: \
                 Spillway {} supports Iggy server {SUPPORTED_SERVER} (upgrade the server, or run \
                 a Spillway built for yours; see README.md, Supported Iggy server)",
                code_name(*status),
                env!("CARGO_PKG_VERSION"),
            ),
            IggyError::Malformed(what) => write!(f, "malformed data from Iggy: {what}"),
            IggyError::Tls(what) => write!(f, "TLS to Iggy: {what}"),
            IggyError::NotFound(what) => f.write_str(what),
            IggyError::NoLeader(what) => write!(f, "no Iggy node to talk to: {what}"),
            IggyError::OutOfStep { expected, got } => write!(
                f,
                "Iggy answered request {got} while request {expected} was waiting (the \
                 connection is out of step)"
            ),
        }
    }
}

impl std::error::Error for IggyError {}

impl From<io::Error> for IggyError {
    fn from(e: io::Error) -> Self {
        IggyError::Io(e)
    }
}

/// A readable name for an eviction reason (`EvictionReason` of the wire crate).
pub fn eviction_name(reason: u8) -> &'static str {
    match reason {
        1 => "no session",
        2 => "client release too low",
        3 => "client release too high",
        4 => "invalid request operation",
        5 => "invalid request body",
        6 => "invalid request body size",
        7 => "session too low",
        8 => "session release mismatch",
        9 => "invalid credentials (wrong username or password)",
        10 => "invalid token (personal access token refused)",
        11 => "user inactive",
        12 => "session error",
        13 => "stale client (no request for too long)",
        14 => "incompatible protocol version",
        15 => "malformed login",
        _ => "unknown reason",
    }
}

/// The Iggy result codes the engine meets, by name (from the server's `IggyError` table);
/// any other code is kept as `Other`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResultCode {
    /// 1.
    Error,
    /// 3.
    InvalidCommand,
    /// 4.
    InvalidFormat,
    /// 5.
    FeatureUnavailable,
    /// 20: also what a group member hears storing the offset of a partition it lost.
    ResourceNotFound,
    /// 30.
    StaleClient,
    /// 40: the session is gone (log in again).
    Unauthenticated,
    /// 41.
    Unauthorized,
    /// 42.
    InvalidCredentials,
    /// 43.
    InvalidUsername,
    /// 44.
    InvalidPassword,
    /// 57: a metadata change not committed yet; the same request may be sent again.
    TransientNotCommitted,
    /// 58: not accepted for now; the same request may be sent again.
    TransientNotAccepted,
    /// 59: the request number is not above the client's last one: taken for a duplicate, not
    /// applied.
    RequestAlreadyApplied,
    /// 1009.
    StreamIdNotFound,
    /// 1010.
    StreamNameNotFound,
    /// 2010.
    TopicIdNotFound,
    /// 2011.
    TopicNameNotFound,
    /// 3007.
    PartitionNotFound,
    /// 3021: nothing stored to delete.
    ConsumerOffsetNotFound,
    /// 4100.
    InvalidOffset,
    /// 5000.
    ConsumerGroupIdNotFound,
    /// 5003.
    ConsumerGroupNameNotFound,
    /// 5006.
    ConsumerGroupMemberNotFound,
    /// 5009: the group moved the partition polled.
    ConsumerGroupPartitionNotOwned,
    /// A code this list does not name.
    Other(u32),
}

const CODES: [(u32, ResultCode, &str); 25] = [
    (1, ResultCode::Error, "Error"),
    (3, ResultCode::InvalidCommand, "InvalidCommand"),
    (4, ResultCode::InvalidFormat, "InvalidFormat"),
    (5, ResultCode::FeatureUnavailable, "FeatureUnavailable"),
    (20, ResultCode::ResourceNotFound, "ResourceNotFound"),
    (30, ResultCode::StaleClient, "StaleClient"),
    (40, ResultCode::Unauthenticated, "Unauthenticated"),
    (41, ResultCode::Unauthorized, "Unauthorized"),
    (42, ResultCode::InvalidCredentials, "InvalidCredentials"),
    (43, ResultCode::InvalidUsername, "InvalidUsername"),
    (44, ResultCode::InvalidPassword, "InvalidPassword"),
    (
        57,
        ResultCode::TransientNotCommitted,
        "TransientNotCommitted",
    ),
    (58, ResultCode::TransientNotAccepted, "TransientNotAccepted"),
    (
        59,
        ResultCode::RequestAlreadyApplied,
        "RequestAlreadyApplied",
    ),
    (1009, ResultCode::StreamIdNotFound, "StreamIdNotFound"),
    (1010, ResultCode::StreamNameNotFound, "StreamNameNotFound"),
    (2010, ResultCode::TopicIdNotFound, "TopicIdNotFound"),
    (2011, ResultCode::TopicNameNotFound, "TopicNameNotFound"),
    (3007, ResultCode::PartitionNotFound, "PartitionNotFound"),
    (
        3021,
        ResultCode::ConsumerOffsetNotFound,
        "ConsumerOffsetNotFound",
    ),
    (4100, ResultCode::InvalidOffset, "InvalidOffset"),
    (
        5000,
        ResultCode::ConsumerGroupIdNotFound,
        "ConsumerGroupIdNotFound",
    ),
    (
        5003,
        ResultCode::ConsumerGroupNameNotFound,
        "ConsumerGroupNameNotFound",
    ),
    (
        5006,
        ResultCode::ConsumerGroupMemberNotFound,
        "ConsumerGroupMemberNotFound",
    ),
    (
        5009,
        ResultCode::ConsumerGroupPartitionNotOwned,
        "ConsumerGroupPartitionNotOwned",
    ),
];

impl ResultCode {
    /// The code on the wire.
    pub fn raw(self) -> u32 {
        match self {
            ResultCode::Other(code) => code,
            known => CODES
                .iter()
                .find(|(_, c, _)| *c == known)
                .map_or(0, |(raw, _, _)| *raw),
        }
    }

    /// The server's name for it.
    pub fn name(self) -> &'static str {
        CODES
            .iter()
            .find(|(_, c, _)| *c == self)
            .map_or("unknown error", |(_, _, name)| name)
    }

    /// A refusal after which the same request may be sent again, unchanged (57, 58).
    pub fn is_transient_refusal(self) -> bool {
        matches!(
            self,
            ResultCode::TransientNotCommitted | ResultCode::TransientNotAccepted
        )
    }

    /// The stream (or, with `topic`, the topic) the request names does not exist.
    pub fn is_missing_stream(self) -> bool {
        matches!(
            self,
            ResultCode::StreamIdNotFound | ResultCode::StreamNameNotFound
        )
    }

    /// The topic (or its stream) the request names does not exist.
    pub fn is_missing_topic(self) -> bool {
        self.is_missing_stream()
            || matches!(
                self,
                ResultCode::TopicIdNotFound | ResultCode::TopicNameNotFound
            )
    }
}

impl From<u32> for ResultCode {
    fn from(raw: u32) -> ResultCode {
        CODES
            .iter()
            .find(|(r, _, _)| *r == raw)
            .map_or(ResultCode::Other(raw), |(_, code, _)| *code)
    }
}

/// A readable name for an Iggy error code.
pub fn code_name(code: u32) -> &'static str {
    ResultCode::from(code).name()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_code_round_trips() {
        for (raw, code, name) in CODES {
            assert_eq!(ResultCode::from(raw), code);
            assert_eq!(code.raw(), raw);
            assert_eq!(code.name(), name);
        }
        assert_eq!(ResultCode::from(777), ResultCode::Other(777));
        assert_eq!(ResultCode::Other(777).raw(), 777);
        assert_eq!(code_name(777), "unknown error");
    }
}

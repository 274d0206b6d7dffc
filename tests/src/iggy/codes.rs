//! The Iggy error codes the stand-in answers with, and readable names for them.
//!
//! The values are those of the server's error table (`IggyError` in `iggy_common`), copied so
//! the harness does not depend on that crate. Only codes the stand-in produces or a test is
//! likely to meet are listed; [`error_name`] calls any other code "unknown".

use iggy_binary_protocol::EvictionReason;

/// Generic failure.
pub const ERROR: u32 = 1;
/// A body that does not decode, or an unknown command code.
pub const INVALID_COMMAND: u32 = 3;
/// A request whose `request_checksum` does not match its body.
pub const INVALID_FORMAT: u32 = 4;
/// A command this server (or this stand-in) does not serve.
pub const FEATURE_UNAVAILABLE: u32 = 5;
/// A missing or malformed identifier (e.g. a group poll without a partition).
pub const INVALID_IDENTIFIER: u32 = 6;
/// A partition request (send, store offset) whose target does not resolve, including a group
/// offset store for a partition the connection does not own.
pub const RESOURCE_NOT_FOUND: u32 = 20;
/// The client's heartbeat went stale.
pub const STALE_CLIENT: u32 = 30;
/// A request that needs a logged-in connection, sent before login.
pub const UNAUTHENTICATED: u32 = 40;
/// The user lacks a permission.
pub const UNAUTHORIZED: u32 = 41;
/// Wrong username or password.
pub const INVALID_CREDENTIALS: u32 = 42;
/// Unknown or expired personal access token.
pub const INVALID_PERSONAL_ACCESS_TOKEN: u32 = 53;
/// A replicated request that did not commit; replay it with the same request id.
pub const TRANSIENT_NOT_COMMITTED: u32 = 57;
/// A request the server did not accept right now; retry.
pub const TRANSIENT_NOT_ACCEPTED: u32 = 58;
/// A replicated request id the server applied already and no longer has the reply of.
pub const REQUEST_ALREADY_APPLIED: u32 = 59;
/// Stream not found (by id or by name).
pub const STREAM_ID_NOT_FOUND: u32 = 1009;
/// Stream name not found (legacy servers).
pub const STREAM_NAME_NOT_FOUND: u32 = 1010;
/// A stream with that name exists already.
pub const STREAM_NAME_ALREADY_EXISTS: u32 = 1012;
/// Topic not found (by id or by name).
pub const TOPIC_ID_NOT_FOUND: u32 = 2010;
/// Topic name not found (legacy servers).
pub const TOPIC_NAME_NOT_FOUND: u32 = 2011;
/// A topic with that name exists already in the stream.
pub const TOPIC_NAME_ALREADY_EXISTS: u32 = 2013;
/// More partitions than one request may create.
pub const TOO_MANY_PARTITIONS: u32 = 2015;
/// Partition not found.
pub const PARTITION_NOT_FOUND: u32 = 3007;
/// Deleting a consumer offset that is not stored.
pub const CONSUMER_OFFSET_NOT_FOUND: u32 = 3021;
/// A message checksum does not match its frame.
pub const INVALID_MESSAGE_CHECKSUM: u32 = 4027;
/// A batch checksum does not match its batch.
pub const INVALID_BATCH_CHECKSUM: u32 = 4039;
/// An options block with a key the resource does not know (streams take none).
pub const UNSUPPORTED_OPTION_KEY: u32 = 4041;
/// Storing an offset past the partition head, or any offset in an empty partition.
pub const INVALID_OFFSET: u32 = 4100;
/// Consumer group not found.
pub const CONSUMER_GROUP_ID_NOT_FOUND: u32 = 5000;
/// Consumer group name not found (legacy servers).
pub const CONSUMER_GROUP_NAME_NOT_FOUND: u32 = 5003;
/// A consumer group with that name exists already on the topic.
pub const CONSUMER_GROUP_NAME_ALREADY_EXISTS: u32 = 5004;
/// Leaving a group the connection is not a member of.
pub const CONSUMER_GROUP_MEMBER_NOT_FOUND: u32 = 5006;
/// A group member touching a partition it does not own (legacy servers; the VSR server answers
/// polls with the resync sentinel instead).
pub const CONSUMER_GROUP_PARTITION_NOT_OWNED: u32 = 5009;

/// The partition id a group poll answers with when the member may not poll the partition it
/// asked for: re-sync (606) and retry.
pub const RESYNC_REQUIRED_PARTITION: u32 = u32::MAX;

/// A readable name of an Iggy error code, e.g. `StreamIdNotFound` for 1009.
pub fn error_name(code: u32) -> &'static str {
    match code {
        0 => "Ok",
        ERROR => "Error",
        INVALID_COMMAND => "InvalidCommand",
        INVALID_FORMAT => "InvalidFormat",
        FEATURE_UNAVAILABLE => "FeatureUnavailable",
        INVALID_IDENTIFIER => "InvalidIdentifier",
        RESOURCE_NOT_FOUND => "ResourceNotFound",
        STALE_CLIENT => "StaleClient",
        UNAUTHENTICATED => "Unauthenticated",
        UNAUTHORIZED => "Unauthorized",
        INVALID_CREDENTIALS => "InvalidCredentials",
        INVALID_PERSONAL_ACCESS_TOKEN => "InvalidPersonalAccessToken",
        TRANSIENT_NOT_COMMITTED => "TransientNotCommitted",
        TRANSIENT_NOT_ACCEPTED => "TransientNotAccepted",
        REQUEST_ALREADY_APPLIED => "RequestAlreadyApplied",
        STREAM_ID_NOT_FOUND => "StreamIdNotFound",
        STREAM_NAME_NOT_FOUND => "StreamNameNotFound",
        STREAM_NAME_ALREADY_EXISTS => "StreamNameAlreadyExists",
        TOPIC_ID_NOT_FOUND => "TopicIdNotFound",
        TOPIC_NAME_NOT_FOUND => "TopicNameNotFound",
        TOPIC_NAME_ALREADY_EXISTS => "TopicNameAlreadyExists",
        TOO_MANY_PARTITIONS => "TooManyPartitions",
        PARTITION_NOT_FOUND => "PartitionNotFound",
        CONSUMER_OFFSET_NOT_FOUND => "ConsumerOffsetNotFound",
        INVALID_MESSAGE_CHECKSUM => "InvalidMessageChecksum",
        INVALID_BATCH_CHECKSUM => "InvalidBatchChecksum",
        UNSUPPORTED_OPTION_KEY => "UnsupportedOptionKey",
        INVALID_OFFSET => "InvalidOffset",
        CONSUMER_GROUP_ID_NOT_FOUND => "ConsumerGroupIdNotFound",
        CONSUMER_GROUP_NAME_NOT_FOUND => "ConsumerGroupNameNotFound",
        CONSUMER_GROUP_NAME_ALREADY_EXISTS => "ConsumerGroupNameAlreadyExists",
        CONSUMER_GROUP_MEMBER_NOT_FOUND => "ConsumerGroupMemberNotFound",
        CONSUMER_GROUP_PARTITION_NOT_OWNED => "ConsumerGroupPartitionNotOwned",
        _ => "unknown Iggy error code",
    }
}

/// A readable description of an eviction reason, e.g. "InvalidCredentials (invalid
/// credentials: wrong username or password)".
pub fn eviction_name(reason: EvictionReason) -> &'static str {
    match reason {
        EvictionReason::Reserved => "Reserved (not a valid reason)",
        EvictionReason::NoSession => "NoSession (no session: log in first)",
        EvictionReason::ClientReleaseTooLow => "ClientReleaseTooLow",
        EvictionReason::ClientReleaseTooHigh => "ClientReleaseTooHigh",
        EvictionReason::InvalidRequestOperation => "InvalidRequestOperation",
        EvictionReason::InvalidRequestBody => "InvalidRequestBody",
        EvictionReason::InvalidRequestBodySize => "InvalidRequestBodySize",
        EvictionReason::SessionTooLow => "SessionTooLow",
        EvictionReason::SessionReleaseMismatch => "SessionReleaseMismatch",
        EvictionReason::InvalidCredentials => {
            "InvalidCredentials (invalid credentials: wrong username or password)"
        }
        EvictionReason::InvalidToken => {
            "InvalidToken (invalid credentials: unknown personal access token)"
        }
        EvictionReason::UserInactive => "UserInactive",
        EvictionReason::SessionError => "SessionError",
        EvictionReason::StaleClient => "StaleClient (no request within the heartbeat window)",
        EvictionReason::IncompatibleProtocol => "IncompatibleProtocol",
        EvictionReason::MalformedLogin => "MalformedLogin (not a register login body)",
    }
}

//! The typed Iggy client one shard sink uses: login, metadata checks, poll, offsets, consumer
//! groups. One connection, one request at a time.

use std::time::Instant;

use bytes::Bytes;
use iggy_binary_protocol::codes::{
    DELETE_CONSUMER_OFFSET_CODE, GET_CLUSTER_METADATA_CODE, GET_CONSUMER_GROUP_CODE,
    GET_CONSUMER_OFFSET_CODE, GET_STREAM_CODE, GET_TOPIC_CODE, JOIN_CONSUMER_GROUP_CODE,
    LEAVE_CONSUMER_GROUP_CODE, LOGIN_REGISTER_CODE, LOGIN_REGISTER_WITH_PAT_CODE, PING_CODE,
    POLL_MESSAGES_CODE, STORE_CONSUMER_OFFSET_CODE, SYNC_CONSUMER_GROUP_CODE,
};
use iggy_binary_protocol::requests::consumer_groups::{
    GetConsumerGroupRequest, JoinConsumerGroupRequest, LeaveConsumerGroupRequest,
    SyncConsumerGroupRequest,
};
use iggy_binary_protocol::requests::consumer_offsets::{
    DeleteConsumerOffsetRequest, GetConsumerOffsetRequest, StoreConsumerOffsetRequest,
};
use iggy_binary_protocol::requests::messages::PollMessagesRequest;
use iggy_binary_protocol::requests::streams::GetStreamRequest;
use iggy_binary_protocol::requests::system::GetClusterMetadataRequest;
use iggy_binary_protocol::requests::topics::GetTopicRequest;
use iggy_binary_protocol::requests::users::{LoginRegisterRequest, LoginRegisterWithPatRequest};
use iggy_binary_protocol::responses::consumer_groups::{
    ConsumerGroupDetailsResponse, SyncConsumerGroupResponse,
};
use iggy_binary_protocol::responses::consumer_offsets::ConsumerOffsetResponse;
use iggy_binary_protocol::responses::system::ClusterMetadataResponse;
use iggy_binary_protocol::responses::topics::GetTopicResponse;
use iggy_binary_protocol::responses::users::LoginRegisterResponse;
use iggy_binary_protocol::{
    AckLevel, ClientVersionInfo, IGGY_PROTOCOL_VERSION, WireDecode, WireEncode, WireIdentifier,
    WireName, WirePollingStrategy,
};
use monoio::time::timeout;
use secrecy::SecretString;

use super::cluster::Roster;
use super::conn::{Connection, Endpoint};
use super::error::{IggyError, ResultCode};
use super::poll::{self, Polled};
use super::proto::Identity;
use super::source::Target;
use crate::config::{Ident, Secret};
use crate::message::Message;

/// How to log in.
#[derive(Clone, Debug)]
pub enum Credentials {
    /// Username and password.
    Password {
        /// Username.
        username: String,
        /// Password (redacted in `Debug`).
        password: Secret,
    },
    /// Personal access token (redacted in `Debug`).
    Token(Secret),
}

/// The wire identifier of a configured stream or topic.
pub fn wire_ident(ident: &Ident) -> Result<WireIdentifier, IggyError> {
    match ident {
        Ident::Id(id) => Ok(WireIdentifier::numeric(*id)),
        Ident::Name(name) => WireIdentifier::named(name.clone())
            .map_err(|e| IggyError::Malformed(format!("name {name:?}: {e}"))),
    }
}

/// A logged-in connection.
#[derive(Debug)]
pub struct IggyClient {
    conn: Connection,
    last_request: Instant,
    scratch: bytes::BytesMut,
}

/// A partition of a topic as the server describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionState {
    /// Partition id.
    pub id: u32,
    /// Current (last) offset.
    pub current_offset: u64,
    /// Messages stored.
    pub messages_count: u64,
}

impl IggyClient {
    /// Connects to `address` and logs in, all within the endpoint's connect timeout, as
    /// `identity` (a fresh one when `None`).
    pub async fn connect(
        endpoint: &Endpoint,
        address: &str,
        identity: Option<Identity>,
        creds: &Credentials,
    ) -> Result<IggyClient, IggyError> {
        timeout(endpoint.connect_timeout * 2, async {
            let mut conn = Connection::open(endpoint, address, identity).await?;
            let version_info = ClientVersionInfo {
                protocol_version: IGGY_PROTOCOL_VERSION,
                sdk_name: WireName::new("spillway").map_err(malformed)?,
                sdk_version: WireName::new(env!("CARGO_PKG_VERSION")).map_err(malformed)?,
            };
            let (code, body) = match creds {
                Credentials::Password { username, password } => {
                    if password.expose().len() > 255 {
                        return Err(IggyError::Malformed(
                            "the password is longer than 255 bytes".to_owned(),
                        ));
                    }
                    let req = LoginRegisterRequest {
                        version_info,
                        username: WireName::new(username.clone()).map_err(|e| {
                            IggyError::Malformed(format!("username {username:?}: {e}"))
                        })?,
                        password: SecretString::from(password.expose().to_owned()),
                        client_context: None,
                    };
                    (LOGIN_REGISTER_CODE, req.to_bytes())
                }
                Credentials::Token(token) => {
                    if token.expose().is_empty() || token.expose().len() > 255 {
                        return Err(IggyError::Malformed(
                            "the personal access token must be 1 to 255 bytes".to_owned(),
                        ));
                    }
                    let req = LoginRegisterWithPatRequest {
                        version_info,
                        token: SecretString::from(token.expose().to_owned()),
                        client_context: None,
                    };
                    (LOGIN_REGISTER_WITH_PAT_CODE, req.to_bytes())
                }
            };
            let reply = conn.call(code, &body).await?;
            let login = LoginRegisterResponse::decode_from(&reply)
                .map_err(|e| IggyError::Malformed(format!("login reply: {e}")))?;
            conn.state_mut().set_session(login.session);
            Ok(IggyClient {
                conn,
                last_request: Instant::now(),
                scratch: bytes::BytesMut::with_capacity(512),
            })
        })
        .await
        .map_err(|_| IggyError::Timeout("connect and login"))?
    }

    /// When the last request was sent.
    pub fn last_request(&self) -> Instant {
        self.last_request
    }

    /// Bounds every request by `until` as well (see [`Connection::cap_requests`]).
    pub fn cap_requests(&mut self, until: Option<Instant>) {
        self.conn.cap_requests(until);
    }

    /// This connection's client identity (id and request counter).
    pub fn identity(&self) -> Identity {
        self.conn.identity()
    }

    /// This connection's client id (its consumer-group member id).
    pub fn client_id(&self) -> u128 {
        self.conn.client_id()
    }

    async fn call(&mut self, code: u32, body: impl WireEncode) -> Result<Bytes, IggyError> {
        self.scratch.clear();
        body.encode(&mut self.scratch);
        let body = self.scratch.split().freeze();
        self.last_request = Instant::now();
        self.conn.call(code, &body).await
    }

    /// Marks the connection as one to a node of a cluster (see [`Connection::set_clustered`]).
    pub fn set_clustered(&mut self, clustered: bool) {
        self.conn.set_clustered(clustered);
    }

    /// The cluster's roster as this node sees it; `None` when the server runs alone (it
    /// answers with no nodes, or does not know the command).
    pub async fn cluster_metadata(&mut self) -> Result<Option<Roster>, IggyError> {
        let reply = self
            .call(GET_CLUSTER_METADATA_CODE, GetClusterMetadataRequest)
            .await;
        let body = match reply {
            Ok(body) => body,
            Err(IggyError::Status {
                code:
                    ResultCode::FeatureUnavailable
                    | ResultCode::InvalidCommand
                    | ResultCode::ResourceNotFound,
            }) => return Ok(None),
            Err(e) => return Err(e),
        };
        if body.is_empty() {
            return Ok(None);
        }
        let reply = ClusterMetadataResponse::decode_from(&body)
            .map_err(|e| IggyError::Malformed(format!("cluster metadata reply: {e}")))?;
        Ok(Roster::from_reply(reply))
    }

    /// Keeps the session alive.
    pub async fn ping(&mut self) -> Result<(), IggyError> {
        self.last_request = Instant::now();
        self.conn.call(PING_CODE, &[]).await.map(|_| ())
    }

    /// Whether the stream exists.
    pub async fn stream_exists(&mut self, stream: &WireIdentifier) -> Result<bool, IggyError> {
        let reply = self
            .call(
                GET_STREAM_CODE,
                GetStreamRequest {
                    stream_id: stream.clone(),
                },
            )
            .await;
        match reply {
            Ok(body) => Ok(!body.is_empty()),
            Err(IggyError::Status { code }) if code.is_missing_stream() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The topic's partitions, or `None` when the topic does not exist.
    pub async fn topic(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
    ) -> Result<Option<Vec<PartitionState>>, IggyError> {
        let reply = self
            .call(
                GET_TOPIC_CODE,
                GetTopicRequest {
                    stream_id: stream.clone(),
                    topic_id: topic.clone(),
                },
            )
            .await;
        let body = match reply {
            Ok(body) if body.is_empty() => return Ok(None),
            Ok(body) => body,
            Err(IggyError::Status { code }) if code.is_missing_topic() => return Ok(None),
            Err(e) => return Err(e),
        };
        let topic = GetTopicResponse::decode_from(&body)
            .map_err(|e| IggyError::Malformed(format!("get topic reply: {e}")))?;
        Ok(Some(
            topic
                .partitions
                .iter()
                .map(|p| PartitionState {
                    id: p.id,
                    current_offset: p.current_offset,
                    messages_count: p.messages_count,
                })
                .collect(),
        ))
    }

    /// Polls up to `count` messages of `partition` from `offset`, without auto-commit. The
    /// messages are appended to `messages`.
    pub async fn poll(
        &mut self,
        target: &Target,
        partition: u32,
        offset: u64,
        count: u32,
        messages: &mut Vec<Message>,
    ) -> Result<Polled, IggyError> {
        let body = self
            .call(
                POLL_MESSAGES_CODE,
                PollMessagesRequest {
                    consumer: target.consumer.clone(),
                    stream_id: target.stream.clone(),
                    topic_id: target.topic.clone(),
                    partition_id: Some(partition),
                    strategy: WirePollingStrategy::offset(offset),
                    count,
                    auto_commit: false,
                },
            )
            .await;
        let body = match body {
            Err(IggyError::Status {
                code: ResultCode::ConsumerGroupPartitionNotOwned,
            }) => {
                return Ok(Polled {
                    partition: poll::RESYNC_SENTINEL,
                    head: 0,
                });
            }
            other => other?,
        };
        let start = messages.len();
        let head = poll::decode(&body, messages)?;
        let (partition_id, head) = head.unwrap_or((partition, 0));
        if partition_id != partition && partition_id != poll::RESYNC_SENTINEL {
            messages.truncate(start);
            return Err(IggyError::Malformed(format!(
                "poll of partition {partition} answered for partition {partition_id}"
            )));
        }
        Ok(Polled {
            partition: partition_id,
            head,
        })
    }

    /// The stored offset of `target`'s consumer for the partition (the last processed offset), or
    /// `None` when nothing is stored.
    pub async fn stored_offset(
        &mut self,
        target: &Target,
        partition: u32,
    ) -> Result<Option<u64>, IggyError> {
        let body = self
            .call(
                GET_CONSUMER_OFFSET_CODE,
                GetConsumerOffsetRequest {
                    consumer: target.consumer.clone(),
                    stream_id: target.stream.clone(),
                    topic_id: target.topic.clone(),
                    partition_id: Some(partition),
                },
            )
            .await?;
        if body.is_empty() {
            return Ok(None);
        }
        let reply = ConsumerOffsetResponse::decode_from(&body)
            .map_err(|e| IggyError::Malformed(format!("consumer offset reply: {e}")))?;
        Ok(Some(reply.stored_offset))
    }

    /// Stores `offset` (the last processed offset) for `target`'s consumer.
    pub async fn store_offset(
        &mut self,
        target: &Target,
        partition: u32,
        offset: u64,
    ) -> Result<(), IggyError> {
        self.call(
            STORE_CONSUMER_OFFSET_CODE,
            StoreConsumerOffsetRequest {
                consumer: target.consumer.clone(),
                stream_id: target.stream.clone(),
                topic_id: target.topic.clone(),
                partition_id: Some(partition),
                offset,
                ack: AckLevel::default(),
            },
        )
        .await
        .map(|_| ())
    }

    /// Deletes the stored offset of `target`'s consumer for the partition (the next poll from the
    /// stored offset starts at the beginning); nothing stored is not an error.
    pub async fn delete_offset(
        &mut self,
        target: &Target,
        partition: u32,
    ) -> Result<(), IggyError> {
        let reply = self
            .call(
                DELETE_CONSUMER_OFFSET_CODE,
                DeleteConsumerOffsetRequest {
                    consumer: target.consumer.clone(),
                    stream_id: target.stream.clone(),
                    topic_id: target.topic.clone(),
                    partition_id: Some(partition),
                    ack: AckLevel::default(),
                },
            )
            .await;
        match reply {
            Ok(_) => Ok(()),
            Err(IggyError::Status {
                code: ResultCode::ConsumerOffsetNotFound,
            }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// How many members the consumer group has now (`None`: no such group).
    pub async fn group_members(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
    ) -> Result<Option<u32>, IggyError> {
        let reply = self
            .call(
                GET_CONSUMER_GROUP_CODE,
                GetConsumerGroupRequest {
                    stream_id: stream.clone(),
                    topic_id: topic.clone(),
                    group_id: group.clone(),
                },
            )
            .await;
        match reply {
            Ok(body) if body.is_empty() => Ok(None),
            Ok(body) => {
                let details = ConsumerGroupDetailsResponse::decode_from(&body)
                    .map_err(|e| IggyError::Malformed(format!("consumer group reply: {e}")))?;
                Ok(Some(details.group.members_count))
            }
            Err(IggyError::Status { code })
                if code.is_missing_topic()
                    || matches!(
                        code,
                        ResultCode::ConsumerGroupIdNotFound | ResultCode::ConsumerGroupNameNotFound
                    ) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Whether the consumer group exists (without joining it).
    pub async fn group_exists(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
    ) -> Result<bool, IggyError> {
        Ok(self.group_members(stream, topic, group).await?.is_some())
    }

    /// Joins a consumer group (which must exist).
    pub async fn join_group(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
    ) -> Result<(), IggyError> {
        self.call(
            JOIN_CONSUMER_GROUP_CODE,
            JoinConsumerGroupRequest {
                stream_id: stream.clone(),
                topic_id: topic.clone(),
                group_id: group.clone(),
            },
        )
        .await
        .map(|_| ())
    }

    /// Leaves a consumer group.
    pub async fn leave_group(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
    ) -> Result<(), IggyError> {
        self.call(
            LEAVE_CONSUMER_GROUP_CODE,
            LeaveConsumerGroupRequest {
                stream_id: stream.clone(),
                topic_id: topic.clone(),
                group_id: group.clone(),
            },
        )
        .await
        .map(|_| ())
    }

    /// This member's generation and pollable partitions; `None` when it is not a member.
    pub async fn sync_group(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
    ) -> Result<Option<(u64, Vec<u32>)>, IggyError> {
        let body = self
            .call(
                SYNC_CONSUMER_GROUP_CODE,
                SyncConsumerGroupRequest {
                    stream_id: stream.clone(),
                    topic_id: topic.clone(),
                    group_id: group.clone(),
                },
            )
            .await?;
        if body.is_empty() {
            return Ok(None);
        }
        let reply = SyncConsumerGroupResponse::decode_from(&body)
            .map_err(|e| IggyError::Malformed(format!("sync group reply: {e}")))?;
        Ok(Some((reply.generation, reply.partitions)))
    }
}

fn malformed(e: iggy_binary_protocol::WireError) -> IggyError {
    IggyError::Malformed(e.to_string())
}

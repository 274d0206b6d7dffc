//! What the session reports and refuses: its state, the completion of a message's flow, the
//! events of [`super::Session::handle`], and its errors.

use super::*;

/// The connection state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Disconnected,
    /// CONNECT sent, CONNACK not received.
    Connecting,
    Connected,
}

/// The end of a QoS 1/2 message's flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion<T> {
    pub token: T,
    pub packet_id: PacketId,
    pub qos: QoS,
    /// The message's payload size.
    pub payload_len: usize,
    /// The broker's reason code from PUBACK, PUBREC (when it refused) or PUBCOMP. On MQTT
    /// 3.1.1 always success. A code of 0x80 or more means the broker did not accept it.
    pub reason: ReasonCode,
    pub reason_string: Option<MqttStr>,
}

impl<T> Completion<T> {
    /// Whether the broker accepted the message.
    pub fn is_success(&self) -> bool {
        !self.reason.is_error()
    }
}

/// What a packet from the broker meant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event<T> {
    /// The broker accepted the connection; `resent` messages were queued again.
    Connected {
        session_present: bool,
        resent: usize,
    },
    /// A QoS 1/2 message's flow ended.
    Completed(Completion<T>),
    /// A message from the broker (acknowledgements were queued).
    Message(Publish),
    /// The broker closed the connection (MQTT 5); the session is now disconnected.
    Disconnected(Disconnect),
    /// An enhanced-authentication step for the caller.
    Auth(Auth),
    /// Answers to subscriptions the caller made with its own packets.
    SubAck(SubAck),
    UnsubAck(UnsubAck),
}

/// How a message went out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sent<T> {
    /// QoS 0: queued, and done once written; the token is handed back.
    AtMostOnce(T),
    /// QoS 1/2: tracked under this packet id until its [`Completion`].
    Tracked(PacketId),
}

/// Why a message could not be queued; the message and token are handed back.
#[derive(Clone, PartialEq, Eq)]
pub struct PublishError<T> {
    pub kind: PublishErrorKind,
    pub publish: Publish,
    pub token: T,
}

impl<T> fmt::Debug for PublishError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PublishError")
            .field("kind", &self.kind)
            .field("publish", &self.publish)
            .finish_non_exhaustive()
    }
}

impl<T> fmt::Display for PublishError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot publish to {:?}: {}",
            self.publish.topic, self.kind
        )
    }
}

impl<T> std::error::Error for PublishError<T> {}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishErrorKind {
    /// Not connected (or CONNACK not received yet): try again once connected.
    NotConnected,
    /// The window is full, or re-sends are still waiting: try again after a completion.
    WindowFull,
    /// The broker's Maximum QoS is lower than the message's (MQTT 5 CONNACK).
    QosNotSupported { maximum: QoS },
    /// The broker does not support retained messages (MQTT 5 CONNACK).
    RetainNotSupported,
    /// The message cannot be encoded (too large for the broker, a bad topic …).
    Encode(EncodeError),
}

impl fmt::Display for PublishErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PublishErrorKind::NotConnected => f.write_str("not connected"),
            PublishErrorKind::WindowFull => f.write_str("in-flight window full"),
            PublishErrorKind::QosNotSupported { maximum } => {
                write!(f, "the broker's Maximum QoS is {}", *maximum as u8)
            }
            PublishErrorKind::RetainNotSupported => {
                f.write_str("the broker does not support retained messages")
            }
            PublishErrorKind::Encode(e) => e.fmt(f),
        }
    }
}

impl PublishErrorKind {
    /// True when the message itself can never be sent on this connection (the sink's error
    /// policy decides), false when it only has to wait.
    pub fn is_permanent(&self) -> bool {
        !matches!(
            self,
            PublishErrorKind::NotConnected | PublishErrorKind::WindowFull
        )
    }
}

/// Errors that end the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionError {
    /// CONNACK with a failure code.
    ConnectionRefused {
        protocol: Protocol,
        code: ReasonCode,
        reason_string: Option<MqttStr>,
    },
    /// A packet that the broker may not send in this state.
    UnexpectedPacket { packet: PacketType, state: State },
    /// An acknowledgement for a packet id that is not waiting for it.
    UnknownPacketId {
        packet: PacketType,
        packet_id: PacketId,
    },
    /// No PINGRESP within the keep-alive interval.
    KeepAliveTimeout,
    /// Messages waited on the wire for the configured ack timeout and the broker sent nothing.
    AckTimeout {
        /// Messages (and PUBRELs) waiting for an answer.
        on_wire: usize,
        /// How long the broker was silent.
        waited: Duration,
    },
    /// The broker broke a rule of the protocol.
    ProtocolViolation(&'static str),
    /// A control packet could not be encoded (the broker's Maximum Packet Size is too small).
    Encode(EncodeError),
    /// `connect` called while connected or connecting.
    AlreadyConnected,
}

impl fmt::Display for SessionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SessionError::ConnectionRefused {
                protocol,
                code,
                reason_string,
            } => {
                let name = match protocol {
                    Protocol::V311 => code.v311_connack_name(),
                    Protocol::V5 => code.name(),
                };
                write!(f, "broker refused the connection: {name} ({:#04x})", code.0)?;
                if let Some(r) = reason_string {
                    write!(f, ": {r}")?;
                }
                Ok(())
            }
            SessionError::UnexpectedPacket { packet, state } => {
                write!(f, "protocol violation: unexpected {packet} while {state:?}")
            }
            SessionError::UnknownPacketId { packet, packet_id } => write!(
                f,
                "protocol violation: {packet} for packet id {packet_id} that is not in flight"
            ),
            SessionError::KeepAliveTimeout => f.write_str("no PINGRESP within the keep-alive"),
            SessionError::AckTimeout { on_wire, waited } => write!(
                f,
                "nothing from the broker for {waited:?} with {on_wire} message(s) waiting for \
                 acknowledgement (ack timeout)"
            ),
            SessionError::ProtocolViolation(what) => write!(f, "protocol violation: {what}"),
            SessionError::Encode(e) => write!(f, "cannot encode a control packet: {e}"),
            SessionError::AlreadyConnected => f.write_str("connect called while connected"),
        }
    }
}

impl std::error::Error for SessionError {}

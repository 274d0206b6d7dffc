//! Small protocol types: protocol version, QoS, packet identifiers.

use std::fmt;
use std::num::NonZeroU16;

/// A packet identifier: never zero (§2.3.1), so the type makes zero unrepresentable.
pub type PacketId = NonZeroU16;

/// The protocol version of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// MQTT 3.1.1 (protocol level 4).
    V311,
    /// MQTT 5.0 (protocol level 5).
    V5,
}

impl Protocol {
    /// The protocol level byte of CONNECT.
    pub fn level(self) -> u8 {
        match self {
            Protocol::V311 => 4,
            Protocol::V5 => 5,
        }
    }

    pub fn is_v5(self) -> bool {
        self == Protocol::V5
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::V311 => "MQTT 3.1.1",
            Protocol::V5 => "MQTT 5.0",
        })
    }
}

/// Quality of service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum QoS {
    #[default]
    AtMostOnce = 0,
    AtLeastOnce = 1,
    ExactlyOnce = 2,
}

impl QoS {
    /// `None` for 3, the value that is malformed everywhere.
    pub fn from_u8(v: u8) -> Option<QoS> {
        match v {
            0 => Some(QoS::AtMostOnce),
            1 => Some(QoS::AtLeastOnce),
            2 => Some(QoS::ExactlyOnce),
            _ => None,
        }
    }
}

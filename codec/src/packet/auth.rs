//! AUTH (MQTT 5 §3.15): extended authentication exchanges. It does not exist in 3.1.1.

use bytes::BytesMut;

use super::reason_body::{read_reason_and_properties, write_reason_and_properties};
use super::{EncodeOptions, PacketType};
use crate::error::{DecodeError, EncodeError};
use crate::properties::{Properties, PropertyContext};
use crate::reason::ReasonCode;
use crate::types::Protocol;
use crate::wire::Reader;

/// One step of an enhanced authentication exchange.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Auth {
    pub reason: ReasonCode,
    pub properties: Properties,
}

impl Auth {
    pub(crate) fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let (reason, properties) = read_reason_and_properties(r, PropertyContext::Auth)?;
        Ok(Auth { reason, properties })
    }

    pub(crate) fn write(
        &self,
        out: &mut BytesMut,
        opts: &EncodeOptions,
    ) -> Result<usize, EncodeError> {
        if opts.protocol == Protocol::V311 {
            return Err(EncodeError::NotInProtocol { what: "AUTH" });
        }
        write_reason_and_properties(
            out,
            opts,
            PacketType::Auth,
            self.reason,
            &self.properties,
            PropertyContext::Auth,
        )
    }
}

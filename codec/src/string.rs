//! UTF-8 encoded strings as MQTT defines them (§1.5.4 in both specifications): at most 65,535
//! bytes of well-formed UTF-8 without U+0000. `MqttStr` holds a `Bytes`, so a string decoded
//! from a packet is a slice of the packet buffer, not a copy.

use std::fmt;

use bytes::Bytes;

/// Why bytes are not an MQTT string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StringError {
    /// Longer than 65,535 bytes.
    TooLong(usize),
    /// Not well-formed UTF-8 (this also excludes the surrogates U+D800..U+DFFF).
    InvalidUtf8,
    /// Contains U+0000 (MQTT-1.5.4-2).
    NullCharacter,
}

impl fmt::Display for StringError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StringError::TooLong(n) => write!(f, "string of {n} bytes exceeds 65535"),
            StringError::InvalidUtf8 => f.write_str("string is not valid UTF-8"),
            StringError::NullCharacter => f.write_str("string contains U+0000"),
        }
    }
}

impl std::error::Error for StringError {}

/// A validated MQTT UTF-8 string backed by `Bytes`.
#[derive(Clone, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct MqttStr(Bytes);

impl MqttStr {
    /// The empty string.
    pub const fn empty() -> Self {
        MqttStr(Bytes::new())
    }

    /// Validates `bytes` and wraps them without copying.
    pub fn from_bytes(bytes: Bytes) -> Result<Self, StringError> {
        validate(&bytes)?;
        Ok(MqttStr(bytes))
    }

    /// Wraps bytes the caller has already validated (see [`validate`]).
    pub(crate) fn from_validated(bytes: Bytes) -> Self {
        debug_assert!(validate(&bytes).is_ok());
        MqttStr(bytes)
    }

    /// Copies `s` into a new string.
    #[allow(clippy::should_implement_trait)]
    pub fn from_str(s: &str) -> Result<Self, StringError> {
        validate(s.as_bytes())?;
        Ok(MqttStr(Bytes::copy_from_slice(s.as_bytes())))
    }

    /// Wraps a static string without copying.
    pub fn from_static(s: &'static str) -> Result<Self, StringError> {
        validate(s.as_bytes())?;
        Ok(MqttStr(Bytes::from_static(s.as_bytes())))
    }

    pub fn as_str(&self) -> &str {
        // SAFETY: every constructor validates that the bytes are well-formed UTF-8 and the
        // bytes are never mutated afterwards (`Bytes` is immutable).
        #[allow(unsafe_code)]
        unsafe {
            std::str::from_utf8_unchecked(&self.0)
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The underlying bytes (a cheap reference-counted handle).
    pub fn bytes(&self) -> &Bytes {
        &self.0
    }

    pub fn into_bytes(self) -> Bytes {
        self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Checks the rules of §1.5.4: length, UTF-8 well-formedness, no U+0000.
pub fn validate(bytes: &[u8]) -> Result<(), StringError> {
    if bytes.len() > u16::MAX as usize {
        return Err(StringError::TooLong(bytes.len()));
    }
    // ASCII fast path: most topics and identifiers are ASCII.
    if bytes.is_ascii() {
        if bytes.contains(&0) {
            return Err(StringError::NullCharacter);
        }
        return Ok(());
    }
    std::str::from_utf8(bytes).map_err(|_| StringError::InvalidUtf8)?;
    if bytes.contains(&0) {
        return Err(StringError::NullCharacter);
    }
    Ok(())
}

impl fmt::Debug for MqttStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for MqttStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl TryFrom<&str> for MqttStr {
    type Error = StringError;
    fn try_from(s: &str) -> Result<Self, StringError> {
        MqttStr::from_str(s)
    }
}

impl TryFrom<String> for MqttStr {
    type Error = StringError;
    fn try_from(s: String) -> Result<Self, StringError> {
        validate(s.as_bytes())?;
        Ok(MqttStr(Bytes::from(s)))
    }
}

impl PartialEq<str> for MqttStr {
    fn eq(&self, other: &str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl PartialEq<&str> for MqttStr {
    fn eq(&self, other: &&str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_null_and_bad_utf8() {
        assert_eq!(MqttStr::from_str("a\0b"), Err(StringError::NullCharacter));
        assert_eq!(
            MqttStr::from_bytes(Bytes::from_static(&[0xed, 0xa0, 0x80])),
            Err(StringError::InvalidUtf8),
            "a UTF-16 surrogate encoded in UTF-8 is not well-formed"
        );
        assert_eq!(
            MqttStr::from_bytes(Bytes::from(vec![b'a'; 65536])),
            Err(StringError::TooLong(65536))
        );
        assert_eq!(MqttStr::from_str("héllo/wörld").map(|s| s.len()), Ok(13));
    }
}

//! Topic aliases (MQTT 5 §3.3.2.3.4) for the topics this client publishes to. Aliases live
//! for one network connection, so the table is cleared on every reconnect; an alias is given
//! to each new topic until the broker's Topic Alias Maximum is reached, then topics go out in
//! full.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::num::NonZeroU16;

use bytes::Bytes;

/// FNV-1a: topics are short and chosen by our own configuration, so a fast non-keyed hash
/// is enough and keeps the lookup off the profile.
#[derive(Default)]
pub(crate) struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

/// What to do with a topic on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AliasUse {
    /// Send the topic as it is.
    None,
    /// Send the topic and bind it to this new alias.
    Assign(NonZeroU16),
    /// Send only the alias: the broker knows the topic.
    Reuse(NonZeroU16),
}

#[derive(Debug)]
pub(crate) struct Aliases {
    map: HashMap<Bytes, NonZeroU16, BuildHasherDefault<Fnv>>,
    /// Aliases this side may use on the current connection.
    max: u16,
}

impl std::fmt::Debug for Fnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Fnv")
    }
}

impl Aliases {
    pub(crate) fn new() -> Self {
        Aliases {
            map: HashMap::default(),
            max: 0,
        }
    }

    /// A new connection with the broker's Topic Alias Maximum (capped by ours).
    pub(crate) fn reset(&mut self, max: u16) {
        self.map.clear();
        self.max = max;
        self.map.reserve(max as usize);
    }

    pub(crate) fn lookup(&mut self, topic: &Bytes) -> AliasUse {
        if self.max == 0 || topic.is_empty() {
            return AliasUse::None;
        }
        if let Some(&a) = self.map.get(topic) {
            return AliasUse::Reuse(a);
        }
        let next = self.map.len() as u16 + 1;
        if next > self.max {
            return AliasUse::None;
        }
        match NonZeroU16::new(next) {
            Some(a) => AliasUse::Assign(a),
            None => AliasUse::None,
        }
    }

    /// Records an assignment once the packet that carries it has been encoded.
    pub(crate) fn commit(&mut self, topic: &Bytes, alias: NonZeroU16) {
        self.map.insert(topic.clone(), alias);
    }
}

//! A partition's marker: what is complete, who owns the partition, and which object ranges
//! are claimed. Its format and the fencing decisions, without IO (the sink reads and writes it
//! with conditional requests; see docs/architecture.md, "Ownership and fencing").
//!
//! The marker is the partition's log in the store. A member that takes a partition up writes
//! it with its own owner id and the next epoch, conditionally on the version it read
//! (`If-Match`, or `If-None-Match: *` when there was none). Every later write by that member
//! is conditional on the version it wrote last, so once another member took the partition
//! over, the old owner's writes are refused (412) and it learns it is fenced. An object's
//! range is written into the marker (a claim) before the object is completed, and objects are
//! completed with `If-None-Match: *`: a late completion by a fenced member can only write a
//! key its successor writes with the same range, and whichever comes second is refused.

use std::collections::HashMap;

use super::ledger::{Claim, Ledger};
use crate::template::key;

/// The key of the marker of `partition` of a sink, under the sink's prefix (one per sink and
/// partition).
pub(super) fn marker_key(
    prefix: &str,
    sink: &str,
    stream: &str,
    topic: &str,
    partition: u32,
) -> String {
    let mut k = String::from(prefix);
    k.push_str(".spillway/");
    for part in [sink, stream, topic] {
        key::escape_into(&mut k, part);
        k.push('/');
    }
    k.push_str(&format!("{partition}.json"));
    k
}

/// A partition's marker: the watermark, past it the last offset of the newest complete
/// object of each set of split values, the claims not complete yet, and the owner.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Marker {
    pub last: Option<u64>,
    pub done: HashMap<Vec<String>, u64>,
    /// Who wrote it (empty in a marker of a version before fencing).
    pub owner: String,
    /// Raised by one at every takeover.
    pub epoch: u64,
    pub claims: Vec<Claim>,
    /// The key of the newest object when it was written (for people reading it).
    pub object: String,
}

/// This member's hold on a partition's marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Fence {
    pub owner: String,
    pub epoch: u64,
    /// The ETag of the marker version this member wrote last (`None`: there is none yet).
    pub etag: Option<String>,
}

/// What a refused conditional write of the marker means, from the marker the store holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Refused {
    /// The store holds a version of this member's own (a write whose answer was lost, or
    /// one that failed here but was applied): carry on from its ETag.
    Ours,
    /// Another member took the partition over: this one stops writing it.
    TakenOver { owner: String, epoch: u64 },
}

impl Fence {
    /// A refused write, against the marker the store holds now.
    pub fn refused(&self, stored: &Marker) -> Refused {
        if stored.owner == self.owner && stored.epoch == self.epoch {
            Refused::Ours
        } else {
            Refused::TakenOver {
                owner: stored.owner.clone(),
                epoch: stored.epoch,
            }
        }
    }
}

impl Marker {
    /// The marker a member writes to take the partition over from `self` (the version it
    /// read, or the default when there was none): the same state, its owner and the next
    /// epoch.
    pub fn taken_over_by(&self, owner: &str) -> Marker {
        Marker {
            owner: owner.to_owned(),
            epoch: self.epoch + 1,
            ..self.clone()
        }
    }

    /// What the ledger says now, written by `fence`'s owner (`newest`: the last offset of
    /// the object just complete, if one is).
    pub fn of(ledger: &Ledger, fence: &Fence, newest: Option<u64>) -> Marker {
        #[cfg(debug_assertions)]
        if let Some(newest) = newest
            && std::env::var_os("SPILLWAY_FAULT_SPLIT_MARKER_FROM_NEWEST_OBJECT").is_some()
        {
            // A fault for the tests to show what this guards against: the marker taken from
            // the newest object alone passes offsets still in other open objects.
            return Marker {
                last: Some(newest),
                owner: fence.owner.clone(),
                epoch: fence.epoch,
                ..Marker::default()
            };
        }
        let _ = newest;
        let last = ledger.watermark();
        let done = ledger
            .done
            .iter()
            .filter(|&(_, &o)| last.is_none_or(|w| o > w))
            .map(|(v, &o)| (v.clone(), o))
            .collect();
        let mut claims = ledger.claims.clone();
        claims.sort();
        Marker {
            last,
            done,
            owner: fence.owner.clone(),
            epoch: fence.epoch,
            claims,
            object: String::new(),
        }
    }

    /// `{"last_offset": N or null, "object": KEY, "owner": ID, "epoch": N, "claims": [...],
    /// "split": [{"values": [...], "last_offset": N}]}` (`owner` and `epoch` once fenced,
    /// `claims` and `split` only when there are any), sorted so that equal markers are equal
    /// bytes.
    pub fn to_json(&self, object: &str) -> Vec<u8> {
        let mut body = Vec::with_capacity(128);
        body.extend_from_slice(b"{\"last_offset\":");
        match self.last {
            Some(o) => body.extend_from_slice(o.to_string().as_bytes()),
            None => body.extend_from_slice(b"null"),
        }
        body.extend_from_slice(b",\"object\":");
        crate::json::string(&mut body, object.as_bytes());
        if !self.owner.is_empty() {
            body.extend_from_slice(b",\"owner\":");
            crate::json::string(&mut body, self.owner.as_bytes());
            body.extend_from_slice(format!(",\"epoch\":{}", self.epoch).as_bytes());
        }
        if !self.claims.is_empty() {
            body.extend_from_slice(b",\"claims\":[");
            for (i, c) in self.claims.iter().enumerate() {
                if i > 0 {
                    body.push(b',');
                }
                body.extend_from_slice(
                    format!("{{\"first\":{},\"last\":{},\"key\":", c.first, c.last).as_bytes(),
                );
                crate::json::string(&mut body, c.key.as_bytes());
                body.extend_from_slice(b",\"values\":");
                values_json(&mut body, &c.values);
                body.push(b'}');
            }
            body.push(b']');
        }
        if !self.done.is_empty() {
            let mut marks: Vec<_> = self.done.iter().collect();
            marks.sort();
            body.extend_from_slice(b",\"split\":[");
            for (i, (values, last)) in marks.into_iter().enumerate() {
                if i > 0 {
                    body.push(b',');
                }
                body.extend_from_slice(b"{\"values\":");
                values_json(&mut body, values);
                body.extend_from_slice(format!(",\"last_offset\":{last}}}").as_bytes());
            }
            body.push(b']');
        }
        body.push(b'}');
        body
    }
}

fn values_json(body: &mut Vec<u8>, values: &[String]) {
    body.push(b'[');
    for (j, v) in values.iter().enumerate() {
        if j > 0 {
            body.push(b',');
        }
        crate::json::string(body, v.as_bytes());
    }
    body.push(b']');
}

fn strings(v: &serde_json::Value, what: &str) -> Result<Vec<String>, String> {
    v.as_array()
        .and_then(|vs| {
            vs.iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
        })
        .ok_or_else(|| format!("{what} without its values (strings)"))
}

/// Reads a marker body (see [`Marker::to_json`]); a marker of an earlier version (no owner,
/// no claims) reads as epoch 0 of nobody.
pub(super) fn parse_marker(body: &[u8]) -> Result<Marker, String> {
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let last = match &v["last_offset"] {
        serde_json::Value::Null if v.get("last_offset").is_some() => None,
        o => Some(o.as_u64().ok_or_else(|| "no last_offset".to_owned())?),
    };
    let mut done = HashMap::new();
    if let Some(split) = v.get("split") {
        let marks = split
            .as_array()
            .ok_or_else(|| "split is not a list".to_owned())?;
        for mark in marks {
            let values = strings(&mark["values"], "a split mark")?;
            let last = mark["last_offset"]
                .as_u64()
                .ok_or_else(|| "a split mark without its last_offset".to_owned())?;
            done.insert(values, last);
        }
    }
    let owner = match v.get("owner") {
        None => String::new(),
        Some(o) => o
            .as_str()
            .ok_or_else(|| "owner is not a string".to_owned())?
            .to_owned(),
    };
    let epoch = match v.get("epoch") {
        None => 0,
        Some(e) => e
            .as_u64()
            .ok_or_else(|| "epoch is not a number".to_owned())?,
    };
    let mut claims = Vec::new();
    if let Some(list) = v.get("claims") {
        let list = list
            .as_array()
            .ok_or_else(|| "claims is not a list".to_owned())?;
        for c in list {
            let first = c["first"]
                .as_u64()
                .ok_or_else(|| "a claim without its first offset".to_owned())?;
            let last = c["last"]
                .as_u64()
                .ok_or_else(|| "a claim without its last offset".to_owned())?;
            let key = c["key"]
                .as_str()
                .ok_or_else(|| "a claim without its key".to_owned())?
                .to_owned();
            if last < first || key.is_empty() {
                return Err(format!("a claim of {first}..={last} under {key:?}"));
            }
            let values = strings(&c["values"], "a claim")?;
            claims.push(Claim {
                first,
                last,
                values,
                key,
            });
        }
        claims.sort();
    }
    let object = v["object"].as_str().unwrap_or_default().to_owned();
    Ok(Marker {
        last,
        done,
        owner,
        epoch,
        claims,
        object,
    })
}

/// The owner id of this process's writers: host, process id, the sink's shard and a random
/// part (a restart with the same process id is another owner).
pub(super) fn owner_id(shard: usize) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".to_owned());
    format!(
        "{host}/{}/{shard}/{:08x}",
        std::process::id(),
        fastrand::u32(..)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A takeover keeps the state and raises the epoch; a refused write is this member's own
    /// only with its owner id and epoch, anything else fences it.
    #[test]
    fn takeovers_raise_the_epoch_and_refusals_tell_ours_from_a_successor() {
        let old = Marker {
            last: Some(41),
            owner: "a".to_owned(),
            epoch: 6,
            claims: vec![Claim {
                first: 42,
                last: 50,
                values: Vec::new(),
                key: "k42".to_owned(),
            }],
            ..Marker::default()
        };
        let new = old.taken_over_by("b");
        assert_eq!((new.owner.as_str(), new.epoch), ("b", 7));
        assert_eq!((new.last, &new.claims), (old.last, &old.claims));
        let fence = Fence {
            owner: "b".to_owned(),
            epoch: 7,
            etag: Some("e".to_owned()),
        };
        assert_eq!(fence.refused(&new), Refused::Ours);
        assert_eq!(
            fence.refused(&new.taken_over_by("c")),
            Refused::TakenOver {
                owner: "c".to_owned(),
                epoch: 8
            }
        );
        assert_eq!(
            fence.refused(&new.taken_over_by("b")),
            Refused::TakenOver {
                owner: "b".to_owned(),
                epoch: 8
            },
            "the same owner id at a later epoch is another takeover (a restart)"
        );
        let none = Marker::default().taken_over_by("a");
        assert_eq!(none.epoch, 1, "the first owner of a partition");
    }
}

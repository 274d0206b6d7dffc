//! The numbers the engine passes around, each its own type: a partition id is not an offset,
//! and a slot (the runner's index of a partition) is neither.

use std::fmt;

/// An Iggy partition id (1-based on the server).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionId(pub u32);

/// An offset within one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Offset(pub u64);

/// The index of a partition among one runner's partitions: what sinks report outcomes by.
/// Stable while the partition is owned; reused after it is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slot(pub usize);

impl Offset {
    /// The offset after this one.
    pub fn next(self) -> Offset {
        Offset(self.0.saturating_add(1))
    }
}

impl fmt::Display for PartitionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

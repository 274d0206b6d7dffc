//! S3's multipart limits and the part plan, checked before any request is sent: parts of
//! 5 MiB to 5 GiB (the last may be smaller), at most 10,000 parts, objects of at most 5 TiB,
//! and single PutObject requests of at most 5 GiB.

use crate::error::Error;

pub const MIB: u64 = 1024 * 1024;
/// The smallest part but the last.
pub const MIN_PART_SIZE: u64 = 5 * MIB;
/// The largest part.
pub const MAX_PART_SIZE: u64 = 5 * 1024 * MIB;
/// Parts per upload.
pub const MAX_PARTS: u32 = 10_000;
/// The largest object.
pub const MAX_OBJECT_SIZE: u64 = 5 * 1024 * 1024 * MIB;
/// The largest single PutObject.
pub const MAX_PUT_SIZE: u64 = 5 * 1024 * MIB;

/// How an object is cut into parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartPlan {
    part_size: u64,
}

impl PartPlan {
    /// Checks `part_size` against S3's limits; the error names the setting.
    pub fn new(part_size: u64) -> Result<Self, Error> {
        if !(MIN_PART_SIZE..=MAX_PART_SIZE).contains(&part_size) {
            return Err(Error::Config(format!(
                "part_size {part_size} is outside S3's range of {MIN_PART_SIZE} (5 MiB) to \
                 {MAX_PART_SIZE} (5 GiB)"
            )));
        }
        Ok(PartPlan { part_size })
    }

    pub fn part_size(&self) -> u64 {
        self.part_size
    }

    /// The largest object this plan can upload: 10,000 parts, and S3's 5 TiB.
    pub fn max_object_size(&self) -> u64 {
        (self.part_size * u64::from(MAX_PARTS)).min(MAX_OBJECT_SIZE)
    }

    /// Whether an object of `size` bytes so far can take `more` bytes without breaking a
    /// limit. When it cannot, the caller closes the object and starts the next one.
    pub fn fits(&self, size: u64, more: u64) -> bool {
        size.checked_add(more)
            .is_some_and(|total| total <= self.max_object_size())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_sizes_outside_the_limits_are_config_errors() {
        assert!(PartPlan::new(MIN_PART_SIZE - 1).is_err());
        assert!(PartPlan::new(MAX_PART_SIZE + 1).is_err());
        let e = PartPlan::new(1024)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("part_size 1024"), "{e}");
        assert!(PartPlan::new(8 * MIB).is_ok());
    }

    #[test]
    fn objects_roll_over_at_ten_thousand_parts_or_five_tib() {
        let p = PartPlan::new(8 * MIB).unwrap_or(PartPlan { part_size: 8 * MIB });
        assert_eq!(p.max_object_size(), 80_000 * MIB);
        assert!(p.fits(80_000 * MIB - 10, 10));
        assert!(!p.fits(80_000 * MIB - 10, 11));
        let big = PartPlan::new(MAX_PART_SIZE).unwrap_or(PartPlan { part_size: MIB });
        assert_eq!(big.max_object_size(), MAX_OBJECT_SIZE);
        assert!(!big.fits(u64::MAX, 1));
    }
}

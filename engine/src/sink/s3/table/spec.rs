//! The table's partition spec (`s3.iceberg.partition_by`) on the shards' side: the key its data
//! files are written under, so that one file holds one partition value, and each file's values.
//!
//! A file holds one value of each partition field because the sink cuts its objects so:
//! - identity on a typed column: the key splits the partition's messages by that column's JSON
//!   value (`{json./POINTER}`), one open object per value;
//! - identity on `partition` (Iggy's): one writer per partition;
//! - day or hour of a timestamp: the column is the sink's time source (`s3.time_source`) and
//!   `record_interval` divides the day or hour, so a message of another interval closes the
//!   object; the value is then the interval of the object's first message.

use crate::config::{ColumnType, ParquetColumn, PartitionField, PartitionTransform, S3SinkConfig};
use crate::template::key::KeyTemplate;

const HOUR_MICROS: u64 = 3_600_000_000;
const DAY_MICROS: u64 = 24 * HOUR_MICROS;

/// A partition value of a data file, as Iceberg types it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PartValue {
    /// `string` (identity of a string column).
    Text(String),
    /// `long` (identity of an int64 column).
    Long(i64),
    /// `boolean`.
    Bool(bool),
    /// `int`: identity of Iggy's partition, or hours since the epoch (`hour`).
    Int(i32),
    /// `date`: days since the epoch (`day`).
    Date(i32),
}

/// Where a partition field's value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ValueSource {
    /// The object's split value at this index (of the key's `{json.…}` fields), typed so.
    Split(usize, ColumnType),
    /// The Iggy partition.
    Partition,
    /// The day of the object's first message's time.
    Day,
    /// Its hour.
    Hour,
}

/// The key of the data files when `s3.key` is left as it is: a directory per partition value
/// (as Iceberg's own writers name them), then the partition and first offset.
pub(crate) fn default_key(spec: &[PartitionField], columns: &[ParquetColumn]) -> String {
    let mut key = String::new();
    for f in spec {
        match f.transform {
            PartitionTransform::Identity if f.column == "partition" => {
                key.push_str("partition={partition}/");
            }
            PartitionTransform::Identity => {
                if let Some(c) = columns.iter().find(|c| c.name == f.column) {
                    key.push_str(&format!("{}={{json.{}}}/", f.column, c.pointer));
                }
            }
            PartitionTransform::Day => key.push_str(&format!("{}={{date}}/", f.name())),
            PartitionTransform::Hour => {
                key.push_str(&format!("{}={{date}}-{{hour}}/", f.name()));
            }
        }
    }
    key.push_str("{partition}-{first_offset}.{ext}");
    key
}

/// The interval `record_interval` takes in a table with `spec`: its own when set, else the
/// finest time transform's (one hour or one day); `None` for a spec without one.
pub(crate) fn record_interval(spec: &[PartitionField]) -> Option<std::time::Duration> {
    let finest = spec
        .iter()
        .filter_map(|f| match f.transform {
            PartitionTransform::Hour => Some(HOUR_MICROS),
            PartitionTransform::Day => Some(DAY_MICROS),
            PartitionTransform::Identity => None,
        })
        .min()?;
    Some(std::time::Duration::from_micros(finest))
}

/// Where each field of `cfg`'s spec takes its value from, given the data files' `key`; the
/// problem when the key does not split by an identity column.
pub(crate) fn sources(cfg: &S3SinkConfig, key: &KeyTemplate) -> Result<Vec<ValueSource>, String> {
    let Some(t) = &cfg.iceberg else {
        return Ok(Vec::new());
    };
    let pointers = key.split_pointers();
    t.partition_by
        .iter()
        .map(|f| match f.transform {
            PartitionTransform::Day => Ok(ValueSource::Day),
            PartitionTransform::Hour => Ok(ValueSource::Hour),
            PartitionTransform::Identity if f.column == "partition" => Ok(ValueSource::Partition),
            PartitionTransform::Identity => {
                let c = cfg
                    .parquet
                    .columns
                    .iter()
                    .find(|c| c.name == f.column)
                    .ok_or_else(|| format!("no column {:?}", f.column))?;
                let index = pointers
                    .iter()
                    .position(|p| *p == Some(c.pointer.as_str()))
                    .ok_or_else(|| {
                        format!(
                            "s3.key must split by the partition column {:?}: put {{json.{}}} in it",
                            c.name, c.pointer
                        )
                    })?;
                Ok(ValueSource::Split(index, c.kind))
            }
        })
        .collect()
}

/// The partition values of a file of Iggy partition `partition` whose split values are `split`
/// and whose first message's time is `micros`.
pub(crate) fn values(
    sources: &[ValueSource],
    split: &[String],
    partition: u32,
    micros: u64,
) -> Result<Vec<PartValue>, String> {
    let int = |v: u64, what: &str| {
        i32::try_from(v).map_err(|_| format!("the {what} {v} is past Iceberg's int"))
    };
    sources
        .iter()
        .map(|s| match s {
            ValueSource::Partition => int(u64::from(partition), "partition").map(PartValue::Int),
            ValueSource::Day => int(micros / DAY_MICROS, "day").map(PartValue::Date),
            ValueSource::Hour => int(micros / HOUR_MICROS, "hour").map(PartValue::Int),
            ValueSource::Split(i, kind) => {
                let text = split
                    .get(*i)
                    .ok_or_else(|| "the object lacks a split value".to_owned())?;
                match kind {
                    ColumnType::Int64 => text
                        .parse::<i64>()
                        .map(PartValue::Long)
                        .map_err(|_| format!("{text:?} is not an int64 partition value")),
                    ColumnType::Boolean => text
                        .parse::<bool>()
                        .map(PartValue::Bool)
                        .map_err(|_| format!("{text:?} is not a boolean partition value")),
                    _ => Ok(PartValue::Text(text.clone())),
                }
            }
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn field(text: &str) -> PartitionField {
        PartitionField::parse(text).unwrap()
    }

    fn column(name: &str, pointer: &str, kind: ColumnType) -> ParquetColumn {
        ParquetColumn {
            name: name.to_owned(),
            pointer: pointer.to_owned(),
            kind,
            required: true,
        }
    }

    #[test]
    fn a_spec_makes_a_key_that_cuts_one_value_per_file_and_the_files_values() {
        let columns = [
            column("region", "/region", ColumnType::String),
            column("tenant", "/t/id", ColumnType::Int64),
        ];
        let spec = [
            field("region"),
            field("identity(tenant)"),
            field("hour(timestamp)"),
        ];
        let text = default_key(&spec, &columns);
        assert_eq!(
            text,
            "region={json./region}/tenant={json./t/id}/timestamp_hour={date}-{hour}/\
             {partition}-{first_offset}.{ext}"
        );
        let key = KeyTemplate::parse(&text).unwrap();
        let mut cfg: S3SinkConfig = toml::from_str(
            "bucket = \"b\"\nformat = \"parquet\"\n[iceberg]\ncatalog = \"sql\"\n\
             uri = \"sqlite:///c\"\nnamespace = \"n\"\ntable = \"t\"\n\
             partition_by = [\"region\", \"identity(tenant)\", \"hour(timestamp)\"]",
        )
        .unwrap();
        cfg.parquet.columns = columns.to_vec();
        let found = sources(&cfg, &key).unwrap();
        assert_eq!(
            found,
            [
                ValueSource::Split(0, ColumnType::String),
                ValueSource::Split(1, ColumnType::Int64),
                ValueSource::Hour
            ]
        );
        // 2026-12-07T05:30:00Z
        let micros = 1_796_621_400_000_000;
        let split = ["eu".to_owned(), "42".to_owned()];
        assert_eq!(
            values(&found, &split, 3, micros).unwrap(),
            [
                PartValue::Text("eu".to_owned()),
                PartValue::Long(42),
                PartValue::Int(499_061)
            ]
        );
        assert!(values(&found, &["eu".to_owned(), "x".to_owned()], 3, micros).is_err());
        assert_eq!(
            values(&[ValueSource::Day, ValueSource::Partition], &[], 3, micros).unwrap(),
            [PartValue::Date(20_794), PartValue::Int(3)]
        );
        assert_eq!(
            record_interval(&spec),
            Some(std::time::Duration::from_secs(3600))
        );
        assert_eq!(
            record_interval(&[field("day(ts)")]),
            Some(std::time::Duration::from_secs(86_400))
        );
        assert_eq!(record_interval(&[field("region")]), None);
        // A key of the user's that does not split by an identity column.
        let plain = KeyTemplate::parse("{partition}-{first_offset}.{ext}").unwrap();
        assert!(
            sources(&cfg, &plain)
                .unwrap_err()
                .contains("{json./region}")
        );
    }

    #[test]
    fn partition_fields_parse_and_name_their_mistakes() {
        assert_eq!(field("day(ts)").transform, PartitionTransform::Day);
        assert_eq!(field(" hour( ts ) ").column, "ts");
        assert_eq!(field("day(ts)").name(), "ts_day");
        assert_eq!(field("region").name(), "region");
        for bad in ["month(ts)", "day(ts", "day()", ""] {
            assert!(PartitionField::parse(bad).is_err(), "{bad}");
        }
        assert!(
            PartitionField::parse("bucket(4, id)")
                .unwrap_err()
                .contains("identity, day or hour")
        );
    }
}

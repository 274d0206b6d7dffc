//! `format = "parquet"` in a build without the `parquet` feature: the writer cannot be made
//! (the config check refuses the format first, naming the build), so nothing below runs.

use crate::config::ParquetConfig;
use crate::message::{Message, PartitionInfo};

const OFF: &str = "this spillway was built without Parquet (the `parquet` feature)";

/// Never made: [`ParquetWriter::new`] says why.
pub(super) struct ParquetWriter(std::convert::Infallible);

impl ParquetWriter {
    pub(super) fn new(_: &ParquetConfig, _: bool, _: bool) -> Result<Self, String> {
        Err(OFF.to_owned())
    }

    pub(super) fn begin(&mut self) -> Result<Vec<u8>, String> {
        match self.0 {}
    }

    pub(super) fn admit(&mut self, _: &Message) -> Result<(), String> {
        match self.0 {}
    }

    pub(super) fn push(&mut self, _: &PartitionInfo, _: &Message) -> Result<(), String> {
        match self.0 {}
    }

    pub(super) fn row_group_full(&self) -> bool {
        match self.0 {}
    }

    pub(super) fn held(&self) -> u64 {
        match self.0 {}
    }

    pub(super) fn flush(&mut self) -> Result<Vec<u8>, String> {
        match self.0 {}
    }

    pub(super) fn finish(&mut self) -> Result<Vec<u8>, String> {
        match self.0 {}
    }
}

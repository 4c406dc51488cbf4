//! The pure core: data and decisions. No I/O, no clock reads, runs nothing.

pub mod batch;
pub mod capped;
pub mod compat;
pub mod degraded;
pub mod doctor;
pub mod known;
pub mod listing;
pub mod policy;
pub mod protocol;
pub mod reap_end;
pub mod records;
pub mod report;
pub mod schema;
pub mod time;
pub mod units;

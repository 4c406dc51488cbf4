//! The clock: this process's reading of the time, in ms since the epoch.

pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

//! Time stamps: the bottom of the house.

pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

pub fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

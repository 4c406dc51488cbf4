//! Time formatting: a time stamp (ms since the epoch) as people and files read it. Reads no clock.

/// Unix milliseconds as RFC 3339 (UTC, milliseconds); the epoch for a time out of chrono's range.
pub fn rfc3339(ms: i64) -> String {
    rfc3339_checked(ms).unwrap_or_else(|| "1970-01-01T00:00:00.000Z".to_string())
}

/// Unix milliseconds as RFC 3339 (UTC, milliseconds), `None` for a time out of chrono's range:
/// the schema's points in time.
pub fn rfc3339_checked(ms: i64) -> Option<String> {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
}

//! The studio's liveness registries (`CCS_ACTIVITY_FILES`).
//!
//! Each file is one JSON object; each key is a registry whose value is an array of entries: an id
//! string, or an object with `id` (or `sessionId`, `chatId`) and an optional `status`. An entry
//! marks its id busy unless its status is terminal. Anything we cannot read makes the whole sweep
//! keep everything: a registry we cannot trust cannot tell us a chat is idle.

use std::collections::HashSet;
use std::path::Path;

use serde_json::Value;

/// Statuses that mean "this entry no longer holds its chat busy".
const TERMINAL: &[&str] = &[
    "done",
    "completed",
    "cancelled",
    "canceled",
    "failed",
    "error",
];

#[derive(Debug, thiserror::Error)]
pub enum ActivityError {
    #[error("failed to read activity file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("activity file {path} is malformed: {why}")]
    Malformed { path: String, why: String },
}

/// Parse one file's text into the busy ids it lists.
pub fn parse(text: &str, path: &str) -> Result<HashSet<String>, ActivityError> {
    let bad = |why: String| ActivityError::Malformed {
        path: path.to_string(),
        why,
    };
    let v: Value = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    let obj = v
        .as_object()
        .ok_or_else(|| bad("the top level is not a JSON object".into()))?;
    let mut busy = HashSet::new();
    for (key, reg) in obj {
        let entries = reg
            .as_array()
            .ok_or_else(|| bad(format!("registry {key:?} is not an array")))?;
        for (i, e) in entries.iter().enumerate() {
            match e {
                Value::String(id) => {
                    busy.insert(id.clone());
                }
                Value::Object(o) => {
                    let id = ["id", "sessionId", "chatId"]
                        .iter()
                        .find_map(|k| o.get(*k))
                        .and_then(|v| match v {
                            Value::String(s) => Some(s.clone()),
                            Value::Number(n) => Some(n.to_string()),
                            _ => None,
                        })
                        .ok_or_else(|| bad(format!("{key}[{i}] has no id, sessionId or chatId")))?;
                    let terminal = match o.get("status") {
                        None | Some(Value::Null) => false,
                        Some(Value::String(s)) => {
                            TERMINAL.contains(&s.to_ascii_lowercase().as_str())
                        }
                        Some(_) => false,
                    };
                    if !terminal {
                        busy.insert(id);
                    }
                }
                _ => return Err(bad(format!("{key}[{i}] is neither an id nor an object"))),
            }
        }
    }
    Ok(busy)
}

/// Read every configured file. Any failure is an error naming the file.
pub fn read_all(paths: &[impl AsRef<Path>]) -> Result<HashSet<String>, ActivityError> {
    let mut busy = HashSet::new();
    for p in paths {
        let p = p.as_ref();
        let name = p.display().to_string();
        let text = std::fs::read_to_string(p).map_err(|source| ActivityError::Read {
            path: name.clone(),
            source,
        })?;
        busy.extend(parse(&text, &name)?);
    }
    Ok(busy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registries_table() {
        let table: &[(&str, &[&str])] = &[
            (r#"{}"#, &[]),
            (r#"{"activeTasks": []}"#, &[]),
            (r#"{"activeTasks": ["a", "b"]}"#, &["a", "b"]),
            (r#"{"kanban": [{"id": "a", "status": "running"}]}"#, &["a"]),
            (r#"{"kanban": [{"sessionId": "a"}]}"#, &["a"]),
            (r#"{"kanban": [{"chatId": 7, "status": null}]}"#, &["7"]),
            (
                r#"{"kanban": [{"id": "a", "status": "done"}, {"id": "b", "status": "Completed"}]}"#,
                &[],
            ),
            (
                r#"{"x": [{"id": "a", "status": "cancelled"}, {"id": "b", "status": "canceled"}, {"id": "c", "status": "failed"}, {"id": "d", "status": "error"}]}"#,
                &[],
            ),
            (
                r#"{"x": [{"id": "a", "status": "weird-new-status"}]}"#,
                &["a"],
            ),
            (r#"{"x": ["a"], "y": [{"id": "b"}]}"#, &["a", "b"]),
        ];
        for (text, want) in table {
            let got = parse(text, "f").unwrap_or_else(|e| panic!("{text}: {e}"));
            let want: HashSet<String> = want.iter().map(|s| s.to_string()).collect();
            assert_eq!(got, want, "{text}");
        }
    }

    #[test]
    fn malformed_table() {
        for text in [
            "",
            "{",
            "[]",
            r#"{"activeTasks": "a"}"#,
            r#"{"activeTasks": [1]}"#,
            r#"{"activeTasks": [{"status": "running"}]}"#,
            r#"{"activeTasks": [{"id": true}]}"#,
        ] {
            let e = parse(text, "/x/act.json").expect_err(text);
            assert!(e.to_string().contains("/x/act.json"), "{e}");
        }
    }

    #[test]
    fn missing_file_is_named() {
        let e = read_all(&["/nonexistent/ccs-act.json"]).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/ccs-act.json"));
    }
}

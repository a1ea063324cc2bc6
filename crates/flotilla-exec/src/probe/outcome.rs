//! What every check answers with ([`ProbeOutcome`]), built by a [`Recorder`] that
//! times the check and redacts resolved secrets, and the evidence's text helpers.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::{Duration, Instant};

/// Longest body excerpt kept in [`ProbeOutcome::detail`], in bytes.
pub const BODY_EXCERPT_BYTES: usize = 512;

/// The result of one check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeOutcome {
    /// Whether the check passed.
    pub passed: bool,
    /// The check cannot pass as configured (bad regex, unknown secret, empty argv,
    /// missing command, no identity for a `process` check…): retrying is pointless.
    /// [`wait_ready`](super::wait_ready) gives up at once on such an outcome.
    pub misconfigured: bool,
    /// One short human line, e.g.
    /// `GET http://127.0.0.1:8080/health → 503 Service Unavailable (12 ms)`,
    /// `connect 127.0.0.1:8080: connection refused (0 ms)`,
    /// `pid 4242 alive (identity matches)`, `log line 17 matched /listening/`.
    pub evidence: String,
    /// How long the check took (serialised as fractional milliseconds, `latency_ms`).
    #[serde(rename = "latency_ms", with = "crate::serde_ms")]
    pub latency: Duration,
    /// When the check started, in milliseconds since the Unix epoch.
    pub checked_at_ms: u64,
    /// Machine-readable facts: `{"kind": "http", "status": 503, "body_excerpt": "…"}`
    /// and the like (body excerpts ≤ 512 bytes, secret values replaced by
    /// `[secret NAME]`).
    pub detail: Value,
}

/// `d` in whole milliseconds (`12 ms`).
pub(super) fn ms(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

/// `d` in milliseconds below a second, else in seconds (`1.5 s`).
pub(super) fn human(d: Duration) -> String {
    if d.as_millis() < 1000 {
        ms(d)
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// Builds outcomes for one check, timing from its creation.
pub(super) struct Recorder {
    /// When the check started.
    pub(super) t0: Instant,
    /// The same, in milliseconds since the Unix epoch.
    pub(super) at: u64,
    /// (name, value) of secrets resolved for this check, to redact.
    pub(super) secrets: Vec<(String, String)>,
}

impl Recorder {
    /// A recorder for a check starting now.
    pub(super) fn new() -> Self {
        Recorder {
            t0: Instant::now(),
            at: crate::this_process::now_ms().max(0) as u64,
            secrets: Vec::new(),
        }
    }
    /// `text` with every resolved secret's value replaced by `[secret NAME]`.
    pub(super) fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (name, value) in &self.secrets {
            if !value.is_empty() {
                out = out.replace(value.as_str(), &format!("[secret {name}]"));
            }
        }
        out
    }
    /// [`Recorder::redact`] over every string in `v`.
    pub(super) fn redact_value(&self, v: Value) -> Value {
        if self.secrets.is_empty() {
            return v;
        }
        match v {
            Value::String(s) => Value::String(self.redact(&s)),
            Value::Array(a) => Value::Array(a.into_iter().map(|x| self.redact_value(x)).collect()),
            Value::Object(o) => Value::Object(
                o.into_iter()
                    .map(|(k, x)| (k, self.redact_value(x)))
                    .collect(),
            ),
            other => other,
        }
    }
    /// The outcome, redacted, timed until now.
    pub(super) fn done(&self, passed: bool, evidence: String, detail: Value) -> ProbeOutcome {
        ProbeOutcome {
            passed,
            misconfigured: false,
            evidence: self.redact(&evidence),
            latency: self.t0.elapsed(),
            checked_at_ms: self.at,
            detail: self.redact_value(detail),
        }
    }
    /// A failed outcome that retrying cannot fix.
    pub(super) fn misconfigured(&self, evidence: String, detail: Value) -> ProbeOutcome {
        ProbeOutcome {
            misconfigured: true,
            ..self.done(false, evidence, detail)
        }
    }
}

/// At most [`BODY_EXCERPT_BYTES`] of `body` as text, never splitting a character.
pub(super) fn excerpt(body: &[u8]) -> String {
    let mut end = body.len().min(BODY_EXCERPT_BYTES);
    let text = loop {
        match std::str::from_utf8(&body[..end]) {
            Ok(t) => break t.to_string(),
            Err(e) if e.valid_up_to() > 0 && end - e.valid_up_to() < 4 => end = e.valid_up_to(),
            Err(_) => break String::from_utf8_lossy(&body[..end]).into_owned(),
        }
    };
    text
}

/// `s`, or its first 77 bytes (on a character boundary) and `…` when longer than 80.
pub(super) fn ellipsize(s: String) -> String {
    if s.len() <= 80 {
        return s;
    }
    let mut end = 77;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn excerpt_respects_utf8_and_limit() {
        let body = "é".repeat(400);
        let e = excerpt(body.as_bytes());
        assert!(e.len() <= BODY_EXCERPT_BYTES && e.chars().all(|c| c == 'é'));
    }

    #[test]
    fn redaction() {
        let mut rec = Recorder::new();
        rec.secrets.push(("KEY".into(), "s3cret".into()));
        let out = rec.done(
            true,
            "saw s3cret".into(),
            json!({"body_excerpt": "{\"auth\":\"Bearer s3cret\"}", "n": 1}),
        );
        assert_eq!(out.evidence, "saw [secret KEY]");
        assert!(!out.detail.to_string().contains("s3cret"));
        let json = serde_json::to_value(&out).unwrap();
        assert!(json["latency_ms"].is_number());
        let back: ProbeOutcome = serde_json::from_value(json).unwrap();
        assert_eq!(back.evidence, out.evidence);
    }
}

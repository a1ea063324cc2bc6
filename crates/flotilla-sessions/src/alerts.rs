//! Alerts open sessions: Alertmanager's webhook payload, the matcher
//! that picks the alerts that open a session, the dedup key, and the messages.
//!
//! The payload is Alertmanager's webhook notification, `"version": "4"`, as documented
//! at <https://prometheus.io/docs/alerting/latest/configuration/#webhook_config>:
//!
//! ```json
//! { "version": "4", "groupKey": "{}:{alertname=\"X\"}", "truncatedAlerts": 0,
//!   "status": "firing", "receiver": "flotilla",
//!   "groupLabels": {…}, "commonLabels": {…}, "commonAnnotations": {…},
//!   "externalURL": "http://alertmanager:9093",
//!   "alerts": [ { "status": "firing", "labels": {…}, "annotations": {…},
//!                 "startsAt": "RFC 3339", "endsAt": "RFC 3339",
//!                 "generatorURL": "http://prometheus/graph?…", "fingerprint": "hex" } ] }
//! ```
//!
//! Which alerts open a session is decided on **each alert's own labels**
//! ([`Matchers::matches`]), never on the group's `commonLabels` (a group of one
//! critical and one warning alert has no common `severity`). An alert is identified
//! by [`Alert::dedup_key`] (`fingerprint` and `startsAt`): Alertmanager resends the
//! same alert with the same key when its repeat interval elapses, and sends its
//! resolution with the same key too.
//!
//! Pure: no IO, no clock.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The only payload version understood (Alertmanager ≥ 0.16 sends `"4"`).
pub const VERSION: &str = "4";

/// Labels or annotations: name → value.
pub type LabelSet = BTreeMap<String, String>;

/// A group's or an alert's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AlertStatus {
    /// `firing`.
    Firing,
    /// `resolved`.
    Resolved,
}

impl AlertStatus {
    /// `firing` or `resolved`.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertStatus::Firing => "firing",
            AlertStatus::Resolved => "resolved",
        }
    }
}

impl fmt::Display for AlertStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One webhook notification (payload version 4), field names as Alertmanager
/// spells them in JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Webhook {
    /// `version`: always `"4"`.
    pub version: String,
    /// `groupKey`: identifies the alert group (the route and its group labels).
    pub group_key: String,
    /// `truncatedAlerts`: how many alerts were left out of `alerts` by the
    /// receiver's `max_alerts` (0 when absent).
    pub truncated_alerts: u64,
    /// `status`: `firing` if at least one alert of the group fires.
    pub status: AlertStatus,
    /// `receiver`: the receiver's name in Alertmanager's configuration.
    pub receiver: String,
    /// `groupLabels`: the labels the group is grouped by.
    pub group_labels: LabelSet,
    /// `commonLabels`: labels all alerts of the group share.
    pub common_labels: LabelSet,
    /// `commonAnnotations`: annotations all alerts of the group share.
    pub common_annotations: LabelSet,
    /// `externalURL`: the Alertmanager's own URL (`""` when absent).
    #[serde(rename = "externalURL")]
    pub external_url: String,
    /// `alerts`: the group's alerts, firing and resolved.
    pub alerts: Vec<Alert>,
}

/// One alert of a notification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Alert {
    /// `status`.
    pub status: AlertStatus,
    /// `labels`: the alert's identity (`alertname`, `severity`, …).
    pub labels: LabelSet,
    /// `annotations`: `summary`, `description`, `runbook_url`, … (empty when absent).
    pub annotations: LabelSet,
    /// `startsAt`: when it started firing, RFC 3339, kept as sent.
    pub starts_at: String,
    /// `endsAt`: when it resolved, RFC 3339 (`0001-01-01T00:00:00Z` while firing;
    /// `""` when absent).
    pub ends_at: String,
    /// `generatorURL`: the rule's page in the alert's source (`""` when absent).
    #[serde(rename = "generatorURL")]
    pub generator_url: String,
    /// `fingerprint`: Alertmanager's hash of the label set (hex).
    pub fingerprint: String,
}

/// A payload that is not a version-4 Alertmanager webhook. Every variant names the
/// field as a JSON path (`alerts[1].startsAt`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AlertError {
    /// The body is not JSON.
    #[error("the alert payload is not JSON: {0}")]
    Json(String),
    /// A required field is absent (or `null`).
    #[error("the alert payload has no `{field}`")]
    Missing {
        /// The field's path.
        field: String,
    },
    /// A field has the wrong JSON type.
    #[error("`{field}` in the alert payload must be {expected}")]
    Type {
        /// The field's path.
        field: String,
        /// What it must be (`a string`, `an object of strings`…).
        expected: &'static str,
    },
    /// A field has a value outside its set (`status` neither `firing` nor `resolved`,
    /// an empty `fingerprint`…).
    #[error("`{field}` in the alert payload is {value:?}: {expected}")]
    Value {
        /// The field's path.
        field: String,
        /// The value found.
        value: String,
        /// What it must be.
        expected: &'static str,
    },
    /// `version` is not `"4"`.
    #[error("alert payload version {found:?} is not supported (only \"4\")")]
    Version {
        /// The version found.
        found: String,
    },
}

/// Parses a webhook body.
///
/// Required: `version` (`"4"`), `groupKey`, `status`, `receiver`, `alerts`, and in
/// every alert `status`, `labels`, `startsAt` and a non-empty `fingerprint`.
/// Defaulted when absent or `null`: `truncatedAlerts` (0), `groupLabels`,
/// `commonLabels`, `commonAnnotations`, an alert's `annotations` (empty),
/// `externalURL`, `endsAt`, `generatorURL` (`""`). Unknown fields are ignored.
pub fn parse(body: &[u8]) -> Result<Webhook, AlertError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| AlertError::Json(e.to_string()))?;
    let Value::Object(top) = v else {
        return Err(AlertError::Type {
            field: "(top level)".into(),
            expected: "an object",
        });
    };
    let version = string(&top, "version", "")?;
    if version != VERSION {
        return Err(AlertError::Version { found: version });
    }
    let alerts = match field(&top, "alerts") {
        None => return Err(missing("alerts")),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, a)| alert(a, &format!("alerts[{i}]")))
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => {
            return Err(AlertError::Type {
                field: "alerts".into(),
                expected: "an array",
            })
        }
    };
    let truncated_alerts = match field(&top, "truncatedAlerts") {
        None => 0,
        Some(n) => n.as_u64().ok_or(AlertError::Type {
            field: "truncatedAlerts".into(),
            expected: "a non-negative integer",
        })?,
    };
    Ok(Webhook {
        version,
        group_key: string(&top, "groupKey", "")?,
        truncated_alerts,
        status: status(&top, "status", "")?,
        receiver: string(&top, "receiver", "")?,
        group_labels: labels(&top, "groupLabels", "")?,
        common_labels: labels(&top, "commonLabels", "")?,
        common_annotations: labels(&top, "commonAnnotations", "")?,
        external_url: optional_string(&top, "externalURL", "")?,
        alerts,
    })
}

fn alert(v: &Value, at: &str) -> Result<Alert, AlertError> {
    let Value::Object(o) = v else {
        return Err(AlertError::Type {
            field: at.into(),
            expected: "an object",
        });
    };
    if field(o, "labels").is_none() {
        return Err(missing(&path(at, "labels")));
    }
    let fingerprint = string(o, "fingerprint", at)?;
    if fingerprint.is_empty() {
        return Err(AlertError::Value {
            field: path(at, "fingerprint"),
            value: fingerprint,
            expected: "a non-empty hash",
        });
    }
    let starts_at = string(o, "startsAt", at)?;
    if starts_at.is_empty() {
        return Err(AlertError::Value {
            field: path(at, "startsAt"),
            value: starts_at,
            expected: "an RFC 3339 time",
        });
    }
    Ok(Alert {
        status: status(o, "status", at)?,
        labels: labels(o, "labels", at)?,
        annotations: labels(o, "annotations", at)?,
        starts_at,
        ends_at: optional_string(o, "endsAt", at)?,
        generator_url: optional_string(o, "generatorURL", at)?,
        fingerprint,
    })
}

fn path(at: &str, name: &str) -> String {
    if at.is_empty() {
        name.to_string()
    } else {
        format!("{at}.{name}")
    }
}

fn missing(field: &str) -> AlertError {
    AlertError::Missing {
        field: field.to_string(),
    }
}

/// The field, `None` when absent or `null`.
fn field<'a>(o: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    o.get(name).filter(|v| !v.is_null())
}

fn string(o: &Map<String, Value>, name: &str, at: &str) -> Result<String, AlertError> {
    match field(o, name) {
        None => Err(missing(&path(at, name))),
        Some(_) => optional_string(o, name, at),
    }
}

fn optional_string(o: &Map<String, Value>, name: &str, at: &str) -> Result<String, AlertError> {
    match field(o, name) {
        None => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(AlertError::Type {
            field: path(at, name),
            expected: "a string",
        }),
    }
}

fn status(o: &Map<String, Value>, name: &str, at: &str) -> Result<AlertStatus, AlertError> {
    let s = string(o, name, at)?;
    match s.as_str() {
        "firing" => Ok(AlertStatus::Firing),
        "resolved" => Ok(AlertStatus::Resolved),
        _ => Err(AlertError::Value {
            field: path(at, name),
            value: s,
            expected: "\"firing\" or \"resolved\"",
        }),
    }
}

fn labels(o: &Map<String, Value>, name: &str, at: &str) -> Result<LabelSet, AlertError> {
    let wrong = || AlertError::Type {
        field: path(at, name),
        expected: "an object of strings",
    };
    match field(o, name) {
        None => Ok(LabelSet::new()),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                _ => Err(AlertError::Type {
                    field: format!("{}.{k}", path(at, name)),
                    expected: "a string",
                }),
            })
            .collect(),
        Some(_) => Err(wrong()),
    }
}

impl Alert {
    /// Whether the alert fires.
    pub fn is_firing(&self) -> bool {
        self.status == AlertStatus::Firing
    }

    /// The alert's name (its `alertname` label; `""` without one).
    pub fn name(&self) -> &str {
        self.labels.get("alertname").map_or("", String::as_str)
    }

    /// The key a session opened by this alert is found by: `fingerprint` and
    /// `startsAt`, as `<fingerprint>@<startsAt>`. Alertmanager sends repeats and the
    /// resolution with the same key; the same label set firing again later has a new
    /// `startsAt`, so it opens a new session.
    pub fn dedup_key(&self) -> String {
        format!("{}@{}", self.fingerprint, self.starts_at)
    }

    /// The first message of the session the alert opens: its name and status, when it
    /// started, its labels, its annotations and the generator URL.
    ///
    /// Label values are quoted (`name="value"`); annotation texts follow their names,
    /// continuation lines indented.
    pub fn message(&self) -> String {
        let name = if self.name().is_empty() {
            "(no alertname)"
        } else {
            self.name()
        };
        let mut m = format!(
            "Alertmanager alert `{name}` is {} since {}.\n",
            self.status, self.starts_at
        );
        m.push_str("\nLabels:\n");
        for (k, v) in &self.labels {
            m.push_str(&format!("  {k}={v:?}\n"));
        }
        if !self.annotations.is_empty() {
            m.push_str("\nAnnotations:\n");
            for (k, v) in &self.annotations {
                m.push_str(&format!("  {k}: {}\n", indent_continuation(v)));
            }
        }
        m.push('\n');
        if !self.generator_url.is_empty() {
            m.push_str(&format!("Generator URL: {}\n", self.generator_url));
        }
        m.push_str(&format!("Fingerprint: {}\n", self.fingerprint));
        m
    }

    /// The message appended to the alert's session when it resolves: its name, the
    /// fingerprint, and when it started and ended.
    pub fn resolved_message(&self) -> String {
        let name = if self.name().is_empty() {
            "(no alertname)"
        } else {
            self.name()
        };
        let ended = if self.ends_at.is_empty() {
            String::new()
        } else {
            format!(" at {}", self.ends_at)
        };
        format!(
            "Alertmanager alert `{name}` (fingerprint {}, firing since {}) is resolved{ended}.\n",
            self.fingerprint, self.starts_at
        )
    }
}

/// Continuation lines of a multi-line annotation indented under its name.
fn indent_continuation(v: &str) -> String {
    v.trim_end().replace('\n', "\n    ")
}

/// A matcher's operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MatchOp {
    /// `=`: the label's value equals the value.
    Equal,
    /// `!=`: the label's value differs from the value.
    NotEqual,
}

/// One Alertmanager matcher, `name="value"` or `name!="value"`
/// (<https://prometheus.io/docs/alerting/latest/configuration/#matcher>), the
/// regular-expression operators (`=~`, `!~`) left out. As in Alertmanager, an
/// absent label matches as the empty value: `team=""` matches alerts without `team`,
/// `team!="db"` matches them too.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Matcher {
    /// The label name (`[A-Za-z_][A-Za-z0-9_]*`).
    pub name: String,
    /// The operator.
    pub op: MatchOp,
    /// The value compared with.
    pub value: String,
}

/// A matcher or a list of matchers that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MatcherError {
    /// Not `name="value"` / `name!="value"`.
    #[error("matcher {input:?}: {reason}")]
    Syntax {
        /// The matcher as written.
        input: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// `=~` or `!~`: regular expressions are not supported.
    #[error(
        "matcher {input:?}: regular-expression matchers (=~, !~) are not supported; use = or !="
    )]
    Regex {
        /// The matcher as written.
        input: String,
    },
}

impl Matcher {
    /// `name="value"`.
    pub fn equal(name: &str, value: &str) -> Matcher {
        Matcher {
            name: name.into(),
            op: MatchOp::Equal,
            value: value.into(),
        }
    }

    /// Parses `name="value"` or `name!="value"`, spaces allowed around the operator.
    /// The value is double-quoted (escapes `\"`, `\\`, `\n`) or, unquoted, a run of
    /// characters other than spaces, quotes, commas and braces.
    pub fn parse(input: &str) -> Result<Matcher, MatcherError> {
        let syntax = |reason| MatcherError::Syntax {
            input: input.to_string(),
            reason,
        };
        let s = input.trim();
        let name_end = s
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(s.len());
        let name = &s[..name_end];
        if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(syntax("a label name ([A-Za-z_][A-Za-z0-9_]*) comes first"));
        }
        let rest = s[name_end..].trim_start();
        let (op, rest) = if rest.starts_with("=~") || rest.starts_with("!~") {
            return Err(MatcherError::Regex {
                input: input.to_string(),
            });
        } else if let Some(r) = rest.strip_prefix("!=") {
            (MatchOp::NotEqual, r)
        } else if let Some(r) = rest.strip_prefix('=') {
            (MatchOp::Equal, r)
        } else {
            return Err(syntax("the operator is = or !="));
        };
        let rest = rest.trim_start();
        let value = if let Some(quoted) = rest.strip_prefix('"') {
            let mut value = String::new();
            let mut chars = quoted.chars();
            loop {
                match chars.next() {
                    None => return Err(syntax("the value's closing quote is missing")),
                    Some('"') => break,
                    Some('\\') => match chars.next() {
                        Some('"') => value.push('"'),
                        Some('\\') => value.push('\\'),
                        Some('n') => value.push('\n'),
                        _ => return Err(syntax("only \\\", \\\\ and \\n are escapes")),
                    },
                    Some(c) => value.push(c),
                }
            }
            if !chars.as_str().trim().is_empty() {
                return Err(syntax("nothing may follow the quoted value"));
            }
            value
        } else {
            let bad = |c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ',' | '{' | '}');
            if rest.contains(bad) {
                return Err(syntax(
                    "an unquoted value has no spaces, quotes, commas or braces",
                ));
            }
            rest.to_string()
        };
        Ok(Matcher {
            name: name.to_string(),
            op,
            value,
        })
    }

    /// Whether `labels` satisfy the matcher (an absent label is the empty value).
    pub fn matches(&self, labels: &LabelSet) -> bool {
        let v = labels.get(&self.name).map_or("", String::as_str);
        match self.op {
            MatchOp::Equal => v == self.value,
            MatchOp::NotEqual => v != self.value,
        }
    }
}

impl fmt::Display for Matcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.op {
            MatchOp::Equal => "=",
            MatchOp::NotEqual => "!=",
        };
        // The escapes `parse` reads back.
        let value = self
            .value
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n");
        write!(f, "{}{op}\"{value}\"", self.name)
    }
}

/// A list of matchers, all of which must match (an empty list matches every alert).
/// The default is `severity="critical"`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Matchers(pub Vec<Matcher>);

impl Default for Matchers {
    fn default() -> Matchers {
        Matchers(vec![Matcher::equal("severity", "critical")])
    }
}

impl Matchers {
    /// Parses a comma-separated list, optionally in braces:
    /// `{severity="critical", team!="db"}` or `severity="critical",team!="db"`.
    /// Commas inside quoted values do not separate.
    pub fn parse(input: &str) -> Result<Matchers, MatcherError> {
        let s = input.trim();
        let s = match s.strip_prefix('{') {
            Some(inner) => inner.strip_suffix('}').ok_or(MatcherError::Syntax {
                input: input.to_string(),
                reason: "the closing brace is missing",
            })?,
            None => s,
        };
        let mut parts = Vec::new();
        let (mut start, mut quoted, mut escaped) = (0, false, false);
        for (i, c) in s.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' if quoted => escaped = true,
                '"' => quoted = !quoted,
                ',' if !quoted => {
                    parts.push(&s[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&s[start..]);
        if parts.len() == 1 && parts[0].trim().is_empty() {
            return Ok(Matchers(Vec::new()));
        }
        parts
            .into_iter()
            .map(Matcher::parse)
            .collect::<Result<_, _>>()
            .map(Matchers)
    }

    /// Whether every matcher matches the **alert's own** labels.
    pub fn matches(&self, alert: &Alert) -> bool {
        self.0.iter().all(|m| m.matches(&alert.labels))
    }
}

impl fmt::Display for Matchers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, m) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{m}")?;
        }
        f.write_str("}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A group as Alertmanager sends it: one critical and one warning alert firing.
    const FIRING: &str = r#"{
      "receiver": "flotilla",
      "status": "firing",
      "alerts": [
        {
          "status": "firing",
          "labels": {"alertname": "NodeFilesystemAlmostFull", "device": "/dev/sda1",
                     "instance": "nas:9100", "job": "node", "mountpoint": "/srv",
                     "severity": "critical"},
          "annotations": {"summary": "/srv on nas is 97% full",
                          "description": "Filesystem /srv has 3% space left.\nIt fills at 2 GiB/h.",
                          "runbook_url": "https://runbooks.example/fs-full"},
          "startsAt": "2025-03-02T08:14:30.123Z",
          "endsAt": "0001-01-01T00:00:00Z",
          "generatorURL": "http://prometheus.lan:9090/graph?g0.expr=node_filesystem_avail_bytes+%3C+0.05&g0.tab=1",
          "fingerprint": "3f1e9c2b7a6d5e40"
        },
        {
          "status": "firing",
          "labels": {"alertname": "NodeFilesystemAlmostFull", "device": "/dev/sdb1",
                     "instance": "nas:9100", "job": "node", "mountpoint": "/backup",
                     "severity": "warning"},
          "annotations": {"summary": "/backup on nas is 88% full"},
          "startsAt": "2025-03-02T08:10:00Z",
          "endsAt": "0001-01-01T00:00:00Z",
          "generatorURL": "http://prometheus.lan:9090/graph?g0.expr=x",
          "fingerprint": "a9c4d0e1f2b3c4d5"
        }
      ],
      "groupLabels": {"alertname": "NodeFilesystemAlmostFull"},
      "commonLabels": {"alertname": "NodeFilesystemAlmostFull", "instance": "nas:9100", "job": "node"},
      "commonAnnotations": {},
      "externalURL": "http://alertmanager.lan:9093",
      "version": "4",
      "groupKey": "{}/{severity=~\"critical|warning\"}:{alertname=\"NodeFilesystemAlmostFull\"}",
      "truncatedAlerts": 0
    }"#;

    /// The critical alert's resolution.
    const RESOLVED: &str = r#"{
      "receiver": "flotilla", "status": "resolved",
      "alerts": [{
          "status": "resolved",
          "labels": {"alertname": "NodeFilesystemAlmostFull", "device": "/dev/sda1",
                     "instance": "nas:9100", "job": "node", "mountpoint": "/srv",
                     "severity": "critical"},
          "annotations": {"summary": "/srv on nas is 97% full"},
          "startsAt": "2025-03-02T08:14:30.123Z",
          "endsAt": "2025-03-02T09:02:00.5Z",
          "generatorURL": "http://prometheus.lan:9090/graph?g0.expr=x",
          "fingerprint": "3f1e9c2b7a6d5e40"
      }],
      "groupLabels": {"alertname": "NodeFilesystemAlmostFull"},
      "commonLabels": {"alertname": "NodeFilesystemAlmostFull", "severity": "critical"},
      "commonAnnotations": {"summary": "/srv on nas is 97% full"},
      "externalURL": "http://alertmanager.lan:9093",
      "version": "4",
      "groupKey": "{}:{alertname=\"NodeFilesystemAlmostFull\"}",
      "truncatedAlerts": 0
    }"#;

    #[test]
    fn parses_a_firing_group() {
        let w = parse(FIRING.as_bytes()).unwrap();
        assert_eq!(w.version, "4");
        assert_eq!(w.status, AlertStatus::Firing);
        assert_eq!(w.receiver, "flotilla");
        assert_eq!(w.external_url, "http://alertmanager.lan:9093");
        assert_eq!(w.truncated_alerts, 0);
        assert!(w.group_key.contains("NodeFilesystemAlmostFull"));
        assert_eq!(w.group_labels["alertname"], "NodeFilesystemAlmostFull");
        assert!(w.common_annotations.is_empty());
        assert_eq!(w.alerts.len(), 2);
        let a = &w.alerts[0];
        assert!(a.is_firing());
        assert_eq!(a.name(), "NodeFilesystemAlmostFull");
        assert_eq!(a.fingerprint, "3f1e9c2b7a6d5e40");
        assert_eq!(a.starts_at, "2025-03-02T08:14:30.123Z");
        assert!(a.generator_url.contains("g0.expr="));
    }

    #[test]
    fn the_default_matcher_picks_the_critical_alert_by_its_own_labels() {
        let w = parse(FIRING.as_bytes()).unwrap();
        // commonLabels has no severity (the alerts differ): matching them would miss.
        assert!(!w.common_labels.contains_key("severity"));
        let m = Matchers::default();
        let picked: Vec<_> = w.alerts.iter().filter(|a| m.matches(a)).collect();
        assert_eq!(picked.len(), 1);
        assert_eq!(picked[0].labels["mountpoint"], "/srv");
        let warning = Matchers::parse(r#"{severity="warning", mountpoint!="/srv"}"#).unwrap();
        let picked: Vec<_> = w.alerts.iter().filter(|a| warning.matches(a)).collect();
        assert_eq!(picked.len(), 1);
        assert_eq!(picked[0].labels["mountpoint"], "/backup");
    }

    #[test]
    fn dedup_key_is_fingerprint_and_starts_at_and_the_resolution_shares_it() {
        let firing = parse(FIRING.as_bytes()).unwrap();
        let resolved = parse(RESOLVED.as_bytes()).unwrap();
        assert_eq!(
            firing.alerts[0].dedup_key(),
            "3f1e9c2b7a6d5e40@2025-03-02T08:14:30.123Z"
        );
        assert_eq!(firing.alerts[0].dedup_key(), resolved.alerts[0].dedup_key());
        assert_ne!(firing.alerts[0].dedup_key(), firing.alerts[1].dedup_key());
        // The same label set firing again later is a new incident.
        let mut again = firing.alerts[0].clone();
        again.starts_at = "2025-03-05T01:00:00Z".into();
        assert_ne!(again.dedup_key(), firing.alerts[0].dedup_key());
    }

    #[test]
    fn messages_carry_name_status_labels_annotations_and_generator_url() {
        let w = parse(FIRING.as_bytes()).unwrap();
        let m = w.alerts[0].message();
        assert!(m.starts_with(
            "Alertmanager alert `NodeFilesystemAlmostFull` is firing since 2025-03-02T08:14:30.123Z.\n"
        ));
        assert!(m.contains("  severity=\"critical\"\n"));
        assert!(m.contains("  mountpoint=\"/srv\"\n"));
        assert!(m.contains("  summary: /srv on nas is 97% full\n"));
        assert!(m.contains("  description: Filesystem /srv has 3% space left.\n    It fills"));
        assert!(m.contains("  runbook_url: https://runbooks.example/fs-full\n"));
        assert!(m.contains(
            "Generator URL: http://prometheus.lan:9090/graph?g0.expr=node_filesystem_avail_bytes+%3C+0.05&g0.tab=1\n"
        ));
        assert!(m.contains("Fingerprint: 3f1e9c2b7a6d5e40\n"));

        let r = parse(RESOLVED.as_bytes()).unwrap();
        assert_eq!(r.status, AlertStatus::Resolved);
        assert_eq!(
            r.alerts[0].resolved_message(),
            "Alertmanager alert `NodeFilesystemAlmostFull` (fingerprint 3f1e9c2b7a6d5e40, \
             firing since 2025-03-02T08:14:30.123Z) is resolved at 2025-03-02T09:02:00.5Z.\n"
        );
    }

    #[test]
    fn optional_fields_default() {
        let w = parse(
            br#"{"version":"4","groupKey":"g","status":"firing","receiver":"r",
                 "alerts":[{"status":"firing","labels":{"severity":"critical"},
                            "startsAt":"2025-01-01T00:00:00Z","fingerprint":"f",
                            "annotations":null}]}"#,
        )
        .unwrap();
        assert_eq!(w.truncated_alerts, 0);
        assert!(w.common_labels.is_empty());
        assert_eq!(w.external_url, "");
        let a = &w.alerts[0];
        assert!(a.annotations.is_empty());
        assert_eq!(a.generator_url, "");
        assert_eq!(a.ends_at, "");
        assert!(a.message().contains("(no alertname)"));
        assert!(!a.message().contains("Generator URL"));
    }

    #[test]
    fn errors_name_the_field() {
        let with = |f: &dyn Fn(&mut Value)| {
            let mut v: Value = serde_json::from_str(FIRING).unwrap();
            f(&mut v);
            parse(serde_json::to_vec(&v).unwrap().as_slice()).unwrap_err()
        };
        assert_eq!(
            with(&|v| {
                v["alerts"][1]
                    .as_object_mut()
                    .unwrap()
                    .remove("fingerprint");
            }),
            AlertError::Missing {
                field: "alerts[1].fingerprint".into()
            }
        );
        assert_eq!(
            with(&|v| v["alerts"][0]["startsAt"] = Value::from(17)),
            AlertError::Type {
                field: "alerts[0].startsAt".into(),
                expected: "a string"
            }
        );
        assert_eq!(
            with(&|v| v["alerts"][0]["labels"]["severity"] = Value::from(2)),
            AlertError::Type {
                field: "alerts[0].labels.severity".into(),
                expected: "a string"
            }
        );
        let e = with(&|v| v["status"] = Value::from("pending"));
        assert!(matches!(&e, AlertError::Value { field, .. } if field == "status"));
        assert!(e.to_string().contains("`status`"), "{e}");
        assert_eq!(
            with(&|v| v["version"] = Value::from("3")),
            AlertError::Version { found: "3".into() }
        );
        assert_eq!(
            with(&|v| {
                v.as_object_mut().unwrap().remove("groupKey");
            }),
            AlertError::Missing {
                field: "groupKey".into()
            }
        );
        assert_eq!(
            with(&|v| v["truncatedAlerts"] = Value::from(-1)),
            AlertError::Type {
                field: "truncatedAlerts".into(),
                expected: "a non-negative integer"
            }
        );
        assert!(matches!(parse(b"{not json"), Err(AlertError::Json(_))));
        assert!(matches!(parse(b"[]"), Err(AlertError::Type { .. })));
    }

    #[test]
    fn matcher_syntax() {
        let m = Matcher::parse(r#"severity="critical""#).unwrap();
        assert_eq!(m, Matcher::equal("severity", "critical"));
        let m = Matcher::parse(r#" team != "db \"core\"" "#).unwrap();
        assert_eq!(m.op, MatchOp::NotEqual);
        assert_eq!(m.value, "db \"core\"");
        assert_eq!(Matcher::parse(&m.to_string()).unwrap(), m);
        let odd = Matcher::equal("x", "tab\there\nnew \\ \"q\" é");
        assert_eq!(Matcher::parse(&odd.to_string()).unwrap(), odd);
        assert_eq!(
            Matcher::parse("env=prod").unwrap(),
            Matcher::equal("env", "prod")
        );
        assert!(matches!(
            Matcher::parse(r#"job=~"node.*""#),
            Err(MatcherError::Regex { .. })
        ));
        assert!(matches!(
            Matcher::parse(r#"job!~"x""#),
            Err(MatcherError::Regex { .. })
        ));
        for bad in [
            r#"="x""#,
            r#"1job="x""#,
            r#"job"#,
            r#"job<"x""#,
            r#"job="x"#,
            r#"job="x" y"#,
            "job=a b",
        ] {
            assert!(
                matches!(Matcher::parse(bad), Err(MatcherError::Syntax { .. })),
                "{bad}"
            );
        }
        let list = Matchers::parse(r#"{severity="critical", summary="a, b", team!=""}"#).unwrap();
        assert_eq!(list.0.len(), 3);
        assert_eq!(list.0[1].value, "a, b");
        assert_eq!(Matchers::parse(&list.to_string()).unwrap(), list);
        assert_eq!(Matchers::parse("{}").unwrap(), Matchers(vec![]));
        assert!(Matchers::parse(r#"{a="b""#).is_err());
        assert_eq!(Matchers::default().to_string(), r#"{severity="critical"}"#);
    }

    #[test]
    fn an_absent_label_is_the_empty_value() {
        let labels: LabelSet = [("alertname".to_string(), "X".to_string())].into();
        assert!(Matcher::parse(r#"team="""#).unwrap().matches(&labels));
        assert!(Matcher::parse(r#"team!="db""#).unwrap().matches(&labels));
        assert!(!Matcher::parse(r#"team="db""#).unwrap().matches(&labels));
        assert!(!Matcher::parse(r#"alertname!="X""#)
            .unwrap()
            .matches(&labels));
    }
}

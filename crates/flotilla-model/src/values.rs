//! Small validated value types of the inventory format: durations, ports, signals,
//! environment values (literal or secret reference), endpoints and HTTP status ranges.

use schemars::JsonSchema;
use serde::{de, Deserialize, Deserializer, Serialize, Serializer};
use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

/// A duration written as a human string: `"250ms"`, `"30s"`, `"5m"`, `"1h 30m"`
/// (the `humantime` crate's grammar). Serialises back to the same form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HumanDuration(pub Duration);

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = Cow::<str>::deserialize(d)?;
        humantime::parse_duration(&s).map(HumanDuration).map_err(|e| {
            de::Error::custom(format!(
                "invalid duration `{s}` ({e}): write a number and a unit, e.g. \"250ms\", \"30s\", \"5m\""
            ))
        })
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_duration(self.0))
    }
}

impl JsonSchema for HumanDuration {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "A duration: a number and a unit (ns, us, ms, s, m, h, d), e.g. \"250ms\", \"30s\", \"1h 30m\".",
            "pattern": "^\\s*[0-9]+\\s*[a-zµ]+(\\s*[0-9]+\\s*[a-zµ]+)*\\s*$"
        })
    }
}

/// A TCP port, 1–65535.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Port(pub u16);

impl<'de> Deserialize<'de> for Port {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = i64::deserialize(d)?;
        match u16::try_from(n) {
            Ok(p) if p > 0 => Ok(Port(p)),
            _ => Err(de::Error::custom(format!(
                "port {n} is out of range: a port is 1-65535"
            ))),
        }
    }
}

impl JsonSchema for Port {
    fn schema_name() -> Cow<'static, str> {
        "Port".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "integer", "minimum": 1, "maximum": 65535 })
    }
}

/// POSIX signal names accepted by `stop.signal` (signal(7)), without the `SIG` prefix.
pub const SIGNAL_NAMES: &[&str] = &[
    "HUP", "INT", "QUIT", "ABRT", "KILL", "USR1", "USR2", "PIPE", "ALRM", "TERM", "CONT", "STOP",
    "TSTP", "TTIN", "TTOU", "WINCH",
];

/// A signal by name, normalised to the `SIGTERM` form; `"TERM"` and `"sigterm"` are accepted.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct Signal(String);

impl Signal {
    /// `SIGTERM`, the default stop signal.
    pub fn term() -> Self {
        Signal("SIGTERM".into())
    }
    /// The name, e.g. `SIGTERM`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for Signal {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = Cow::<str>::deserialize(d)?;
        let upper = s.to_ascii_uppercase();
        let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
        if SIGNAL_NAMES.contains(&bare) {
            Ok(Signal(format!("SIG{bare}")))
        } else {
            let hint = crate::diag::did_you_mean(bare, SIGNAL_NAMES.iter().copied())
                .map(|h| format!("; did you mean SIG{h}?"))
                .unwrap_or_default();
            Err(de::Error::custom(format!(
                "unknown signal `{s}`: expected one of SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGKILL, SIGUSR1, SIGUSR2…{hint}"
            )))
        }
    }
}

impl JsonSchema for Signal {
    fn schema_name() -> Cow<'static, str> {
        "Signal".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let mut names: Vec<String> = SIGNAL_NAMES.iter().map(|n| format!("SIG{n}")).collect();
        names.extend(SIGNAL_NAMES.iter().map(|n| n.to_string()));
        schemars::json_schema!({ "type": "string", "enum": names })
    }
}

/// An environment variable's value: a literal, or a secret referenced by name
/// (`{ secret = "HF_TOKEN" }`), resolved on the host at execution time and never stored.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EnvValue {
    /// A literal string (integers and booleans are accepted and written as text).
    Literal(String),
    /// The name of a secret.
    Secret(String),
}

impl Serialize for EnvValue {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            EnvValue::Literal(v) => s.serialize_str(v),
            EnvValue::Secret(name) => {
                use serde::ser::SerializeMap;
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("secret", name)?;
                m.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for EnvValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> de::Visitor<'de> for V {
            type Value = EnvValue;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string, or a table `{ secret = \"NAME\" }`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<EnvValue, E> {
                Ok(EnvValue::Literal(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<EnvValue, E> {
                Ok(EnvValue::Literal(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<EnvValue, E> {
                Ok(EnvValue::Literal(v.to_string()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<EnvValue, E> {
                Ok(EnvValue::Literal(v.to_string()))
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<EnvValue, A::Error> {
                let mut name = None;
                while let Some(k) = map.next_key::<Cow<'de, str>>()? {
                    if k != "secret" {
                        return Err(de::Error::unknown_field(&k, &["secret"]));
                    }
                    name = Some(map.next_value::<String>()?);
                }
                let name = name.ok_or_else(|| de::Error::missing_field("secret"))?;
                if name.is_empty() {
                    return Err(de::Error::custom("secret name is empty"));
                }
                Ok(EnvValue::Secret(name))
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for EnvValue {
    fn schema_name() -> Cow<'static, str> {
        "EnvValue".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A literal value, or a secret referenced by name and resolved on the host at execution time.",
            "anyOf": [
                { "type": "string" },
                { "type": "integer" },
                { "type": "boolean" },
                {
                    "type": "object",
                    "properties": { "secret": { "type": "string", "minLength": 1 } },
                    "required": ["secret"],
                    "additionalProperties": false
                }
            ]
        })
    }
}

/// A parsed endpoint: `scheme://host:port/path` or `host:port`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Endpoint {
    /// Host name or IP address (IPv6 without brackets).
    pub host: String,
    /// Path, empty when none.
    pub path: String,
    /// Port (defaulted from the scheme for http/https when omitted).
    pub port: u16,
    /// `http`, `https`, `tcp`… when written; `None` for a bare `host:port`.
    pub scheme: Option<String>,
    /// The text as resolved (after `${...}` substitution).
    pub url: String,
}

impl Endpoint {
    /// Parses `scheme://host[:port][/path]` or `host:port`.
    ///
    /// # Errors
    /// A message saying what is missing or malformed.
    pub fn parse(text: &str) -> Result<Endpoint, String> {
        let (scheme, rest) = match text.split_once("://") {
            Some((s, r)) => {
                if s.is_empty()
                    || !s
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
                {
                    return Err(format!("`{s}` is not a URL scheme"));
                }
                (Some(s.to_ascii_lowercase()), r)
            }
            None => (None, text),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6
                .split_once(']')
                .ok_or_else(|| format!("unclosed `[` in `{text}`"))?;
            (h, after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err(format!("`{text}` has no host"));
        }
        let port = match port {
            Some(p) => match p.parse::<u16>() {
                Ok(n) if n > 0 => n,
                _ => return Err(format!("`{p}` is not a port (1-65535)")),
            },
            None => match scheme.as_deref() {
                Some("http") | Some("ws") => 80,
                Some("https") | Some("wss") => 443,
                _ => return Err(format!("`{text}` has no port: write host:port")),
            },
        };
        Ok(Endpoint {
            url: text.to_string(),
            scheme,
            host: host.to_string(),
            port,
            path: path.to_string(),
        })
    }

    /// The address a client on the same host dials for this endpoint ([`dial_host`]).
    pub fn dial_host(&self) -> &str {
        dial_host(&self.host)
    }

    /// Whether the host names this machine itself (loopback, wildcard or `localhost`),
    /// i.e. the endpoint claims a port on the component's own host.
    pub fn is_local_bind(&self) -> bool {
        matches!(
            self.host.as_str(),
            "localhost" | "0.0.0.0" | "::" | "::1" | "*"
        ) || self.host.starts_with("127.")
    }
}

/// The address clients on the same host dial for a listening address: the wildcard
/// binds (`0.0.0.0`, `*`, empty) become `127.0.0.1`, `::` becomes `::1`, anything else
/// is itself.
pub fn dial_host(bind: &str) -> &str {
    match bind {
        "0.0.0.0" | "*" | "" => "127.0.0.1",
        "::" => "::1",
        other => other,
    }
}

/// An inclusive range of HTTP status codes, written `"200"`, `"200-299"` or `"2xx"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StatusRange {
    /// Lowest accepted status.
    pub min: u16,
    /// Highest accepted status.
    pub max: u16,
}

impl Default for StatusRange {
    fn default() -> Self {
        StatusRange { min: 200, max: 299 }
    }
}

impl StatusRange {
    /// Whether `status` is inside the range.
    pub fn contains(&self, status: u16) -> bool {
        (self.min..=self.max).contains(&status)
    }
}

impl fmt::Display for StatusRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.min == self.max {
            write!(f, "{}", self.min)
        } else {
            write!(f, "{}-{}", self.min, self.max)
        }
    }
}

impl Serialize for StatusRange {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for StatusRange {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = StatusRange;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an HTTP status (200), a range (\"200-299\") or a class (\"2xx\")")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<StatusRange, E> {
                let s = u16::try_from(v)
                    .ok()
                    .filter(|s| (100..=599).contains(s))
                    .ok_or_else(|| E::custom(format!("HTTP status {v} is not in 100-599")))?;
                Ok(StatusRange { min: s, max: s })
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<StatusRange, E> {
                self.visit_i64(v as i64)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<StatusRange, E> {
                let bad = || {
                    E::custom(format!(
                        "`{v}` is not an HTTP status, range (\"200-299\") or class (\"2xx\")"
                    ))
                };
                let num = |s: &str| -> Result<u16, E> {
                    s.trim()
                        .parse::<u16>()
                        .ok()
                        .filter(|s| (100..=599).contains(s))
                        .ok_or_else(bad)
                };
                let r = if let Some(c) = v.strip_suffix("xx") {
                    let d: u16 = c.parse().map_err(|_| bad())?;
                    if !(1..=5).contains(&d) {
                        return Err(bad());
                    }
                    StatusRange {
                        min: d * 100,
                        max: d * 100 + 99,
                    }
                } else if let Some((a, b)) = v.split_once('-') {
                    StatusRange {
                        min: num(a)?,
                        max: num(b)?,
                    }
                } else {
                    let s = num(v)?;
                    StatusRange { min: s, max: s }
                };
                if r.min > r.max {
                    return Err(bad());
                }
                Ok(r)
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for StatusRange {
    fn schema_name() -> Cow<'static, str> {
        "StatusRange".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "An HTTP status (200), an inclusive range (\"200-299\") or a class (\"2xx\").",
            "anyOf": [
                { "type": "integer", "minimum": 100, "maximum": 599 },
                { "type": "string", "pattern": "^([1-5]xx|[1-5][0-9]{2}(-[1-5][0-9]{2})?)$" }
            ]
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse() {
        let e = Endpoint::parse("http://127.0.0.1:8080/v1").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.path.as_str()),
            ("127.0.0.1", 8080, "/v1")
        );
        assert!(e.is_local_bind());
        let e = Endpoint::parse("studio.lan:22").unwrap();
        assert_eq!((e.scheme, e.port), (None, 22));
        assert_eq!(
            Endpoint::parse("https://api.example.com").unwrap().port,
            443
        );
        assert_eq!(Endpoint::parse("http://[::1]:9000").unwrap().host, "::1");
        assert!(Endpoint::parse("localhost").is_err());
        assert!(Endpoint::parse("http://h:0").is_err());
        assert!(Endpoint::parse("http://h:70000").is_err());
    }
}

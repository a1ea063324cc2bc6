//! The release manifest: what a signature covers.
//!
//! A manifest is a JSON document (the exact bytes are what minisign signs):
//!
//! ```json
//! {
//!   "name": "flotilla-agent",
//!   "version": "1.4.0",
//!   "serial": 42,
//!   "expires": "2030-01-01T00:00:00Z",
//!   "artifacts": [
//!     {"os": "linux", "arch": "x86_64", "blob": "<64 hex>", "sha256": "<64 hex>", "size": 123},
//!     {"os": "darwin", "arch": "aarch64", "url": "https://…", "sha256": "<64 hex>", "size": 456}
//!   ]
//! }
//! ```
//!
//! Unknown fields are refused, so a signed manifest means exactly what this module reads.

use std::collections::BTreeMap;
use std::time::UNIX_EPOCH;

use serde::{Deserialize, Serialize};

/// A release manifest (see the module docs for its JSON shape).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// What is released: `flotilla-agent` or a component binary such as `llama-server`;
    /// non-empty, `[A-Za-z0-9._+-]`, starting with a letter or digit.
    pub name: String,
    /// The version, same alphabet as `name` (it becomes part of a directory name).
    pub version: String,
    /// Monotonic per signing key: an agent refuses a lower serial than it accepted before.
    pub serial: u64,
    /// RFC 3339 UTC instant (`2030-01-01T00:00:00Z`) after which the manifest is refused.
    pub expires: String,
    /// One artifact per platform (no two with the same `os`/`arch`); at least one.
    pub artifacts: Vec<Artifact>,
}

/// One platform's binary in a [`Manifest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Artifact {
    /// Operating system word: `linux`, `darwin` (`[A-Za-z0-9_]+`, see [`Platform`]).
    pub os: String,
    /// CPU architecture word: `x86_64`, `aarch64` (`[A-Za-z0-9_]+`).
    pub arch: String,
    /// Where to download it; exactly one of `url` and `blob` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The authority's blob holding it: the SHA-256 (64 lowercase hex) the blob is stored under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob: Option<String>,
    /// SHA-256 of the artifact's bytes: 64 lowercase hex digits, no `sha256:` prefix.
    pub sha256: String,
    /// Size of the artifact in bytes.
    pub size: u64,
}

impl Artifact {
    /// The artifact for the file at `path` on `os`/`arch`: its SHA-256 and size are
    /// measured; with `url` it is downloaded from there, without it the authority's blob
    /// store keeps it (`blob` = its SHA-256).
    ///
    /// # Errors
    /// Reading the file (the message names it).
    pub fn of_file(
        path: &std::path::Path,
        os: &str,
        arch: &str,
        url: Option<String>,
    ) -> std::io::Result<Artifact> {
        let (sha256, size) = crate::artifact::sha256_and_size(path)
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        Ok(Artifact {
            os: os.to_string(),
            arch: arch.to_string(),
            blob: url.is_none().then(|| sha256.clone()),
            url,
            sha256,
            size,
        })
    }

    /// The platform word `<os>-<arch>` (e.g. `linux-x86_64`).
    pub fn platform(&self) -> String {
        Platform::name(&self.os, &self.arch)
    }
}

/// A manifest that cannot be used. Display names the place: `artifacts[1].sha256: …`,
/// or `line:column` for JSON that does not parse or does not have the manifest's shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    /// The bytes are not JSON of the manifest's shape (syntax, unknown or missing field, wrong type).
    #[error("manifest {line}:{column}: {message}")]
    Json {
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// What serde_json said, without its own location suffix.
        message: String,
    },
    /// A field has a value the manifest does not allow.
    #[error("{field}: {message}")]
    Field {
        /// The path of the field, e.g. `artifacts[1].sha256`.
        field: String,
        /// What is wrong with it.
        message: String,
    },
}

fn field_error(field: impl Into<String>, message: impl Into<String>) -> ManifestError {
    ManifestError::Field {
        field: field.into(),
        message: message.into(),
    }
}

/// Whether `s` is 64 lowercase hex digits (a SHA-256 written the way manifests write it).
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Whether `s` is usable as a release name or version: non-empty, `[A-Za-z0-9._+-]`,
/// starting with a letter or digit.
pub fn is_release_word(s: &str) -> bool {
    s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'+' | b'-'))
}

fn is_platform_word(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Parses an RFC 3339 UTC instant (`2030-01-01T00:00:00Z`, fractional seconds allowed)
/// into milliseconds since the Unix epoch.
pub fn parse_rfc3339_ms(s: &str) -> Result<i64, String> {
    let t = humantime::parse_rfc3339(s)
        .map_err(|e| format!("{e} (want RFC 3339 UTC, e.g. 2030-01-01T00:00:00Z), got {s:?}"))?;
    let ms = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).map_err(|_| format!("{s:?} is out of range"))?,
        Err(e) => -i64::try_from(e.duration().as_millis())
            .map_err(|_| format!("{s:?} is out of range"))?,
    };
    Ok(ms)
}

/// Formats milliseconds since the Unix epoch as RFC 3339 UTC with second precision
/// (`2030-01-01T00:00:00Z`); instants before the epoch format as the epoch.
pub fn format_rfc3339_ms(ms: i64) -> String {
    let t = UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

impl Manifest {
    /// Parses and validates manifest bytes (JSON, unknown fields refused).
    ///
    /// # Errors
    /// [`ManifestError::Json`] with line:column when the bytes are not JSON of the
    /// manifest's shape; [`ManifestError::Field`] naming the first invalid field (see
    /// [`Manifest::validate`]).
    pub fn parse(bytes: &[u8]) -> Result<Manifest, ManifestError> {
        let manifest: Manifest = serde_json::from_slice(bytes).map_err(|e| {
            let full = e.to_string();
            let suffix = format!(" at line {} column {}", e.line(), e.column());
            let message = full.strip_suffix(&suffix).unwrap_or(&full).to_string();
            ManifestError::Json {
                line: e.line(),
                column: e.column(),
                message,
            }
        })?;
        manifest.validate()?;
        Ok(manifest)
    }

    /// Checks the field rules: `name`/`version` are release words ([`is_release_word`]),
    /// `expires` is RFC 3339 UTC, there is at least one artifact, every artifact has
    /// non-empty `[A-Za-z0-9_]` `os`/`arch`, exactly one of `url`/`blob` (a non-empty URL,
    /// a 64-hex blob), a 64 lowercase hex `sha256`, and no two share `os`/`arch`.
    ///
    /// # Errors
    /// [`ManifestError::Field`] for the first violation, e.g. `artifacts[1].sha256: …`.
    pub fn validate(&self) -> Result<(), ManifestError> {
        for (field, value) in [("name", &self.name), ("version", &self.version)] {
            if !is_release_word(value) {
                return Err(field_error(
                    field,
                    format!(
                        "{value:?} must be non-empty letters, digits and `._+-`, starting with a letter or digit"
                    ),
                ));
            }
        }
        // Stores (SQLite, PostgreSQL) keep serials as signed 64-bit integers.
        if self.serial > i64::MAX as u64 {
            return Err(field_error(
                "serial",
                format!("{} is above the largest serial, {}", self.serial, i64::MAX),
            ));
        }
        parse_rfc3339_ms(&self.expires).map_err(|m| field_error("expires", m))?;
        if self.artifacts.is_empty() {
            return Err(field_error(
                "artifacts",
                "a release needs at least one artifact",
            ));
        }
        let mut seen: BTreeMap<(&str, &str), usize> = BTreeMap::new();
        for (i, a) in self.artifacts.iter().enumerate() {
            let at = |f: &str| format!("artifacts[{i}].{f}");
            for (f, v) in [("os", &a.os), ("arch", &a.arch)] {
                if !is_platform_word(v) {
                    return Err(field_error(
                        at(f),
                        format!(
                            "{v:?} must be non-empty letters, digits and `_` (e.g. linux, x86_64)"
                        ),
                    ));
                }
            }
            match (&a.url, &a.blob) {
                (Some(_), Some(_)) => {
                    return Err(field_error(
                        at("url"),
                        "set either `url` or `blob`, not both",
                    ))
                }
                (None, None) => {
                    return Err(field_error(at("url"), "one of `url` or `blob` is required"))
                }
                (Some(url), None) if url.trim().is_empty() => {
                    return Err(field_error(at("url"), "must not be empty"))
                }
                (None, Some(blob)) if !is_sha256_hex(blob) => {
                    return Err(field_error(
                        at("blob"),
                        format!("{blob:?} must be 64 lowercase hex digits (a SHA-256, no prefix)"),
                    ))
                }
                _ => {}
            }
            if !is_sha256_hex(&a.sha256) {
                return Err(field_error(
                    at("sha256"),
                    format!(
                        "{:?} must be 64 lowercase hex digits (no `sha256:` prefix)",
                        a.sha256
                    ),
                ));
            }
            if let Some(j) = seen.insert((&a.os, &a.arch), i) {
                return Err(field_error(
                    at("os"),
                    format!("platform {} is also artifacts[{j}]", a.platform()),
                ));
            }
        }
        Ok(())
    }

    /// `expires` in milliseconds since the Unix epoch.
    ///
    /// # Errors
    /// [`ManifestError::Field`] (`expires`) when it is not RFC 3339 UTC (never for a
    /// manifest from [`Manifest::parse`]).
    pub fn expires_ms(&self) -> Result<i64, ManifestError> {
        parse_rfc3339_ms(&self.expires).map_err(|m| field_error("expires", m))
    }

    /// The artifact for `os`/`arch` (platform words as in [`Platform`]), if any.
    pub fn artifact_for(&self, os: &str, arch: &str) -> Option<&Artifact> {
        self.artifacts.iter().find(|a| a.os == os && a.arch == arch)
    }

    /// The manifest as pretty JSON with a final newline (the bytes one would sign).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).expect("a manifest serialises to JSON");
        v.push(b'\n');
        v
    }
}

/// Flotilla's platform words: `<os>-<arch>`, e.g. `linux-x86_64`, `darwin-aarch64`.
#[derive(Debug, Clone, Copy)]
pub struct Platform;

impl Platform {
    /// This build's `(os, arch)`: `std::env::consts` names mapped to Flotilla's words
    /// (`macos` → `darwin`; `linux`, `x86_64`, `aarch64` as they are; others unchanged).
    pub fn current() -> (&'static str, &'static str) {
        Platform::words(std::env::consts::OS, std::env::consts::ARCH)
    }

    /// Maps Rust's `std::env::consts::{OS, ARCH}` names to Flotilla's words.
    pub fn words(os: &'static str, arch: &'static str) -> (&'static str, &'static str) {
        let os = match os {
            "macos" => "darwin",
            other => other,
        };
        let arch = match arch {
            "arm64" => "aarch64",
            other => other,
        };
        (os, arch)
    }

    /// The platform word `<os>-<arch>`.
    pub fn name(os: &str, arch: &str) -> String {
        format!("{os}-{arch}")
    }

    /// Splits a platform word `<os>-<arch>` at its first `-` (os words contain no `-`).
    pub fn split(platform: &str) -> Option<(&str, &str)> {
        platform
            .split_once('-')
            .filter(|(os, arch)| is_platform_word(os) && is_platform_word(arch))
    }
}

/// Why a manifest's expiry is not accepted ([`expiry`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExpiryError {
    /// A zero duration.
    #[error("the release would be expired at once")]
    AtOnce,
    /// Neither a duration nor a time.
    #[error("neither a duration (`30d`) nor an RFC 3339 time (`2027-01-01T00:00:00Z`) ({0})")]
    Unreadable(String),
    /// A time not after now.
    #[error("is in the past: agents would refuse the release as expired")]
    Past,
}

/// A manifest's `expires` (RFC 3339, UTC, seconds) from `s`: a duration from `now`
/// (`30d`, humantime's syntax) or an RFC 3339 time after `now`, kept as written.
///
/// # Errors
/// [`ExpiryError`]: a zero duration, a time not after `now`, or neither.
pub fn expiry(s: &str, now: std::time::SystemTime) -> Result<String, ExpiryError> {
    if let Ok(d) = humantime::parse_duration(s) {
        if d.is_zero() {
            return Err(ExpiryError::AtOnce);
        }
        return Ok(humantime::format_rfc3339_seconds(now + d).to_string());
    }
    let t = humantime::parse_rfc3339_weak(s).map_err(|e| ExpiryError::Unreadable(e.to_string()))?;
    if t <= now {
        return Err(ExpiryError::Past);
    }
    Ok(s.to_string())
}

#[cfg(test)]
mod tests {

    #[test]
    fn an_expiry_is_a_duration_from_now_or_a_later_time() {
        let now = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000);
        assert_eq!(super::expiry("1d", now).unwrap(), "2027-01-16T08:00:00Z");
        assert_eq!(
            super::expiry("2030-01-01T00:00:00Z", now).unwrap(),
            "2030-01-01T00:00:00Z"
        );
        assert_eq!(super::expiry("0s", now), Err(super::ExpiryError::AtOnce));
        assert_eq!(
            super::expiry("2020-01-01T00:00:00Z", now),
            Err(super::ExpiryError::Past)
        );
        assert!(matches!(
            super::expiry("soon", now),
            Err(super::ExpiryError::Unreadable(_))
        ));
    }

    use super::*;

    const SHA: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    fn good() -> String {
        format!(
            r#"{{"name":"flotilla-agent","version":"1.2.0-rc.1","serial":7,"expires":"2030-01-01T00:00:00Z",
"artifacts":[{{"os":"linux","arch":"x86_64","blob":"{SHA}","sha256":"{SHA}","size":0}},
{{"os":"darwin","arch":"aarch64","url":"https://example.invalid/a","sha256":"{SHA}","size":10}}]}}"#
        )
    }

    fn err(json: &str) -> String {
        Manifest::parse(json.as_bytes()).unwrap_err().to_string()
    }

    #[test]
    fn parses_a_good_manifest() {
        let m = Manifest::parse(good().as_bytes()).unwrap();
        assert_eq!(m.serial, 7);
        assert_eq!(m.expires_ms().unwrap(), 1_893_456_000_000);
        assert_eq!(m.artifact_for("darwin", "aarch64").unwrap().size, 10);
        assert!(m.artifact_for("darwin", "x86_64").is_none());
        assert_eq!(Manifest::parse(&m.to_bytes()).unwrap(), m);
        assert_eq!(m.artifacts[0].platform(), "linux-x86_64");
    }

    #[test]
    fn errors_name_the_field() {
        let g = good();
        assert!(err(&g.replace(
            &format!("\"sha256\":\"{SHA}\",\"size\":10"),
            "\"sha256\":\"abc\",\"size\":10"
        ))
        .starts_with("artifacts[1].sha256: "));
        assert!(err(&g.replace("flotilla-agent", "")).starts_with("name: "));
        assert!(err(&g.replace("1.2.0-rc.1", "1/2")).starts_with("version: "));
        assert!(err(&g.replace("2030-01-01T00:00:00Z", "next year")).starts_with("expires: "));
        assert!(
            err(&g.replace("\"url\":\"https://example.invalid/a\",", ""))
                .starts_with("artifacts[1].url: ")
        );
        assert!(err(&g.replace(
            "\"url\":\"https://example.invalid/a\",",
            &format!("\"url\":\"x\",\"blob\":\"{SHA}\",")
        ))
        .contains("not both"));
        assert!(
            err(&g.replace("darwin", "linux").replace("aarch64", "x86_64"))
                .starts_with("artifacts[1].os: platform linux-x86_64 is also artifacts[0]")
        );
        assert!(
            err(&g.replace("\"os\":\"darwin\"", "\"os\":\"\"")).starts_with("artifacts[1].os: ")
        );
        assert!(err(&g.replace(SHA, &SHA.to_uppercase())).starts_with("artifacts[0].blob: "));
        let empty = r#"{"name":"a","version":"1","serial":1,"expires":"2030-01-01T00:00:00Z","artifacts":[]}"#;
        assert!(err(empty).starts_with("artifacts: "));
    }

    #[test]
    fn json_errors_have_line_and_column() {
        let e = Manifest::parse(b"{\n  \"name\": \"a\",\n  \"color\": 1}").unwrap_err();
        match e {
            ManifestError::Json {
                line,
                column,
                ref message,
            } => {
                assert_eq!(line, 3);
                assert!(column > 0);
                assert!(message.contains("unknown field `color`"), "{message}");
                assert!(!message.contains("at line"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert!(err("{").starts_with("manifest 1:1: "));
        assert!(err(&good().replace("\"serial\":7", "\"serial\":\"7\"")).contains("invalid type"));
    }

    #[test]
    fn artifact_of_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("empty");
        std::fs::write(&p, b"").unwrap();
        let a = Artifact::of_file(&p, "linux", "x86_64", None).unwrap();
        assert_eq!(
            (a.sha256.as_str(), a.blob.as_deref(), a.size),
            (SHA, Some(SHA), 0)
        );
        let a = Artifact::of_file(&p, "linux", "x86_64", Some("https://x/y".into())).unwrap();
        assert_eq!((a.blob, a.url.as_deref()), (None, Some("https://x/y")));
        let e = Artifact::of_file(&dir.path().join("nope"), "linux", "x86_64", None).unwrap_err();
        assert!(e.to_string().contains("nope"), "{e}");
    }

    #[test]
    fn platform_words() {
        assert_eq!(Platform::words("macos", "aarch64"), ("darwin", "aarch64"));
        assert_eq!(Platform::words("linux", "x86_64"), ("linux", "x86_64"));
        let (os, arch) = Platform::current();
        assert_eq!(Platform::split(&Platform::name(os, arch)), Some((os, arch)));
        assert_eq!(Platform::split("linux"), None);
        assert_eq!(format_rfc3339_ms(1_893_456_000_000), "2030-01-01T00:00:00Z");
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:01.5Z"), Ok(1500));
    }
}

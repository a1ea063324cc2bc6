//! Container image references, `[domain/]path[:tag][@sha256:<64 hex>]`, parsed by the
//! grammar of the distribution project's `reference` package (what Docker and Podman
//! accept): lowercase path components of letters and digits joined by `.`, `_`, `__`
//! or runs of `-`; a first component that holds a `.` or a `:`, or is `localhost`, is a
//! registry domain (with an optional port); a tag of at most 128 of `[A-Za-z0-9_.-]`
//! not starting with `.` or `-`; a digest `sha256:` and 64 lowercase hex digits.

use std::fmt;

/// A parsed image reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ImageRef {
    /// The registry domain (`ghcr.io`, `localhost:5000`), when one is written.
    pub domain: Option<String>,
    /// The repository path (`open-webui/open-webui`).
    pub path: String,
    /// The tag, when one is written.
    pub tag: Option<String>,
    /// The digest (`sha256:…`), when one is written.
    pub digest: Option<String>,
}

impl ImageRef {
    /// Parses `text`.
    ///
    /// # Errors
    /// A sentence saying what is wrong with it (which part, and why).
    pub fn parse(text: &str) -> Result<ImageRef, String> {
        if text.is_empty() {
            return Err("the image reference is empty".into());
        }
        if let Some(c) = text.chars().find(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!(
                "an image reference has no spaces or control characters (found {c:?})"
            ));
        }
        let (rest, digest) = match text.split_once('@') {
            Some((rest, d)) => (rest, Some(parse_digest(d)?)),
            None => (text, None),
        };
        // A `:` after the last `/` starts the tag (before it, it is a registry port).
        let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match rest[last_slash..].rfind(':') {
            Some(i) => {
                let at = last_slash + i;
                (&rest[..at], Some(parse_tag(&rest[at + 1..])?))
            }
            None => (rest, None),
        };
        if name.is_empty() {
            return Err("the image reference has no repository name".into());
        }
        if name.len() > 255 {
            return Err(format!(
                "the repository name is {} characters long; at most 255",
                name.len()
            ));
        }
        let (domain, path) = match name.split_once('/') {
            Some((first, path))
                if first.contains(['.', ':'])
                    || first == "localhost"
                    || first.chars().any(|c| c.is_ascii_uppercase()) =>
            {
                check_domain(first)?;
                (Some(first.to_string()), path)
            }
            _ => (None, name),
        };
        for component in path.split('/') {
            check_path_component(component)?;
        }
        Ok(ImageRef {
            domain,
            path: path.to_string(),
            tag,
            digest,
        })
    }

    /// The repository name: `domain/path` or `path`.
    pub fn name(&self) -> String {
        match &self.domain {
            Some(d) => format!("{d}/{}", self.path),
            None => self.path.clone(),
        }
    }

    /// The tag, `latest` when neither a tag nor a digest is written (what an engine
    /// assumes); `None` for a reference by digest alone.
    pub fn tag_or_latest(&self) -> Option<&str> {
        match (&self.tag, &self.digest) {
            (Some(t), _) => Some(t),
            (None, None) => Some("latest"),
            (None, Some(_)) => None,
        }
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

fn parse_digest(d: &str) -> Result<String, String> {
    let Some(hex) = d.strip_prefix("sha256:") else {
        return Err(format!(
            "the digest `{d}` is not `sha256:` followed by 64 hex digits"
        ));
    };
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!(
            "the digest `{d}` is not `sha256:` followed by 64 hex digits ({} characters after `sha256:`)",
            hex.len()
        ));
    }
    if hex.bytes().any(|b| b.is_ascii_uppercase()) {
        return Err(format!("the digest `{d}` must be written in lowercase hex"));
    }
    Ok(d.to_string())
}

fn parse_tag(t: &str) -> Result<String, String> {
    if t.is_empty() {
        return Err("the tag after `:` is empty".into());
    }
    if t.len() > 128 {
        return Err(format!(
            "the tag is {} characters long; at most 128",
            t.len()
        ));
    }
    if t.starts_with(['.', '-']) {
        return Err(format!("the tag `{t}` must not start with `.` or `-`"));
    }
    if let Some(c) = t
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        return Err(format!(
            "the tag `{t}` has `{c}`; a tag is letters, digits, `_`, `.` and `-`"
        ));
    }
    Ok(t.to_string())
}

fn check_domain(d: &str) -> Result<(), String> {
    let (host, port) = match d.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || d.starts_with('[') => (h, Some(p)),
        _ => (d, None),
    };
    if let Some(p) = port {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!(
                "the registry `{d}` has port `{p}`, which is not a number"
            ));
        }
        if !p.parse::<u16>().is_ok_and(|n| n > 0) {
            return Err(format!(
                "the registry `{d}` has port {p}, which is not a TCP port (1 to 65535)"
            ));
        }
    }
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let ok_label = |l: &str| {
        !l.is_empty()
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if host.parse::<core::net::Ipv6Addr>().is_ok() || host.split('.').all(ok_label) {
        Ok(())
    } else {
        Err(format!("the registry `{d}` is not a host name"))
    }
}

fn check_path_component(c: &str) -> Result<(), String> {
    if c.is_empty() {
        return Err("the repository name has an empty part (`//`, or a `/` at an end)".into());
    }
    if let Some(u) = c.chars().find(|c| c.is_ascii_uppercase()) {
        return Err(format!(
            "the repository name `{c}` has the uppercase letter `{u}`; repository names are lowercase"
        ));
    }
    let bytes = c.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
        return Err(format!(
            "the repository name `{c}` must start and end with a letter or digit"
        ));
    }
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if alnum(b) {
            i += 1;
            continue;
        }
        // A separator: `.`, `_`, `__`, or a run of `-`, between alphanumerics.
        let start = i;
        match b {
            b'.' => i += 1,
            b'_' => i += if bytes.get(i + 1) == Some(&b'_') { 2 } else { 1 },
            b'-' => {
                while bytes.get(i) == Some(&b'-') {
                    i += 1;
                }
            }
            _ => {
                return Err(format!(
                    "the repository name `{c}` has `{}`; it is lowercase letters, digits and the separators `.`, `_`, `__`, `-`",
                    b as char
                ))
            }
        }
        if !bytes.get(i).copied().is_some_and(alnum) {
            return Err(format!(
                "the repository name `{c}` has `{}` where a letter or digit must follow a separator",
                &c[start..=i.min(c.len() - 1)]
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_that_engines_accept_parse() {
        let r = ImageRef::parse("ghcr.io/open-webui/open-webui:main").unwrap();
        assert_eq!(r.domain.as_deref(), Some("ghcr.io"));
        assert_eq!(r.path, "open-webui/open-webui");
        assert_eq!(r.tag.as_deref(), Some("main"));
        let r = ImageRef::parse("localhost:5000/a/b_c__d--e.f").unwrap();
        assert_eq!(r.domain.as_deref(), Some("localhost:5000"));
        assert_eq!(r.tag_or_latest(), Some("latest"));
        let d = format!("sha256:{}", "ab".repeat(32));
        let r = ImageRef::parse(&format!("busybox:1.36@{d}")).unwrap();
        assert_eq!(r.digest.as_deref(), Some(d.as_str()));
        assert_eq!(r.to_string(), format!("busybox:1.36@{d}"));
        let r = ImageRef::parse(&format!("ollama/ollama@{d}")).unwrap();
        assert_eq!(r.tag_or_latest(), None);
        assert_eq!(r.name(), "ollama/ollama");
    }

    #[test]
    fn bad_references_say_what_is_wrong() {
        let err = |s: &str| ImageRef::parse(s).unwrap_err();
        assert!(err("").contains("empty"));
        assert!(err("Busybox").contains("uppercase"), "{}", err("Busybox"));
        assert!(err("busybox:").contains("tag after `:` is empty"));
        assert!(err("busybox:-x").contains("must not start"));
        assert!(err("busybox@sha256:abc").contains("64 hex digits"));
        assert!(err("busybox@md5:abc").contains("sha256:"));
        assert!(err("a//b").contains("empty part"));
        assert!(err("a..b").contains("letter or digit must follow"));
        assert!(err("a b").contains("spaces"));
        assert!(err("-a").contains("start and end"));
        assert!(err("a/b:c:d").contains("has `:`"), "{}", err("a/b:c:d"));
        assert!(err("reg.io:x/a").contains("not a number"));
        assert!(err("ghcr.io:99999/x").contains("not a TCP port"));
        assert!(err("ghcr.io:0/x").contains("not a TCP port"));
    }
}

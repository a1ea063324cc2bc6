//! What looks like a secret, and so is never written into an inventory (an
//! inventory is published as revisions and shown in plans, where no secret may go).
//!
//! A value looks like a secret when its variable's name has a word (between `_`, `-`
//! or `.`) `KEY`, `APIKEY`, `TOKEN`, `SECRET`, `PASSWORD`, `PASSWD`, `PASS`,
//! `CREDENTIALS` or `CREDENTIAL` and its last word does not say it names something
//! else about one (`TOKEN_LIMIT`, `MAX_KEY_LENGTH`, `SSL_KEY_FILE`: see
//! [`NOT_THE_SECRET`]), or when the value is a URL with a password
//! (`postgres://user:pass@db/x`) or starts like a well-known token (`sk-`, `hf_`,
//! `ghp_`, `github_pat_`, `xoxb-`).

/// Last words of a name that say it is a count, size, time, switch or place about a
/// secret rather than the secret: `TOKEN_LIMIT=4096`, `API_KEY_FILE=/run/secrets/k`.
pub const NOT_THE_SECRET: &[&str] = &[
    "LIMIT", "LIMITS", "MAX", "MIN", "COUNT", "SIZE", "LENGTH", "LEN", "TTL", "TIMEOUT", "EXPIRY",
    "EXPIRES", "FILE", "PATH", "DIR", "HEADER", "NAME", "TYPE", "ENABLED", "REQUIRED", "ID",
];

/// Whether variable (or `--flag`) `name` is named like a secret.
pub fn secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    let words: Vec<&str> = upper
        .split(['_', '-', '.'])
        .filter(|w| !w.is_empty())
        .collect();
    if words.len() > 1 && words.last().is_some_and(|w| NOT_THE_SECRET.contains(w)) {
        return false;
    }
    words.iter().any(|w| {
        matches!(
            *w,
            "KEY"
                | "APIKEY"
                | "TOKEN"
                | "SECRET"
                | "PASSWORD"
                | "PASSWD"
                | "PASS"
                | "CREDENTIALS"
                | "CREDENTIAL"
        )
    })
}

/// Whether the value `value` of variable `name` should not be written into an
/// inventory (see the module's documentation for the rule).
pub fn looks_secret(name: &str, value: &str) -> bool {
    if value.is_empty() {
        return false;
    }
    let by_prefix = ["sk-", "hf_", "ghp_", "github_pat_", "xoxb-"]
        .iter()
        .any(|p| value.starts_with(p));
    secret_name(name) || by_prefix || url_with_password(value)
}

/// Whether `text` is one reference and nothing else (`${NAME}`, `$NAME`,
/// `${NAME:?message}`): no literal of it reaches the inventory.
pub fn plain_reference(text: &str) -> bool {
    use crate::interp::{Op, Piece};
    matches!(
        crate::interp::parse(text).as_deref(),
        Ok([Piece::Var {
            op: Op::Plain | Op::Required | Op::RequiredNonEmpty,
            ..
        }])
    )
}

/// The variable `text` refers to when it is one reference and nothing else
/// (`${NAME}`, `$NAME`, `${NAME:?message}`), as [`plain_reference`] decides.
pub fn referenced(text: &str) -> Option<String> {
    use crate::interp::{Op, Piece};
    match crate::interp::parse(text).ok()?.as_slice() {
        [Piece::Var {
            name,
            op: Op::Plain | Op::Required | Op::RequiredNonEmpty,
            ..
        }] => Some(name.clone()),
        _ => None,
    }
}

/// `scheme://user:password@host…`.
fn url_with_password(value: &str) -> bool {
    let Some((_, rest)) = value.split_once("://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    authority
        .rsplit_once('@')
        .is_some_and(|(userinfo, _)| userinfo.split_once(':').is_some_and(|(_, p)| !p.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::{looks_secret, plain_reference};

    #[test]
    fn secret_looking_values() {
        assert!(looks_secret("LITELLM_MASTER_KEY", "sk-1234"));
        assert!(looks_secret("POSTGRES_PASSWORD", "dbpassword9090"));
        assert!(looks_secret("WEBUI_SECRET_KEY", "x"));
        assert!(looks_secret(
            "DATABASE_URL",
            "postgresql://llm:pw@db:5432/litellm"
        ));
        assert!(looks_secret("OPENAI", "sk-proj-abc"));
        assert!(!looks_secret(
            "DATABASE_URL",
            "postgresql://db:5432/litellm"
        ));
        assert!(!looks_secret("OLLAMA_BASE_URL", "http://ollama:11434"));
        assert!(!looks_secret("WEBUI_AUTH", "False"));
        assert!(!looks_secret("KEYBOARD", "us"));
        assert!(!looks_secret("TOKEN_LIMIT", "4096"));
        assert!(!looks_secret("SSL_KEY_FILE", "/certs/key.pem"));
        assert!(!looks_secret("MAX_TOKEN_COUNT", "8"));
        assert!(looks_secret("TOKEN", "abc"));
        assert!(looks_secret("KEY", "abc"));
        assert!(super::secret_name("--api-key"));
        assert!(!super::secret_name("--api-key-file"));
        assert!(!looks_secret("HF_TOKEN", ""));
        assert!(plain_reference("${HF_TOKEN}"));
        assert!(!plain_reference("${DB_PASSWORD:-hunter2}"));
    }
}

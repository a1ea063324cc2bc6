//! `${...}` references in commands, environment values and endpoints.
//!
//! Grammar: `${name(.name)*}` is replaced by what the resolver returns for the dotted
//! name; `$${` writes a literal `${`. Any other `$` is kept as is.

/// Replaces every `${ref}` in `text` with `resolve(ref)`.
///
/// # Errors
/// The first reference the resolver does not know, or an unclosed `${`.
pub fn substitute(
    text: &str,
    mut resolve: impl FnMut(&str) -> Option<String>,
) -> Result<String, RefError> {
    if !text.contains('$') {
        return Ok(text.to_string());
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i..];
        if let Some(tail) = after.strip_prefix("$${") {
            out.push_str("${");
            rest = tail;
        } else if let Some(tail) = after.strip_prefix("${") {
            let end = tail
                .find('}')
                .ok_or_else(|| RefError::Unclosed(text.to_string()))?;
            let name = tail[..end].trim();
            match resolve(name) {
                Some(v) => out.push_str(&v),
                None => return Err(RefError::Unknown(name.to_string())),
            }
            rest = &tail[end + 1..];
        } else {
            out.push('$');
            rest = &after[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Every `${ref}` name in `text`, in order.
pub fn references(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let _ = substitute(text, |n| {
        names.push(n.to_string());
        Some(String::new())
    });
    names
}

/// Why a substitution failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefError {
    /// A reference that resolves to nothing.
    #[error("unknown reference `${{{0}}}`")]
    Unknown(String),
    /// `${` without `}`.
    #[error("unclosed `${{` in `{0}`")]
    Unclosed(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substitutes_and_escapes() {
        let r = substitute("a=${x.y} b=$${x} c=$HOME", |n| {
            (n == "x.y").then(|| "1".into())
        });
        assert_eq!(r.unwrap(), "a=1 b=${x} c=$HOME");
        assert_eq!(
            substitute("${nope}", |_| None),
            Err(RefError::Unknown("nope".into()))
        );
        assert!(matches!(
            substitute("${x", |_| None),
            Err(RefError::Unclosed(_))
        ));
        assert_eq!(references("${a}-${b.c}"), vec!["a", "b.c"]);
    }
}

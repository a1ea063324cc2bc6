//! Kubernetes' syntax of names, labels and quantities (pure), shared by the
//! inventory's `kubernetes` tables and `sessions.toml`'s `[runtime.kubernetes]`:
//! what the API server would refuse is refused where it is written.

/// Whether `s` is a DNS-1123 label (RFC 1123; Kubernetes' names of namespaces,
/// containers and most objects): `Err` says what is wrong.
pub fn dns_label(s: &str) -> Result<(), &'static str> {
    if s.is_empty() || s.len() > 63 {
        return Err("must be 1 to 63 characters");
    }
    if !s
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err("may hold only lowercase letters, digits and `-`");
    }
    if s.starts_with('-') || s.ends_with('-') {
        return Err("must start and end with a letter or digit");
    }
    Ok(())
}

/// Whether `s` is a DNS-1035 label (RFC 1035; what a Service's name must be, the API
/// server's `ValidateServiceName`): a DNS-1123 label that starts with a letter.
pub fn dns1035_label(s: &str) -> Result<(), &'static str> {
    dns_label(s)?;
    if !s.starts_with(|c: char| c.is_ascii_lowercase()) {
        return Err("must start with a letter (it names a Service: a DNS-1035 label)");
    }
    Ok(())
}

/// Whether `q` is a Kubernetes quantity (`resource.Quantity`'s serialisation: a
/// signed decimal number, then a binary suffix `Ki`…`Ei`, a decimal one `n u m k M G
/// T P E`, or an exponent `e3`/`E3`; k8s.io/apimachinery `pkg/api/resource`).
pub fn is_quantity(q: &str) -> bool {
    let digits_end = q
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || (i == 0 && matches!(c, '+' | '-'))))
        .map_or(q.len(), |(i, _)| i);
    let (num, suffix) = q.split_at(digits_end);
    let num = num.trim_start_matches(['+', '-']);
    let number_ok = !num.is_empty() && num != "." && num.matches('.').count() <= 1;
    let suffix_ok = matches!(
        suffix,
        "" | "Ki"
            | "Mi"
            | "Gi"
            | "Ti"
            | "Pi"
            | "Ei"
            | "n"
            | "u"
            | "m"
            | "k"
            | "M"
            | "G"
            | "T"
            | "P"
            | "E"
    ) || (suffix.len() > 1
        && matches!(&suffix[..1], "e" | "E")
        && suffix[1..]
            .trim_start_matches(['+', '-'])
            .chars()
            .all(|c| c.is_ascii_digit())
        && !suffix[1..].trim_start_matches(['+', '-']).is_empty());
    number_ok && suffix_ok
}

/// Whether `k` is a label key (a qualified name, with an optional DNS-1123 subdomain
/// prefix and `/`; <https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#syntax-and-character-set>):
/// `Err` says what is wrong.
pub fn label_key(k: &str) -> Result<(), &'static str> {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    if let Some(p) = prefix {
        if p.is_empty() || p.len() > 253 || p.split('.').any(|l| dns_label(l).is_err()) {
            return Err("its prefix must be a DNS subdomain (lowercase labels joined by `.`)");
        }
    }
    if name.is_empty() || name.len() > 63 {
        return Err("its name must be 1 to 63 characters");
    }
    label_value(name).map_err(|_| {
        "its name may hold only letters, digits, `-`, `_` and `.`, and must start and end with a letter or digit"
    })
}

/// Whether `v` is a label value (empty, or up to 63 letters, digits, `-`, `_`, `.`
/// starting and ending with a letter or digit): `Err` says what is wrong.
pub fn label_value(v: &str) -> Result<(), &'static str> {
    if v.is_empty() {
        return Ok(());
    }
    if v.len() > 63 {
        return Err("must be at most 63 characters");
    }
    let alnum = |c: char| c.is_ascii_alphanumeric();
    if !v.chars().all(|c| alnum(c) || matches!(c, '-' | '_' | '.')) {
        return Err("may hold only letters, digits, `-`, `_` and `.`");
    }
    if !v.starts_with(alnum) || !v.ends_with(alnum) {
        return Err("must start and end with a letter or digit");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_keys_and_values_as_the_api_checks_them() {
        for ok in [
            "app",
            "kubernetes.io/arch",
            "node.kubernetes.io/instance-type",
            "a_b.c",
        ] {
            assert!(label_key(ok).is_ok(), "{ok}");
        }
        for bad in ["", "bad key!", "/x", "Example.com/x", "x/", "-x"] {
            assert!(label_key(bad).is_err(), "{bad}");
        }
        for ok in ["", "arm64", "a.b_c-d"] {
            assert!(label_value(ok).is_ok(), "{ok}");
        }
        for bad in ["x y", "-a", "a-", &"a".repeat(64)] {
            assert!(label_value(bad).is_err(), "{bad}");
        }
    }
}

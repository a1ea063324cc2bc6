//! Compose's variable interpolation (the Compose Specification, "Interpolation"):
//! `$NAME`, `${NAME}`, `${NAME:-default}`, `${NAME-default}`, `${NAME:?message}`,
//! `${NAME?message}`, `${NAME:+replacement}`, `${NAME+replacement}` (defaults and
//! replacements may nest), and `$$` for a literal `$`.
//!
//! A value is first parsed into [`Piece`]s, then rendered one of two ways:
//! - [`resolve`]: now, from the variables given (what compose does when it loads the
//!   file) — for the fields Flotilla takes as they are (image, ports, volumes…);
//! - [`to_flotilla`]: as Flotilla's own reference `${env.NAME}`, resolved from the
//!   environment Flotilla runs in when the component starts — for `environment` values
//!   and `command` arguments, so that no value of the importing shell (a token, a
//!   password) is written into the inventory.

use std::collections::BTreeMap;

/// One part of an interpolated value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Literal text (`$$` already turned into `$`).
    Text(String),
    /// A variable.
    Var {
        /// Its name.
        name: String,
        /// What happens when it is unset or empty.
        op: Op,
        /// The default, message or replacement (may hold variables).
        arg: Vec<Piece>,
    },
}

/// The operator of a `${NAME<op>arg}` reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `$NAME`, `${NAME}`.
    Plain,
    /// `${NAME:-default}`: the default when unset or empty.
    DefaultIfEmpty,
    /// `${NAME-default}`: the default when unset.
    DefaultIfUnset,
    /// `${NAME:?message}`: an error when unset or empty.
    RequiredNonEmpty,
    /// `${NAME?message}`: an error when unset.
    Required,
    /// `${NAME:+replacement}`: the replacement when set and not empty, else empty.
    AltIfNonEmpty,
    /// `${NAME+replacement}`: the replacement when set, else empty.
    AltIfSet,
}

impl Op {
    fn text(self) -> &'static str {
        match self {
            Op::Plain => "",
            Op::DefaultIfEmpty => ":-",
            Op::DefaultIfUnset => "-",
            Op::RequiredNonEmpty => ":?",
            Op::Required => "?",
            Op::AltIfNonEmpty => ":+",
            Op::AltIfSet => "+",
        }
    }
}

/// Parses `text` into pieces.
///
/// # Errors
/// An unclosed `${`, or a `${…}` whose name is not `[A-Za-z_][A-Za-z0-9_]*`, as a
/// message (the caller knows where the value is).
pub fn parse(text: &str) -> Result<Vec<Piece>, String> {
    let chars: Vec<char> = text.chars().collect();
    let (pieces, end) = parse_until(&chars, 0, false)?;
    debug_assert_eq!(end, chars.len());
    Ok(pieces)
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_name(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Parses from `i` until the end, or (inside braces) until the `}` closing them.
fn parse_until(chars: &[char], mut i: usize, braced: bool) -> Result<(Vec<Piece>, usize), String> {
    let mut out = Vec::new();
    let mut text = String::new();
    while i < chars.len() {
        let c = chars[i];
        if braced && c == '}' {
            break;
        }
        if c != '$' {
            text.push(c);
            i += 1;
            continue;
        }
        match chars.get(i + 1) {
            Some('$') => {
                text.push('$');
                i += 2;
            }
            Some('{') => {
                let start = i + 2;
                let mut j = start;
                while j < chars.len() && is_name(chars[j]) {
                    j += 1;
                }
                let name: String = chars[start..j].iter().collect();
                if name.is_empty() || !is_name_start(chars[start]) {
                    return Err(format!(
                        "`${{` must be followed by a variable name (`${{NAME}}`); write `$$` for a literal `$`: `{}`",
                        chars.iter().collect::<String>()
                    ));
                }
                let rest: String = chars[j..chars.len().min(j + 2)].iter().collect();
                let op = if rest.starts_with('}') {
                    Op::Plain
                } else if rest.starts_with(":-") {
                    Op::DefaultIfEmpty
                } else if rest.starts_with(":?") {
                    Op::RequiredNonEmpty
                } else if rest.starts_with(":+") {
                    Op::AltIfNonEmpty
                } else if rest.starts_with('-') {
                    Op::DefaultIfUnset
                } else if rest.starts_with('?') {
                    Op::Required
                } else if rest.starts_with('+') {
                    Op::AltIfSet
                } else {
                    return Err(format!(
                        "unclosed or malformed `${{{name}`: write `${{{name}}}`, `${{{name}:-default}}` or `$$` for a literal `$`"
                    ));
                };
                let (arg, end) = parse_until(chars, j + op.text().len(), true)?;
                if chars.get(end) != Some(&'}') {
                    return Err(format!("unclosed `${{{name}`: a `}}` is missing"));
                }
                if !text.is_empty() {
                    out.push(Piece::Text(std::mem::take(&mut text)));
                }
                out.push(Piece::Var { name, op, arg });
                i = end + 1;
            }
            Some(&n) if is_name_start(n) => {
                let mut j = i + 1;
                while j < chars.len() && is_name(chars[j]) {
                    j += 1;
                }
                if !text.is_empty() {
                    out.push(Piece::Text(std::mem::take(&mut text)));
                }
                out.push(Piece::Var {
                    name: chars[i + 1..j].iter().collect(),
                    op: Op::Plain,
                    arg: Vec::new(),
                });
                i = j;
            }
            // A `$` before anything else is kept.
            _ => {
                text.push('$');
                i += 1;
            }
        }
    }
    if !text.is_empty() {
        out.push(Piece::Text(text));
    }
    Ok((out, i))
}

/// Whether `pieces` hold any variable.
pub fn has_vars(pieces: &[Piece]) -> bool {
    pieces.iter().any(|p| matches!(p, Piece::Var { .. }))
}

/// The pieces written back as compose wrote them (for messages).
pub fn source(pieces: &[Piece]) -> String {
    let mut s = String::new();
    for p in pieces {
        match p {
            Piece::Text(t) => s.push_str(&t.replace('$', "$$")),
            Piece::Var { name, op, arg } => {
                s.push_str("${");
                s.push_str(name);
                s.push_str(op.text());
                s.push_str(&source(arg));
                s.push('}');
            }
        }
    }
    s
}

/// What [`resolve`] used.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolution {
    /// The value.
    pub value: String,
    /// Variables taken from the variables given, by name.
    pub from_variables: Vec<String>,
    /// Variables that were unset and had no default: replaced by an empty string (as
    /// compose does, with a warning).
    pub unset: Vec<String>,
    /// Variables whose default (or replacement) was taken.
    pub defaulted: Vec<String>,
}

/// Substitutes every variable from `vars`, as compose does when it loads the file.
///
/// # Errors
/// A `${NAME:?message}` or `${NAME?message}` whose variable is unset (or empty):
/// the message, naming the variable.
pub fn resolve(pieces: &[Piece], vars: &BTreeMap<String, String>) -> Result<Resolution, String> {
    let mut r = Resolution::default();
    resolve_into(pieces, vars, &mut r)?;
    Ok(r)
}

fn resolve_into(
    pieces: &[Piece],
    vars: &BTreeMap<String, String>,
    r: &mut Resolution,
) -> Result<(), String> {
    for p in pieces {
        match p {
            Piece::Text(t) => r.value.push_str(t),
            Piece::Var { name, op, arg } => {
                let v = vars.get(name);
                let empty = v.is_none_or(|v| v.is_empty());
                let take = |r: &mut Resolution| {
                    if let Some(v) = v {
                        r.value.push_str(v);
                        r.from_variables.push(name.clone());
                    }
                };
                match op {
                    Op::Plain => {
                        if v.is_none() {
                            r.unset.push(name.clone());
                        }
                        take(r);
                    }
                    Op::DefaultIfEmpty if empty => {
                        r.defaulted.push(name.clone());
                        resolve_into(arg, vars, r)?
                    }
                    Op::DefaultIfUnset if v.is_none() => {
                        r.defaulted.push(name.clone());
                        resolve_into(arg, vars, r)?
                    }
                    Op::RequiredNonEmpty if empty => {
                        return Err(required(name, arg, vars));
                    }
                    Op::Required if v.is_none() => return Err(required(name, arg, vars)),
                    Op::AltIfNonEmpty if !empty => {
                        r.defaulted.push(name.clone());
                        resolve_into(arg, vars, r)?
                    }
                    Op::AltIfSet if v.is_some() => {
                        r.defaulted.push(name.clone());
                        resolve_into(arg, vars, r)?
                    }
                    Op::AltIfNonEmpty | Op::AltIfSet => {}
                    _ => take(r),
                }
            }
        }
    }
    Ok(())
}

fn required(name: &str, arg: &[Piece], vars: &BTreeMap<String, String>) -> String {
    let message = resolve(arg, vars).map(|r| r.value).unwrap_or_default();
    if message.is_empty() {
        format!("required variable `{name}` is not set")
    } else {
        format!("required variable `{name}` is not set: {message}")
    }
}

/// A value rendered for Flotilla: the text, and what could not be kept as it was.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rendered {
    /// Flotilla's form: `${NAME}` as `${env.NAME}`, a literal `${` as `$${`.
    pub value: String,
    /// Each reference whose default or replacement could not be kept, as compose
    /// wrote it, with what was written instead.
    pub changed: Vec<String>,
}

/// Renders `pieces` with Flotilla's references: `$NAME`, `${NAME}` and
/// `${NAME:?message}` become `${env.NAME}` (taken from the environment Flotilla runs
/// in when the component starts, an error there when unset); a reference with a
/// default (`${NAME:-default}`) becomes its default (Flotilla's references have none),
/// and one with a replacement (`${NAME:+x}`) becomes empty; both are listed in
/// [`Rendered::changed`].
pub fn to_flotilla(pieces: &[Piece]) -> Rendered {
    let mut r = Rendered::default();
    flotilla_into(pieces, &mut r);
    r
}

fn flotilla_into(pieces: &[Piece], r: &mut Rendered) {
    for p in pieces {
        match p {
            Piece::Text(t) => r.value.push_str(&t.replace("${", "$${")),
            Piece::Var { name, op, arg } => match op {
                Op::Plain | Op::Required | Op::RequiredNonEmpty => {
                    r.value.push_str("${env.");
                    r.value.push_str(name);
                    r.value.push('}');
                }
                Op::DefaultIfEmpty | Op::DefaultIfUnset => {
                    let mut inner = Rendered::default();
                    flotilla_into(arg, &mut inner);
                    r.changed.push(format!(
                        "`{}` is written as its default `{}` (write `${{env.{name}}}` to take it from the environment flotilla runs in)",
                        source(std::slice::from_ref(p)),
                        inner.value
                    ));
                    r.value.push_str(&inner.value);
                    r.changed.extend(inner.changed);
                }
                Op::AltIfNonEmpty | Op::AltIfSet => {
                    r.changed.push(format!(
                        "`{}` is written as empty (flotilla's references have no replacement form)",
                        source(std::slice::from_ref(p))
                    ));
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parses_every_form() {
        let p = parse("a$$b ${X} $Y ${Z:-d${W}} ${V?must}").unwrap();
        assert_eq!(source(&p), "a$$b ${X} ${Y} ${Z:-d${W}} ${V?must}");
        assert!(parse("${").is_err());
        assert!(parse("${X").is_err());
        assert!(parse("${1}").is_err());
        assert_eq!(
            parse("cost: 5$").unwrap(),
            vec![Piece::Text("cost: 5$".into())]
        );
    }

    #[test]
    fn resolves_like_compose() {
        let v = vars(&[("TAG", "v1"), ("EMPTY", "")]);
        let r = |s: &str| resolve(&parse(s).unwrap(), &v);
        assert_eq!(r("img:${TAG}").unwrap().value, "img:v1");
        assert_eq!(r("img:${TAG}").unwrap().from_variables, ["TAG"]);
        assert_eq!(r("${NOPE:-main}").unwrap().value, "main");
        assert_eq!(r("${EMPTY:-x}").unwrap().value, "x");
        assert_eq!(r("${EMPTY-x}").unwrap().value, "");
        assert_eq!(r("${TAG:+yes}").unwrap().value, "yes");
        assert_eq!(r("a${NOPE}b").unwrap().unset, ["NOPE"]);
        assert_eq!(
            r("${NOPE:?set it}").unwrap_err(),
            "required variable `NOPE` is not set: set it"
        );
    }

    #[test]
    fn renders_flotilla_references() {
        let f = |s: &str| to_flotilla(&parse(s).unwrap());
        assert_eq!(f("Bearer ${TOKEN}").value, "Bearer ${env.TOKEN}");
        assert_eq!(f("$HOME/x").value, "${env.HOME}/x");
        assert_eq!(f("$${NOT}").value, "$${NOT}");
        assert_eq!(f("$$HOME").value, "$HOME");
        let d = f("${PORT:-8080}");
        assert_eq!(d.value, "8080");
        assert_eq!(d.changed.len(), 1, "{:?}", d.changed);
        assert_eq!(f("${KEY:?needed}").value, "${env.KEY}");
    }
}

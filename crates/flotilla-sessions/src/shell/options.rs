//! Option grammars: GNU-style scanning of a wrapper's options ([`scan`]: clustered
//! short options, `--long=value` or `--long value`, `--` ends options), with GNU
//! getopt's permutation ([`scan_permuted`]), long options read by any prefix
//! ([`could_name`]), and run-time words that could split into several ([`splits`]).

use super::Arg;

/// Whether `--WORD` could name the long option `option` in a parse-options program
/// (git, GNU tools): the whole name, or a prefix of it (git and getopt_long accept any
/// unambiguous prefix; an ambiguous one is refused, so treating every prefix as the
/// option is the safe reading).
pub fn could_name(word: &str, option: &str) -> bool {
    !word.is_empty() && option.starts_with(word)
}

/// Whether a run-time word could split into several words at run time (it is not one
/// double-quoted string).
pub(super) fn splits(d: &str) -> bool {
    !(d.len() >= 2 && d.starts_with('"') && d.ends_with('"'))
}

/// Which options a wrapper takes (GNU-style: clustered short options, `--long=value`
/// or `--long value`, `--` ends options, the first operand ends options).
#[derive(Default)]
pub(super) struct OptSpec {
    pub(super) short_value: &'static str,
    pub(super) short_optional: &'static str,
    pub(super) short_flags: &'static str,
    pub(super) long_value: &'static [&'static str],
    pub(super) long_optional: &'static [&'static str],
    pub(super) long_flags: &'static [&'static str],
    /// `-5`, `-10` (nice's old adjustment form).
    pub(super) numeric_short: bool,
}

/// What [`scan`] found.
pub(super) struct Scanned {
    /// Index in `args` of the first operand.
    pub(super) operands: usize,
    /// The options seen (short as a one-letter string, long without `--`), with
    /// their values.
    pub(super) seen: Vec<(String, Option<Arg>)>,
    /// `--help` or `--version` seen: the program runs nothing else.
    pub(super) info: bool,
    /// Options ended at `--`.
    pub(super) dashdash: bool,
}

impl Scanned {
    /// Whether any of the short options in `short` or the long ones in `long` was seen.
    pub(super) fn has_any(&self, short: &str, long: &[&str]) -> bool {
        self.seen.iter().any(|(o, _)| {
            (o.chars().count() == 1 && short.contains(o.as_str())) || long.contains(&o.as_str())
        })
    }
}

/// Scans `args` (after the program name) for the options `spec` knows; an unknown
/// option or a run-time word is an error (which command runs cannot be told).
pub(super) fn scan(program: &str, args: &[Arg], spec: &OptSpec) -> Result<Scanned, String> {
    let mut out = Scanned {
        operands: args.len(),
        seen: Vec::new(),
        info: false,
        dashdash: false,
    };
    let mut i = 0;
    while i < args.len() {
        let a = match &args[i] {
            Arg::Literal(a) => a.as_str(),
            Arg::Dynamic(a) => {
                return Err(format!(
                    "cannot tell which command `{program}` runs: `{a}` is not static"
                ))
            }
        };
        if a == "--" {
            out.operands = i + 1;
            out.dashdash = true;
            return Ok(out);
        }
        if !a.starts_with('-') || a == "-" {
            out.operands = i;
            return Ok(out);
        }
        if let Some(long) = a.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(Arg::Literal(v.to_string()))),
                None => (long, None),
            };
            if name == "help" || name == "version" {
                out.info = true;
                out.seen.push((name.to_string(), None));
                i += 1;
            } else if spec.long_value.contains(&name) {
                match inline {
                    Some(v) => {
                        out.seen.push((name.to_string(), Some(v)));
                        i += 1;
                    }
                    None => {
                        let v = args.get(i + 1).cloned();
                        if v.is_none() {
                            return Err(format!("`{program} --{name}` without its value"));
                        }
                        if let Some(Arg::Dynamic(d)) = &v {
                            if splits(d) {
                                return Err(format!(
                                    "the value `{d}` of `{program} --{name}` could split into \
                                     a command at run time"
                                ));
                            }
                        }
                        out.seen.push((name.to_string(), v));
                        i += 2;
                    }
                }
            } else if spec.long_optional.contains(&name)
                || (spec.long_flags.contains(&name) && inline.is_none())
            {
                out.seen.push((name.to_string(), inline));
                i += 1;
            } else {
                return Err(format!(
                    "cannot tell which command `{program}` runs: unknown option `--{name}`"
                ));
            }
            continue;
        }
        let cluster = &a[1..];
        if spec.numeric_short && cluster.chars().all(|c| c.is_ascii_digit()) {
            out.seen
                .push(("n".to_string(), Some(Arg::Literal(cluster.to_string()))));
            i += 1;
            continue;
        }
        i += 1;
        for (pos, ch) in cluster.char_indices() {
            let tail = &cluster[pos + ch.len_utf8()..];
            if spec.short_value.contains(ch) {
                if tail.is_empty() {
                    let v = args.get(i).cloned();
                    if v.is_none() {
                        return Err(format!("`{program} -{ch}` without its value"));
                    }
                    if let Some(Arg::Dynamic(d)) = &v {
                        if splits(d) {
                            return Err(format!(
                                "the value `{d}` of `{program} -{ch}` could split into a \
                                 command at run time"
                            ));
                        }
                    }
                    out.seen.push((ch.to_string(), v));
                    i += 1;
                } else {
                    out.seen
                        .push((ch.to_string(), Some(Arg::Literal(tail.to_string()))));
                }
                break;
            } else if spec.short_optional.contains(ch) {
                let v = (!tail.is_empty()).then(|| Arg::Literal(tail.to_string()));
                out.seen.push((ch.to_string(), v));
                break;
            } else if spec.short_flags.contains(ch) {
                out.seen.push((ch.to_string(), None));
            } else {
                return Err(format!(
                    "cannot tell which command `{program}` runs: unknown option `-{ch}`"
                ));
            }
        }
    }
    Ok(out)
}

/// [`scan`], with options allowed after operands (GNU getopt's permutation: `su root -c
/// CMD`); `--` ends options.
pub(super) fn scan_permuted(
    program: &str,
    args: &[Arg],
    spec: &OptSpec,
) -> Result<(Scanned, Vec<Arg>), String> {
    let mut all = Scanned {
        operands: args.len(),
        seen: Vec::new(),
        info: false,
        dashdash: false,
    };
    let mut operands = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let o = scan(program, &args[i..], spec)?;
        all.seen.extend(o.seen);
        all.info |= o.info;
        let j = i + o.operands;
        if o.dashdash {
            operands.extend(args[j..].iter().cloned());
            break;
        }
        if j >= args.len() {
            break;
        }
        operands.push(args[j].clone());
        i = j + 1;
    }
    Ok((all, operands))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_scanning() {
        let lit = |v: &[&str]| {
            v.iter()
                .map(|s| Arg::Literal(s.to_string()))
                .collect::<Vec<_>>()
        };
        let spec = OptSpec {
            short_value: "n",
            short_flags: "ab",
            long_value: &["adjustment"],
            ..OptSpec::default()
        };
        assert_eq!(
            scan("x", &lit(&["-ab", "-n", "5", "cmd"]), &spec)
                .unwrap()
                .operands,
            3
        );
        assert_eq!(
            scan("x", &lit(&["-an5", "cmd"]), &spec).unwrap().operands,
            1
        );
        assert_eq!(
            scan("x", &lit(&["--adjustment", "5", "cmd"]), &spec)
                .unwrap()
                .operands,
            2
        );
        assert_eq!(
            scan("x", &lit(&["--adjustment=5", "--", "-cmd"]), &spec)
                .unwrap()
                .operands,
            2
        );
        assert!(scan("x", &lit(&["-z", "cmd"]), &spec).is_err());
        assert!(scan("x", &lit(&["-n"]), &spec).is_err());
        assert!(scan("x", &[Arg::Dynamic("$X".into())], &spec).is_err());
    }
}

//! bash's builtins the gate reads: those that run or bind code the gate cannot see
//! (`eval`, `source`, `fc`, `enable`, `bind`, `alias NAME=…`, `hash -p`), `trap`
//! actions (parsed), declarations (`export`, `declare`… : their assignments), builtins
//! that set the variables they name (`read`, `mapfile`, `printf -v`…), `let`
//! (arithmetic) and `compgen`/`complete` (`-C`, `-F` run code).

use super::step::Step;
use super::variables::{dangerous_var, is_name, COMMAND_VARS};
use super::walker::Walker;
use super::Arg;

/// bash's builtins: they can evaluate their arguments as arithmetic (`test -v`,
/// `let`, `declare -i`, `shift`, `return`…) or run them.
pub(super) const BASH_BUILTINS: &[&str] = &[
    ".",
    ":",
    "[",
    "alias",
    "bg",
    "bind",
    "break",
    "builtin",
    "caller",
    "cd",
    "command",
    "compgen",
    "complete",
    "compopt",
    "continue",
    "declare",
    "dirs",
    "disown",
    "echo",
    "enable",
    "eval",
    "exec",
    "exit",
    "export",
    "false",
    "fc",
    "fg",
    "getopts",
    "hash",
    "help",
    "history",
    "jobs",
    "kill",
    "let",
    "local",
    "logout",
    "mapfile",
    "popd",
    "printf",
    "pushd",
    "pwd",
    "read",
    "readarray",
    "readonly",
    "return",
    "set",
    "shift",
    "shopt",
    "source",
    "suspend",
    "test",
    "times",
    "trap",
    "true",
    "type",
    "typeset",
    "ulimit",
    "umask",
    "unalias",
    "unset",
    "wait",
];

/// Builtins that declare variables (their `NAME=…` operands are assignments).
pub(super) const DECLARATIONS: &[&str] = &["export", "declare", "typeset", "local", "readonly"];

/// Why a builtin that runs or binds code the gate cannot see is unparsed (`eval`,
/// `source`/`.`, `fc`, `enable`, `bind`).
pub(super) fn runs_unseen_code(name: &str) -> String {
    match name {
        "eval" => "`eval` runs a string built at run time".to_string(),
        "source" | "." => format!("`{name}` runs a file the gate cannot see"),
        "fc" => "`fc` re-runs commands from the history".to_string(),
        "enable" => "`enable` can load or replace builtins".to_string(),
        "bind" => "`bind` can bind keys to shell commands".to_string(),
        _ => format!("`{name}` runs code the gate cannot see"),
    }
}

/// `alias`: a definition can hide what runs; listing is fine.
pub(super) fn alias(args: &[Arg]) -> Result<Step, String> {
    if args.iter().any(|a| a.as_text().contains('=')) {
        Err("`alias` definitions can hide what runs".to_string())
    } else {
        Ok(Step::Itself)
    }
}

/// `hash`: `-p` (or `NAME=…`) binds a command name to any file.
pub(super) fn hash(args: &[Arg]) -> Result<Step, String> {
    if args.iter().any(|a| {
        a.literal()
            .is_none_or(|s| (s.starts_with('-') && s.contains('p')) || s.contains('='))
    }) {
        Err("`hash -p` binds a command name to any file".to_string())
    } else {
        Ok(Step::Itself)
    }
}

/// `compgen` and `complete`: `-C CMD` runs a command, `-F FUNC` a function.
pub(super) fn completion(name: &str, args: &[Arg]) -> Result<Step, String> {
    // `-C CMD` runs a command, `-F FUNC` a function; the word list of `-W`
    // is expanded again (a `$(` in it is caught as a marked word).
    for a in args {
        match a {
            Arg::Literal(o) if o.starts_with('-') && o.contains(['C', 'F']) => {
                return Err(format!("`{name} {o}` runs a command or function"))
            }
            Arg::Dynamic(d) if d.starts_with('-') || d.starts_with('$') => {
                return Err(format!("`{name}` option `{d}` is not static"))
            }
            _ => {}
        }
    }
    Ok(Step::Itself)
}

impl Walker {
    /// `trap`: a static action is parsed as the commands it runs (whenever the signal
    /// comes: source order is not run order).
    pub(super) fn trap(&mut self, args: &[Arg], depth: usize) -> Result<Step, String> {
        self.writes.unordered = true;
        let mut rest = args;
        if let Some(Arg::Literal(a)) = rest.first() {
            if a == "-p" || a == "-l" {
                return Ok(Step::Itself);
            }
            if a == "--" {
                rest = &rest[1..];
            }
        }
        match rest.first() {
            None => Ok(Step::Itself),
            Some(Arg::Literal(action)) => {
                if rest.len() > 1 {
                    self.code(action, depth);
                }
                Ok(Step::Itself)
            }
            Some(Arg::Dynamic(a)) => Err(format!("`trap` action `{a}` is not static")),
        }
    }

    /// `read`, `mapfile`, `readarray`, `getopts`, `printf`: builtins that set the
    /// variables they name (a variable that changes what runs, or one named at run
    /// time, is unparsed); `mapfile -C` evaluates its callback.
    pub(super) fn sets_variables(
        &mut self,
        name: &str,
        args: &[Arg],
        depth: usize,
    ) -> Result<Step, String> {
        // `mapfile -C CALLBACK` evaluates the callback as shell code.
        if name == "mapfile" || name == "readarray" {
            self.option_code(args, 'C', &[], false, depth)?;
        }
        // Builtins that set the variables they name (a glob-like
        // `BASH_CMDS[ls]` is a run-time word, its text is still the name).
        for a in args {
            let text: String = a
                .as_text()
                .chars()
                .filter(|c| !"'\"\\".contains(*c))
                .collect();
            let v = text.trim_start_matches("-v");
            let v = v.split('[').next().unwrap_or(v);
            if dangerous_var(v) || COMMAND_VARS.contains(&v) {
                return Err(format!("`{name}` sets `{v}`, which changes what runs"));
            }
            if name != "printf" && matches!(a, Arg::Dynamic(d) if d.contains(['$', '`'])) {
                return Err(format!(
                    "`{name}` sets a variable named `{}` at run time",
                    a.as_text()
                ));
            }
        }
        if name == "printf" {
            let target = args
                .iter()
                .enumerate()
                .find_map(|(i, a)| match a.as_text() {
                    "-v" => args.get(i + 1),
                    t if t.starts_with("-v") => Some(a),
                    _ => None,
                });
            if let Some(Arg::Dynamic(d)) = target {
                if d.contains(['$', '`']) {
                    return Err(format!(
                        "`printf -v` sets a variable named `{d}` at run time"
                    ));
                }
            }
        }
        Ok(Step::Itself)
    }

    /// `let`: every expression is checked as arithmetic.
    pub(super) fn let_builtin(&mut self, args: &[Arg]) -> Result<Step, String> {
        for a in args {
            match a {
                Arg::Literal(e) => self.arithmetic(e),
                Arg::Dynamic(d) => {
                    return Err(format!("`let` expression `{d}` is known only at run time"))
                }
            }
        }
        Ok(Step::Itself)
    }

    /// `export`, `declare`, `typeset`, `local`, `readonly`: their `NAME=value` operands
    /// are assignments; `-n` (a name reference) can alias any variable.
    pub(super) fn declaration(
        &mut self,
        name: &str,
        args: &[Arg],
        depth: usize,
    ) -> Result<Step, String> {
        for a in args {
            let text = a.as_text();
            if text.starts_with('-') || text.starts_with('+') {
                match a {
                    Arg::Literal(o) if name != "export" && o.contains('n') => {
                        return Err(format!(
                            "`{name} {o}` makes a name refer to another variable"
                        ))
                    }
                    Arg::Literal(_) => {}
                    Arg::Dynamic(d) => return Err(format!("`{name}` option `{d}` is not static")),
                }
                continue;
            }
            let (left, value) = match text.split_once('=') {
                Some((l, v)) => (l, Some(v)),
                None => (text, None),
            };
            let var = left.trim_end_matches('+');
            let var = var.split('[').next().unwrap_or(var);
            if !is_name(var) {
                if matches!(a, Arg::Dynamic(_)) {
                    return Err(format!(
                        "`{name}` operand `{text}` names a variable known only at run time"
                    ));
                }
                continue;
            }
            let value = match (a, value) {
                (_, None) => None,
                (Arg::Literal(_), Some(v)) => Some(Arg::Literal(v.to_string())),
                (Arg::Dynamic(_), Some(v)) => Some(Arg::Dynamic(v.to_string())),
            };
            self.assigned(var, value.as_ref(), depth)
                .map_err(|reason| format!("`{name}`: {reason}"))?;
        }
        Ok(Step::Itself)
    }
}

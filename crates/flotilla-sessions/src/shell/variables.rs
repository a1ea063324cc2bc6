//! Assignments that change what runs: variables that choose programs, loaders,
//! configuration and startup code ([`DANGEROUS_VARS`]), variables holding a command
//! line another program runs ([`COMMAND_VARS`], parsed as the commands they name) and
//! make's option variables ([`MAKE_VARS`]); wherever an assignment takes effect (before
//! a command, on its own, after a wrapper, through `env`, `sudo`, an option's
//! `NAME=value`, a declaration builtin).

use brush_parser::ast;

use super::options::Scanned;
use super::walker::Walker;
use super::Arg;

/// Variables whose assignment changes which program runs, or makes a program run code
/// the gate cannot see (git's configuration and helpers, loaders, askpass programs).
pub(super) const DANGEROUS_VARS: &[&str] = &[
    "PATH",
    "BASH_ENV",
    "ENV",
    "PS4",
    "PROMPT_COMMAND",
    "SHELLOPTS",
    "BASHOPTS",
    "LD_PRELOAD",
    "LD_AUDIT",
    "LD_LIBRARY_PATH",
    "GCONV_PATH",
    "GIT_EXEC_PATH",
    "GIT_ASKPASS",
    "SSH_ASKPASS",
    "SUDO_ASKPASS",
    "GIT_PROXY_COMMAND",
    "GIT_EXTERNAL_DIFF",
    "GIT_TEMPLATE_DIR",
    "GIT_ALLOW_PROTOCOL",
    "PERL5OPT",
    "NODE_OPTIONS",
    "LESSOPEN",
    "LESSCLOSE",
    "LESS",
    "LESSKEYIN",
    "LESSEDIT",
    "BROWSER",
    // bash's command hash table and alias table: `BASH_CMDS[ls]=/bin/bash` makes `ls`
    // run bash.
    "BASH_CMDS",
    "BASH_ALIASES",
    "BASH_LOADABLES_PATH",
    "BASH_XTRACEFD",
    "PS0",
    "PS1",
    "PS2",
    "PS3",
    "SHELL",
    // Where git finds its configuration, hooks and repository.
    "HOME",
    "XDG_CONFIG_HOME",
    "GIT_DIR",
    "GIT_COMMON_DIR",
    // Options read from the environment by programs whose options run commands.
    "TAR_OPTIONS",
    "ZIPOPT",
    "MANOPT",
    "RSYNC_RSH",
    "RSYNC_CONNECT_PROG",
    "RIPGREP_CONFIG_PATH",
    "AWKPATH",
    "AWKLIBPATH",
    // Where interpreters find modules and startup code.
    "PYTHONPATH",
    "PYTHONSTARTUP",
    "PYTHONHOME",
    "PERL5LIB",
    "PERLLIB",
    "RUBYOPT",
    "RUBYLIB",
    "NODE_PATH",
];

/// Name prefixes of [`DANGEROUS_VARS`]: exported functions, git configuration from the
/// environment (`GIT_CONFIG_COUNT`, `GIT_CONFIG_KEY_0`, `GIT_CONFIG_PARAMETERS`…),
/// git's ssh command and aliases.
pub(super) const DANGEROUS_PREFIXES: &[&str] =
    &["BASH_FUNC_", "GIT_CONFIG", "GIT_SSH", "GIT_ALIAS"];

/// Variables holding a command line that programs hand to `sh -c` (git's editor and
/// pager): an assignment's value is parsed as the commands it runs.
pub(super) const COMMAND_VARS: &[&str] = &[
    "GIT_EDITOR",
    "GIT_SEQUENCE_EDITOR",
    "GIT_PAGER",
    "EDITOR",
    "VISUAL",
    "PAGER",
    "MANPAGER",
    "SYSTEMD_PAGER",
];

/// make's option variables: a value with `--eval`, `-E` or `SHELL` runs code.
pub(super) const MAKE_VARS: &[&str] = &["MAKEFLAGS", "GNUMAKEFLAGS", "MFLAGS"];

/// Whether assigning `name` changes what runs.
pub(super) fn dangerous_var(name: &str) -> bool {
    DANGEROUS_VARS.contains(&name) || DANGEROUS_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// A shell variable name.
pub(super) fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

impl Walker {
    /// An assignment word (prefix or standalone, or a declaration's operand): its value
    /// and array subscripts are walked; `check_name` checks the variable.
    pub(super) fn assignment(&mut self, a: &ast::Assignment, depth: usize, check_name: bool) {
        let name = match &a.name {
            ast::AssignmentName::VariableName(n) => n.as_str(),
            ast::AssignmentName::ArrayElementName(n, index) => {
                self.arithmetic(index);
                n.as_str()
            }
        };
        let value = match &a.value {
            ast::AssignmentValue::Scalar(w) => Some(self.word(&w.value, depth)),
            ast::AssignmentValue::Array(items) => {
                for (k, v) in items {
                    if let Some(k) = k {
                        self.word(&k.value, depth);
                    }
                    self.word(&v.value, depth);
                }
                None
            }
        };
        if check_name {
            let value = value.unwrap_or_else(|| Arg::Dynamic("( … )".to_string()));
            if let Err(reason) = self.assigned(name, Some(&value), depth) {
                self.unparsed(reason);
            }
        }
    }

    /// An assignment about to take effect (before a command, on its own, after a
    /// wrapper, through `env`, `sudo`, `export`…): an error for variables that change
    /// what runs ([`DANGEROUS_VARS`]); a command variable's value ([`COMMAND_VARS`]) is
    /// parsed as the commands it names.
    pub(super) fn assigned(
        &mut self,
        name: &str,
        value: Option<&Arg>,
        depth: usize,
    ) -> Result<(), String> {
        let name = name.trim_end_matches('+');
        if dangerous_var(name) {
            return Err(format!("assignment to `{name}` changes what runs"));
        }
        if MAKE_VARS.contains(&name) {
            return match value {
                Some(Arg::Literal(v))
                    if v.contains("eval") || v.contains('E') || v.contains("SHELL") =>
                {
                    Err(format!("`{name}={v}` makes make run code"))
                }
                Some(Arg::Dynamic(v)) => {
                    Err(format!("`{name}` is set to `{v}`, known only at run time"))
                }
                _ => Ok(()),
            };
        }
        if COMMAND_VARS.contains(&name) {
            match value {
                // Commands that do nothing need no question of their own.
                Some(Arg::Literal(v))
                    if !matches!(v.trim(), "" | "true" | ":" | "false" | "cat") =>
                {
                    self.code(v, depth);
                }
                Some(Arg::Dynamic(v)) => {
                    return Err(format!(
                        "`{name}` is set to `{v}`, a command known only at run time"
                    ))
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// `NAME=value` option values (`systemd-run -E`, `strace -E`) are assignments in
    /// the command's environment.
    pub(super) fn env_options(
        &mut self,
        name: &str,
        o: &Scanned,
        keys: &[&str],
        depth: usize,
    ) -> Result<(), String> {
        for (k, v) in &o.seen {
            if !keys.contains(&k.as_str()) {
                continue;
            }
            match v {
                Some(Arg::Literal(s)) => {
                    if let Some((var, value)) = s.split_once('=') {
                        let value = Arg::Literal(value.to_string());
                        self.assigned(var, Some(&value), depth)
                            .map_err(|reason| format!("`{name}`: {reason}"))?;
                    }
                }
                Some(Arg::Dynamic(d)) => {
                    return Err(format!("`{name}` sets `{d}`, known only at run time"))
                }
                None => {}
            }
        }
        Ok(())
    }
}

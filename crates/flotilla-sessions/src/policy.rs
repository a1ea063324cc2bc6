//! The gate's policy: one pure function from (mode, rules, always-ask list, tool call)
//! to a [`Decision`].
//!
//! Order, first match wins: **deny rules > always-ask > ask rules > allow rules > the
//! mode's default**. Deny and ask rules and the always-ask list match when they
//! *could* match ([`Match::Possible`]: `git $X` could be `git push`); allow rules only
//! when they match whatever the run-time values are ([`Match::Sure`]).
//!
//! A Bash call is decided part by part over every simple command
//! [`shell::analyze`] finds (wrappers seen through): **Deny** if any part is denied
//! (or a deny rule matches the whole line); else **Ask** if any part asks or anything
//! could not be parsed; else **Allow** — only when *every* part is allowed, by a rule
//! or by the mode. Anything unparsed is never allowed, in any mode: that includes a
//! line over [`shell::MAX_LINE_BYTES`], nested deeper than [`shell::MAX_NESTING`] or
//! than [`shell::MAX_AMBIGUOUS_NESTING`] levels of bare parentheses and `case` blocks,
//! refused before it is parsed.
//!
//! **Allow rules cover only what the gate fully understands.** In `default`,
//! `acceptEdits` and `plan`, an allow rule matches a simple command only when every
//! word of it (after wrappers) is static ([`fully_static`]: no `$X`, `$(…)`, glob or
//! brace expansion; find's `{}` placeholder aside): `Bash(echo *)` allows `echo hi` but
//! not `echo $HOME`, which asks (`plan` denies it). `bypassPermissions` is unchanged,
//! except that the always-ask list still outranks it.
//!
//! The **always-ask list** holds command-word prefixes (`git push`, `gh`, `rm`…). It
//! is matched against every simple command of a Bash call after wrappers are seen
//! through, by program name (`/usr/bin/git` is `git`) and with git's global options
//! before the subcommand skipped (`git -C dir --no-pager push`). For git: a program
//! `git-SUB` is `git SUB` (`/usr/lib/git-core/git-push`); `send-pack`, `http-push` and
//! `remote-*` are `push`; a `git -c alias.…`, or a subcommand that is not one of git's
//! own ([`GIT_COMMANDS`]: it may be an alias from a configuration file), makes the
//! subcommand unknown, so it could be `push`. It outranks **every** mode,
//! `bypassPermissions` included, and every allow rule. It applies to Bash calls only.
//!
//! The **catch-all** ([`AlwaysAsk::named_in_arguments`]) covers programs the gate does
//! not know: a simple command whose arguments (or a whitespace/punctuation-separated
//! token inside one) name the program of an always-ask entry or a shell or interpreter
//! (`script -qc 'rm -rf x'`, `ssh host git push`, `tar --to-command=rm`,
//! `docker exec -i c sh`) asks, with the same rank as the list, unless the program is
//! on [`NON_EXECUTING`] (`echo`, `grep`, `git`…). Together with [`shell`]'s unparsed
//! entries the invariant is: **no mode turns anything that could run an always-ask
//! command into Allow**.
//!
//! Mode defaults (when no rule decided):
//!
//! | tool kind ([`ToolKind`])             | default | acceptEdits | plan | bypassPermissions |
//! |--------------------------------------|---------|-------------|------|-------------------|
//! | read (`Read`, `Glob`, `Grep`, `LS`…) inside the session tree | allow | allow | allow | allow |
//! | read outside the session tree        | ask     | ask         | ask  | allow             |
//! | edit (`Edit`, `Write`…) inside       | ask     | allow       | deny | allow             |
//! | edit outside                         | ask     | ask         | deny | allow             |
//! | Bash (each simple command)           | ask     | ask         | deny | allow             |
//! | harmless (`TodoWrite`, `Task`…)      | allow   | allow       | allow| allow             |
//! | other (`WebFetch`, MCP, unknown)     | ask     | ask         | ask  | allow             |
//!
//! `plan` turns what `default` would ask about for edits and Bash into a deny (it is
//! read-only); rules still apply in every mode (an allow rule allows in `plan` too).
//! Reasons name the rule, always-ask entry or mode that decided.
//!
//! Pure: no IO, no clock.

use crate::rules::{self, Match, Rule, Rules};
use crate::shell::{self, Arg, SimpleCommand};
use crate::{Decision, Mode, ToolCall};

/// The default always-ask list.
pub const DEFAULT_ALWAYS_ASK: &[&str] = &[
    "git push", "gh", "rm", "sudo", "kubectl", "curl", "wget", "env",
];

/// Tools that only read, or only touch the agent's own bookkeeping, allowed in every
/// mode (no path).
pub const HARMLESS_TOOLS: &[&str] = &[
    "TodoWrite",
    "TodoRead",
    "Task",
    "BashOutput",
    "KillShell",
    "KillBash",
    "AskUserQuestion",
];

/// git's own commands, as in git 2.30 and later: its builtins and the commands it ships
/// as scripts (`submodule`, `mergetool`, `filter-branch`, `request-pull`). An alias never
/// shadows one of them; any other subcommand may be an alias from a configuration file
/// the gate cannot see (or a `git-NAME` program), so it could be `push`. Left out on
/// purpose: builtins younger than that, which an older git would take for an alias
/// (`replay`, `refs`, `diagnose`, `hook`, `fsmonitor--daemon`), internal helpers, and
/// `for-each-repo` (it runs any git command); `send-pack`, `http-push` and the
/// `remote-*` transport helpers are `push`.
pub const GIT_COMMANDS: &[&str] = &[
    "add",
    "am",
    "annotate",
    "apply",
    "archive",
    "bisect",
    "blame",
    "branch",
    "bugreport",
    "bundle",
    "cat-file",
    "check-attr",
    "check-ignore",
    "check-mailmap",
    "check-ref-format",
    "checkout",
    "checkout-index",
    "cherry",
    "cherry-pick",
    "clean",
    "clone",
    "column",
    "commit",
    "commit-graph",
    "commit-tree",
    "config",
    "count-objects",
    "credential",
    "credential-cache",
    "credential-store",
    "describe",
    "diff",
    "diff-files",
    "diff-index",
    "diff-tree",
    "difftool",
    "fast-export",
    "fast-import",
    "fetch",
    "fetch-pack",
    "filter-branch",
    "fmt-merge-msg",
    "for-each-ref",
    "format-patch",
    "fsck",
    "fsck-objects",
    "gc",
    "get-tar-commit-id",
    "grep",
    "hash-object",
    "help",
    "index-pack",
    "init",
    "init-db",
    "interpret-trailers",
    "log",
    "ls-files",
    "ls-remote",
    "ls-tree",
    "mailinfo",
    "mailsplit",
    "maintenance",
    "merge",
    "merge-base",
    "merge-file",
    "merge-index",
    "merge-ours",
    "merge-recursive",
    "merge-subtree",
    "merge-tree",
    "mergetool",
    "mktag",
    "mktree",
    "multi-pack-index",
    "mv",
    "name-rev",
    "notes",
    "pack-objects",
    "pack-redundant",
    "pack-refs",
    "patch-id",
    "prune",
    "prune-packed",
    "pull",
    "push",
    "range-diff",
    "read-tree",
    "rebase",
    "receive-pack",
    "reflog",
    "remote",
    "repack",
    "replace",
    "request-pull",
    "rerere",
    "reset",
    "restore",
    "rev-list",
    "rev-parse",
    "revert",
    "rm",
    "shortlog",
    "show",
    "show-branch",
    "show-index",
    "show-ref",
    "sparse-checkout",
    "stage",
    "stash",
    "status",
    "stripspace",
    "submodule",
    "switch",
    "symbolic-ref",
    "tag",
    "unpack-file",
    "unpack-objects",
    "update-index",
    "update-ref",
    "update-server-info",
    "upload-archive",
    "upload-pack",
    "var",
    "verify-commit",
    "verify-pack",
    "verify-tag",
    "version",
    "whatchanged",
    "worktree",
    "write-tree",
];

/// Programs known not to run their arguments as commands: the catch-all
/// ([`AlwaysAsk::named_in_arguments`]) does not look inside their arguments. Small on
/// purpose: printers, readers and searchers, directory and file-status builtins, `git`
/// (the commands its options run are parsed by [`shell`]), and `awk`, `sed`, `find`,
/// whose programs and `-exec` commands [`shell`] checks. `cp`, `mv`, `ln`, `tar`,
/// `ssh`, `make`, `cargo`… are not on it (`ln -s /bin/rm x` asks).
pub const NON_EXECUTING: &[&str] = &[
    "echo", "printf", "cat", "ls", "grep", "egrep", "fgrep", "rg", "head", "tail", "wc", "cut",
    "tr", "uniq", "nl", "diff", "cmp", "comm", "basename", "dirname", "realpath", "readlink",
    "pwd", "cd", "mkdir", "touch", "stat", "file", "du", "df", "test", "[", "true", "false",
    "type", "which", "command", "help", "jq", "git", "awk", "gawk", "mawk", "nawk", "sed", "gsed",
    "find", "export", "declare", "typeset", "local", "readonly", "unset", "read", "tee", "date",
    "sleep", "chmod", "compgen", "set",
];

/// Directories whose programs are the system's own: `/usr/bin/git` may be allowed by
/// a rule for `git`, `./git` may not.
const SYSTEM_BIN_DIRS: &[&str] = &[
    "/usr/bin/",
    "/bin/",
    "/usr/local/bin/",
    "/usr/sbin/",
    "/sbin/",
];

/// The gate's whole configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// The session's allow, ask and deny rules.
    pub rules: Rules,
    /// Commands that always ask, whatever the mode and the rules.
    pub always_ask: AlwaysAsk,
}

impl Default for Policy {
    /// No rules, the default always-ask list.
    fn default() -> Self {
        Policy {
            rules: Rules::default(),
            always_ask: AlwaysAsk::default_list(),
        }
    }
}

/// An always-ask list entry that is not a command-word prefix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// An empty entry.
    #[error("always-ask entry {index} is empty")]
    EmptyEntry {
        /// Its position in the list (0-based).
        index: usize,
    },
    /// An entry with shell syntax in it.
    #[error("always-ask entry `{entry}`: {why}")]
    BadEntry {
        /// The entry as given.
        entry: String,
        /// What is wrong.
        why: String,
    },
}

/// The always-ask list: command-word prefixes (`git push` matches `git push origin
/// main`; `gh` matches every `gh` command).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlwaysAsk {
    entries: Vec<String>,
    words: Vec<Vec<String>>,
}

impl AlwaysAsk {
    /// [`DEFAULT_ALWAYS_ASK`].
    pub fn default_list() -> AlwaysAsk {
        AlwaysAsk::new(DEFAULT_ALWAYS_ASK.iter().map(|s| s.to_string()).collect())
            .expect("the default list is valid")
    }

    /// A list from entries: each is one or more words (whitespace-separated, no shell
    /// syntax: quotes, `$`, operators, globs are errors). Whitespace is collapsed.
    pub fn new(entries: Vec<String>) -> Result<AlwaysAsk, PolicyError> {
        let mut list = AlwaysAsk {
            entries: Vec::new(),
            words: Vec::new(),
        };
        for (index, entry) in entries.into_iter().enumerate() {
            let words: Vec<String> = entry.split_whitespace().map(str::to_string).collect();
            if words.is_empty() {
                return Err(PolicyError::EmptyEntry { index });
            }
            if let Some(c) = entry.chars().find(|c| ";&|<>()$`'\"\\*?[]{}".contains(*c)) {
                return Err(PolicyError::BadEntry {
                    entry,
                    why: format!("`{c}` is shell syntax; entries are plain command words"),
                });
            }
            list.entries.push(words.join(" "));
            list.words.push(words);
        }
        Ok(list)
    }

    /// The entries, whitespace collapsed.
    pub fn entries(&self) -> &[String] {
        &self.entries
    }

    /// This list plus one more entry.
    pub fn with(&self, entry: &str) -> Result<AlwaysAsk, PolicyError> {
        let mut entries = self.entries.clone();
        entries.push(entry.to_string());
        AlwaysAsk::new(entries)
    }

    /// The catch-all for programs the gate does not know: an argument of the command,
    /// or a token inside one (split at whitespace and punctuation, quotes and
    /// backslashes also removed), whose last path component is the program of an entry
    /// (`rm`, `git`, `gh`… in `script -qc 'rm -rf x'`, `ssh host rm x`,
    /// `tar --to-command=/bin/rm`), or a shell or interpreter ([`shell::is_code_runner`]:
    /// `docker exec c sh`), could run an always-ask command. Returns that token. Never
    /// for programs on [`NON_EXECUTING`], for run-time words, or with an empty list.
    pub fn named_in_arguments(&self, command: &SimpleCommand) -> Option<String> {
        if self.words.is_empty() || NON_EXECUTING.contains(&command.program()) {
            return None;
        }
        let firsts: Vec<&str> = self.words.iter().map(|w| shell::basename(&w[0])).collect();
        let names = |token: &str| {
            let b = shell::basename(token);
            !b.is_empty() && (firsts.contains(&b) || shell::is_code_runner(b))
        };
        let is_token_char = |c: char| c.is_alphanumeric() || "-_./+~%^".contains(c);
        for arg in command.argv.iter().skip(1) {
            let Some(text) = arg.literal() else { continue };
            let unquoted: String = text.chars().filter(|c| !"'\"\\".contains(*c)).collect();
            for t in [text, unquoted.as_str()] {
                if let Some(token) = t.split(|c: char| !is_token_char(c)).find(|t| names(t)) {
                    return Some(shell::basename(token).to_string());
                }
            }
        }
        None
    }

    /// The first entry that could match the simple command (by program name, and
    /// with git's global options skipped), if any.
    pub fn matching(&self, command: &SimpleCommand) -> Option<&str> {
        let forms = command_forms(command, false);
        self.words
            .iter()
            .zip(&self.entries)
            .find(|(words, _)| {
                forms
                    .iter()
                    .any(|form| prefix_could_match(words, form, command.open_ended))
            })
            .map(|(_, entry)| entry.as_str())
    }
}

/// What kind of tool a call is, for the mode defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolKind {
    /// `Bash`.
    Bash,
    /// A tool that reads files ([`rules::READ_TOOLS`]).
    Read,
    /// A tool that edits files ([`rules::EDIT_TOOLS`]).
    Edit,
    /// [`HARMLESS_TOOLS`].
    Harmless,
    /// Everything else (`WebFetch`, `WebSearch`, MCP tools, unknown tools).
    Other,
}

/// The kind of a tool, by name.
pub fn tool_kind(tool_name: &str) -> ToolKind {
    if tool_name == "Bash" {
        ToolKind::Bash
    } else if rules::READ_TOOLS.contains(&tool_name) {
        ToolKind::Read
    } else if rules::EDIT_TOOLS.contains(&tool_name) {
        ToolKind::Edit
    } else if HARMLESS_TOOLS.contains(&tool_name) {
        ToolKind::Harmless
    } else {
        ToolKind::Other
    }
}

/// The gate's decision on one tool call. Pure.
pub fn decide(mode: Mode, policy: &Policy, call: &ToolCall) -> Decision {
    if tool_kind(&call.tool_name) == ToolKind::Bash {
        return decide_bash(mode, policy, call);
    }
    let home = policy.rules.home.as_deref();
    if let Some(rule) = find(&policy.rules.deny, |r| r.covers_call(call, home)) {
        return deny(format!("deny rule `{}`", rule.source));
    }
    if let Some(rule) = find(&policy.rules.deny, |r| {
        r.matches_call(call, home, Match::Possible)
    }) {
        // A search over a directory holding denied paths: the gate cannot filter what
        // the search returns, so a human decides.
        return ask(format!(
            "`{}` searches a directory holding paths denied by `{}`",
            call.tool_name, rule.source
        ));
    }
    if let Some(rule) = find(&policy.rules.ask, |r| {
        r.matches_call(call, home, Match::Possible)
    }) {
        return ask(format!("ask rule `{}`", rule.source));
    }
    if let Some(rule) = find(&policy.rules.allow, |r| {
        r.matches_call(call, home, Match::Sure)
    }) {
        return allow(format!("allow rule `{}`", rule.source));
    }
    mode_default(mode, call)
}

fn mode_default(mode: Mode, call: &ToolCall) -> Decision {
    let tool = &call.tool_name;
    let kind = tool_kind(tool);
    if mode == Mode::BypassPermissions {
        return allow(format!("mode {mode}"));
    }
    let inside = || {
        rules::file_target(call)
            .is_some_and(|t| rules::is_within(&t.path, &rules::normalize("/", &call.cwd)))
    };
    match kind {
        ToolKind::Harmless => allow(format!("mode {mode}: `{tool}` is harmless")),
        ToolKind::Read if inside() => allow(format!(
            "mode {mode}: `{tool}` reads inside the session tree"
        )),
        ToolKind::Read => ask(format!(
            "mode {mode}: `{tool}` reads outside the session tree"
        )),
        ToolKind::Edit if mode == Mode::Plan => {
            deny(format!("mode {mode} is read-only: `{tool}` edits"))
        }
        ToolKind::Edit if mode == Mode::AcceptEdits && inside() => allow(format!(
            "mode {mode}: `{tool}` edits inside the session tree"
        )),
        ToolKind::Edit if mode == Mode::AcceptEdits => ask(format!(
            "mode {mode}: `{tool}` edits outside the session tree"
        )),
        ToolKind::Edit => ask(format!("mode {mode}: no allow rule for `{tool}`")),
        ToolKind::Bash | ToolKind::Other => ask(format!("mode {mode}: no allow rule for `{tool}`")),
    }
}

fn decide_bash(mode: Mode, policy: &Policy, call: &ToolCall) -> Decision {
    let rules = &policy.rules;
    let Some(line) = call.tool_input.get("command").and_then(|c| c.as_str()) else {
        if let Some(rule) = find(&rules.deny, |r| r.matches_line("")) {
            return deny(format!("deny rule `{}`", rule.source));
        }
        return ask("Bash call without a `command` string".to_string());
    };
    if let Some(rule) = find(&rules.deny, |r| r.matches_line(line)) {
        return deny(format!(
            "deny rule `{}` matches the command line",
            rule.source
        ));
    }
    let analysis = shell::analyze(line);
    let mut parts: Vec<Decision> = Vec::new();
    if let Some(rule) = find(&rules.ask, |r| r.matches_line(line)) {
        parts.push(ask(format!(
            "ask rule `{}` matches the command line",
            rule.source
        )));
    }
    for command in &analysis.commands {
        parts.push(decide_command(mode, policy, command));
    }
    for u in &analysis.unparsed {
        parts.push(ask(u.to_string()));
    }
    if analysis.commands.is_empty() && analysis.unparsed.is_empty() {
        // Only assignments, comments or nothing: the mode decides as for any command.
        parts.push(match mode {
            Mode::BypassPermissions => allow(format!("mode {mode}")),
            Mode::Plan => deny(format!(
                "mode {mode} is read-only: no allow rule for this command"
            )),
            _ => ask(format!("mode {mode}: no allow rule for this command")),
        });
    }
    combine(parts)
}

/// The decision on one simple command of a Bash call (always-ask, rules, mode).
pub fn decide_command(mode: Mode, policy: &Policy, command: &SimpleCommand) -> Decision {
    let rules = &policy.rules;
    let text = command.text();
    let possible = command_forms(command, true);
    let could = |r: &Rule| {
        possible
            .iter()
            .any(|f| r.matches_command(f, command.open_ended, Match::Possible))
    };
    if let Some(rule) = find(&rules.deny, could) {
        return deny(format!("deny rule `{}` matches `{text}`", rule.source));
    }
    if let Some(entry) = policy.always_ask.matching(command) {
        let alias = match git_subcommand(command) {
            Some(sub) if !GIT_COMMANDS.contains(&sub.as_str()) => {
                format!("; `{sub}` is not a git command, so it may be an alias")
            }
            _ => String::new(),
        };
        return ask(format!(
            "always-ask `{entry}` matches `{text}` (outranks every mode{alias})"
        ));
    }
    if let Some(token) = policy.always_ask.named_in_arguments(command) {
        let what = if shell::is_code_runner(&token) {
            "the shell or interpreter"
        } else {
            "the always-ask program"
        };
        return ask(format!(
            "`{text}` names {what} `{token}` in its arguments, so it could run an always-ask \
             command (outranks every mode)"
        ));
    }
    if let Some(rule) = find(&rules.ask, could) {
        return ask(format!("ask rule `{}` matches `{text}`", rule.source));
    }
    let sure = sure_forms(command);
    // Outside `bypassPermissions` an allow rule covers only a command the gate fully
    // understands: every word static (find's `{}` placeholder aside).
    let understood = mode == Mode::BypassPermissions || fully_static(command);
    if let Some(rule) = find(&rules.allow, |r| {
        understood
            && sure
                .iter()
                .any(|f| r.matches_command(f, command.open_ended, Match::Sure))
    }) {
        return allow(format!("allow rule `{}` matches `{text}`", rule.source));
    }
    if !understood {
        let covered = find(&rules.allow, |r| {
            sure.iter()
                .any(|f| r.matches_command(f, command.open_ended, Match::Sure))
        });
        if let Some(rule) = covered {
            let why = format!(
                "allow rule `{}` is not applied to `{text}`: it has words known only at run \
                 time",
                rule.source
            );
            return match mode {
                Mode::Plan => deny(format!("mode {mode} is read-only: {why}")),
                _ => ask(format!("mode {mode}: {why}")),
            };
        }
    }
    match mode {
        Mode::BypassPermissions => allow(format!("mode {mode}: `{text}`")),
        Mode::Plan => deny(format!(
            "mode {mode} is read-only: no allow rule matches `{text}`"
        )),
        Mode::Default | Mode::AcceptEdits => {
            ask(format!("mode {mode}: no allow rule matches `{text}`"))
        }
    }
}

/// Whether every word of the command (after wrappers) is static: the only commands an
/// allow rule may cover outside `bypassPermissions`. The `{}` placeholder of
/// `find … -exec` (a path find substitutes) counts as static; the words `xargs` adds
/// from its input, and its `-I` replacements, do not.
pub fn fully_static(command: &SimpleCommand) -> bool {
    let from_find = command.wrappers.iter().any(|w| w == "find");
    // `xargs cmd` gets words from its input at run time (`--upload-pack=…` among
    // them); find's `{} +` appends paths under its starting points.
    let appended_by_xargs = command.open_ended && !from_find;
    !appended_by_xargs
        && command
            .argv
            .iter()
            .all(|a| matches!(a, Arg::Literal(_)) || (from_find && a.as_text() == "{}"))
}

/// Deny if any part denies; else ask if any asks; else allow. Reasons are joined.
fn combine(parts: Vec<Decision>) -> Decision {
    if let Some(d) = parts.iter().find(|d| matches!(d, Decision::Deny { .. })) {
        return d.clone();
    }
    let asks: Vec<&str> = parts
        .iter()
        .filter(|d| matches!(d, Decision::Ask { .. }))
        .map(Decision::reason)
        .collect();
    if !asks.is_empty() {
        return ask(asks.join("; "));
    }
    allow(
        parts
            .iter()
            .map(Decision::reason)
            .collect::<Vec<_>>()
            .join("; "),
    )
}

/// The forms of a command that rules and the always-ask list could match: `argv`,
/// `argv` with the program's path removed, git with its global options skipped, and
/// (for rules) the words as written with their wrappers.
fn command_forms(command: &SimpleCommand, with_written: bool) -> Vec<Vec<Arg>> {
    let mut forms = vec![command.argv.clone()];
    let push = |f: Vec<Arg>, forms: &mut Vec<Vec<Arg>>| {
        if !forms.contains(&f) {
            forms.push(f);
        }
    };
    let program = command.program().to_string();
    let mut base = command.argv.clone();
    if let Some(first) = base.first_mut() {
        *first = Arg::Literal(program.clone());
    }
    push(base.clone(), &mut forms);
    if program == "git" {
        push(git_normalized(&base), &mut forms);
    } else if let Some(sub) = program.strip_prefix("git-").filter(|s| !s.is_empty()) {
        // git's plumbing paths: `/usr/lib/git-core/git-push` is `git push`.
        let mut git = vec![
            Arg::Literal("git".to_string()),
            Arg::Literal(sub.to_string()),
        ];
        git.extend(base[1..].iter().cloned());
        push(git_normalized(&git), &mut forms);
    }
    if with_written {
        push(command.written.clone(), &mut forms);
    }
    forms
}

/// The forms an allow rule must match: `argv`, and with the program's path removed
/// when the program lives in a system directory (`/usr/bin/git` is `git`; `./git` is
/// not).
fn sure_forms(command: &SimpleCommand) -> Vec<Vec<Arg>> {
    let mut forms = vec![command.argv.clone()];
    if let Some(Arg::Literal(p)) = command.argv.first() {
        if SYSTEM_BIN_DIRS.iter().any(|d| {
            p.strip_prefix(d)
                .is_some_and(|rest| !rest.contains('/') && !rest.is_empty())
        }) {
            let mut f = command.argv.clone();
            f[0] = Arg::Literal(shell::basename(p).to_string());
            forms.push(f);
        }
    }
    forms
}

/// git's subcommand (after its global options), for `git …` and `git-SUB` programs.
fn git_subcommand(command: &SimpleCommand) -> Option<String> {
    let program = command.program();
    if let Some(sub) = program.strip_prefix("git-").filter(|s| !s.is_empty()) {
        return Some(sub.to_string());
    }
    if program != "git" {
        return None;
    }
    let n = git_normalized(&command.argv);
    n.iter()
        .skip(1)
        .find(|a| !matches!(a, Arg::Dynamic(d) if d == "<git alias>"))
        .and_then(|a| a.literal())
        .map(str::to_string)
}

/// `git` with the global options before the subcommand removed. A `-c alias.…`
/// (or a run-time `-c` value) puts a dynamic word where the subcommand was, and so does
/// a subcommand that is not one of git's own ([`GIT_COMMANDS`]: it may be an alias).
/// `send-pack`, `http-push` and `remote-*` are `push`.
fn git_normalized(argv: &[Arg]) -> Vec<Arg> {
    use shell::GIT_GLOBAL_WITH_VALUE as WITH_VALUE;
    let mut out = vec![Arg::Literal("git".to_string())];
    let mut unknown_subcommand = false;
    let mut i = 1;
    while i < argv.len() {
        match &argv[i] {
            Arg::Literal(a) if WITH_VALUE.contains(&a.as_str()) => {
                if a == "-c" || a == "--config-env" {
                    match argv.get(i + 1) {
                        Some(Arg::Literal(v))
                            if !v.trim_start().to_ascii_lowercase().starts_with("alias.") => {}
                        _ => unknown_subcommand = true,
                    }
                }
                i += 2;
            }
            Arg::Literal(a) if a.starts_with('-') => {
                if a.to_ascii_lowercase().starts_with("--config-env=alias.") {
                    unknown_subcommand = true;
                }
                i += 1;
            }
            _ => break,
        }
    }
    let mut rest: Vec<Arg> = argv[i.min(argv.len())..].to_vec();
    if let Some(Arg::Literal(sub)) = rest.first() {
        if sub == "send-pack" || sub == "http-push" || sub.starts_with("remote-") {
            rest[0] = Arg::Literal("push".to_string());
        } else if !GIT_COMMANDS.contains(&sub.as_str()) {
            unknown_subcommand = true;
        }
    }
    if unknown_subcommand {
        out.push(Arg::Dynamic("<git alias>".to_string()));
    }
    out.extend(rest);
    out
}

/// Whether the entry's words could be a prefix of the form's words (a dynamic word
/// may stand for any number of words; an open-ended command may get any words
/// appended).
fn prefix_could_match(entry: &[String], form: &[Arg], open_ended: bool) -> bool {
    let mut form: Vec<&Arg> = form.iter().collect();
    let hole = Arg::Dynamic(String::new());
    if open_ended {
        form.push(&hole);
    }
    let (ne, nf) = (entry.len(), form.len());
    // dp[k][j]: entry[k..] could be a prefix of form[j..]
    let mut dp = vec![vec![false; nf + 1]; ne + 1];
    dp[ne].fill(true);
    for k in (0..ne).rev() {
        for j in (0..nf).rev() {
            dp[k][j] = match form[j] {
                Arg::Literal(w) => *w == entry[k] && dp[k + 1][j + 1],
                Arg::Dynamic(_) => dp[k][j + 1] || dp[k + 1][j] || dp[k + 1][j + 1],
            };
        }
    }
    dp[0][0]
}

fn find(rules: &[Rule], pred: impl Fn(&Rule) -> bool) -> Option<&Rule> {
    rules.iter().find(|r| pred(r))
}

fn allow(reason: String) -> Decision {
    Decision::Allow { reason }
}

fn deny(reason: String) -> Decision {
    Decision::Deny { reason }
}

fn ask(reason: String) -> Decision {
    Decision::Ask { reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(words: &[&str]) -> Vec<Arg> {
        words.iter().map(|w| Arg::Literal(w.to_string())).collect()
    }

    #[test]
    fn git_global_options_are_skipped() {
        let n = |w: &[&str]| shell::join(&git_normalized(&lit(w)));
        assert_eq!(
            n(&["git", "-C", "d", "-c", "a=b", "--no-pager", "push", "o"]),
            "git push o"
        );
        assert_eq!(n(&["git", "--git-dir=.git", "-P", "push"]), "git push");
        assert_eq!(n(&["git", "-c", "alias.p=push", "p"]), "git <git alias> p");
        assert_eq!(
            n(&["git", "--config-env=alias.p=X", "p"]),
            "git <git alias> p"
        );
    }

    #[test]
    fn entry_prefixes() {
        let e = |s: &str| s.split(' ').map(str::to_string).collect::<Vec<_>>();
        assert!(prefix_could_match(
            &e("git push"),
            &lit(&["git", "push", "x"]),
            false
        ));
        assert!(!prefix_could_match(
            &e("git push"),
            &lit(&["git", "pull"]),
            false
        ));
        assert!(!prefix_could_match(&e("git push"), &lit(&["git"]), false));
        assert!(prefix_could_match(&e("git push"), &lit(&["git"]), true));
        let dynamic = vec![Arg::Literal("git".into()), Arg::Dynamic("$X".into())];
        assert!(prefix_could_match(&e("git push"), &dynamic, false));
        assert!(!prefix_could_match(&e("gh"), &dynamic, false));
    }

    #[test]
    fn tool_kinds() {
        assert_eq!(tool_kind("Bash"), ToolKind::Bash);
        assert_eq!(tool_kind("Glob"), ToolKind::Read);
        assert_eq!(tool_kind("MultiEdit"), ToolKind::Edit);
        assert_eq!(tool_kind("TodoWrite"), ToolKind::Harmless);
        assert_eq!(tool_kind("mcp__x__y"), ToolKind::Other);
    }
}

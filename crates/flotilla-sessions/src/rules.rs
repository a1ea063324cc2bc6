//! Permission rules in Claude Code's own syntax
//! (<https://code.claude.com/docs/en/iam#permission-rule-syntax>).
//!
//! A rule is `Tool` (every call of that tool; `Tool(*)` is the same) or
//! `Tool(specifier)`:
//!
//! - **Bash**: `Bash(npm test)` matches exactly that command; `*` matches any run of
//!   characters, spaces included (`Bash(git * main)`); a trailing ` *` means "this
//!   prefix, then nothing or a space and anything" (`Bash(git push *)` matches
//!   `git push` and `git push origin main` but not `git pushx`); the legacy
//!   `Bash(npm run test:*)` is the same as `Bash(npm run test *)`. Rules match one
//!   simple command at a time, as [`crate::shell`] produced it (wrappers seen through,
//!   quotes removed, words joined with single spaces). An allow rule with a shell
//!   operator (`&&`, `||`, `;`, `|`, `` ` ``, `$(`) could never match one simple
//!   command and is a parse error; deny and ask rules with operators are accepted and
//!   also matched against the whole command line.
//! - **File tools** (`Read`, `Edit`, `Write`, `MultiEdit`, `NotebookEdit`,
//!   `NotebookRead`, `Glob`, `Grep`, `LS`): gitignore-style path globs (`*` within one
//!   path segment, `**` any number of segments, `?`, `[a-z]`/`[!…]`). `Read(…)` rules
//!   apply to every tool that reads (`Read`, `NotebookRead`, `Glob`, `Grep`, `LS`) and
//!   `Edit(…)` rules to every tool that edits (`Edit`, `Write`, `MultiEdit`,
//!   `NotebookEdit`); other names apply to that tool only. Anchors: `//abs/path` is
//!   absolute; `~/path` is under the home directory ([`Rules::home`]); `./path` and
//!   `/path` are relative to the call's cwd (the session tree's root). **Deviation:**
//!   Claude Code resolves `/path` against the settings file's directory; sessions have
//!   no settings file, so it is the session tree. A pattern with no `/` except a
//!   trailing one (`*.env`, `secrets/`) matches at any depth below the cwd, as in
//!   gitignore. A pattern matching a directory matches everything inside it. `..` in a
//!   pattern is an error.
//! - **WebFetch**: `WebFetch(domain:example.com)` matches URLs whose host is exactly
//!   `example.com`; `WebFetch(domain:*.example.com)` matches its subdomains only.
//! - **MCP**: `mcp__server` (or `mcp__server__*`) matches every tool of that server,
//!   `mcp__server__tool` one tool. No specifiers.
//! - **Task**: `Task(name)` matches the subagent type `name`.
//!
//! Matching comes in two strengths ([`Match`]): deny and ask rules match when they
//! *could* match (a run-time value such as `$X` may be anything), allow rules only
//! when they match *whatever* the run-time values are.
//!
//! Pure: no IO, no clock.

use crate::shell::Arg;
use crate::ToolCall;

/// Tools whose rules and calls are about reading files (`Read(…)` rules apply to all).
pub const READ_TOOLS: &[&str] = &["Read", "NotebookRead", "Glob", "Grep", "LS"];
/// Tools whose rules and calls are about editing files (`Edit(…)` rules apply to all).
pub const EDIT_TOOLS: &[&str] = &["Edit", "Write", "MultiEdit", "NotebookEdit"];

/// Which rule list a rule came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RuleList {
    /// `permissions.allow`.
    Allow,
    /// `permissions.ask`.
    Ask,
    /// `permissions.deny`.
    Deny,
}

impl std::fmt::Display for RuleList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RuleList::Allow => "allow",
            RuleList::Ask => "ask",
            RuleList::Deny => "deny",
        })
    }
}

/// A rule that could not be parsed: which rule, in which list, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("permission rule `{rule}`{}: {kind}", .list.map(|l| format!(" (in the {l} list)")).unwrap_or_default())]
pub struct RuleError {
    /// The rule as written.
    pub rule: String,
    /// The list it was in, when parsed as part of [`Rules::parse`].
    pub list: Option<RuleList>,
    /// What is wrong with it.
    pub kind: RuleErrorKind,
}

/// Why a rule could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleErrorKind {
    /// The rule is empty.
    #[error("the rule is empty")]
    Empty,
    /// The tool name is not a tool name.
    #[error("`{0}` is not a tool name (letters, digits, `_`, `-`)")]
    BadToolName(String),
    /// `Tool(` without the closing `)` at the end.
    #[error("the specifier must be closed by `)` at the end of the rule")]
    Unclosed,
    /// `Tool()`.
    #[error("the specifier in `()` is empty (write the bare tool name for every call)")]
    EmptySpecifier,
    /// A specifier on a tool that takes none.
    #[error("`{0}` rules take no specifier")]
    NoSpecifier(String),
    /// An allow rule with a shell operator, which can never match one simple command.
    #[error("`{0}` is a shell operator; allow rules match one simple command at a time (write one rule per command)")]
    Operator(String),
    /// A bad path pattern.
    #[error("path pattern: {0}")]
    BadPath(String),
    /// A bad `WebFetch` domain.
    #[error("WebFetch rules are `domain:host` or `domain:*.host`: {0}")]
    BadDomain(String),
}

/// How strongly a rule must match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Match {
    /// The rule matches whatever the run-time values (`$X`, globs, appended `xargs`
    /// arguments) turn out to be. Used for allow rules.
    Sure,
    /// The rule could match for some run-time value. Used for deny and ask rules and
    /// the always-ask list.
    Possible,
}

/// One parsed rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The rule as written (for reasons).
    pub source: String,
    /// The tool name part (`Bash`, `Read`, `mcp__github`).
    pub tool: String,
    /// What the rule says about the call's input.
    pub specifier: Specifier,
}

/// The part of a rule in parentheses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Specifier {
    /// No specifier, or `(*)`: every call of the tool.
    Any,
    /// A Bash command pattern.
    Command(CommandPattern),
    /// A file path pattern.
    Path(PathPattern),
    /// A `WebFetch` domain.
    Domain(DomainPattern),
    /// An exact value (`Task(name)`: the subagent type).
    Exact(String),
}

/// A set of rules: Claude Code's `permissions.allow`, `.ask` and `.deny`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rules {
    /// Rules that allow.
    pub allow: Vec<Rule>,
    /// Rules that ask.
    pub ask: Vec<Rule>,
    /// Rules that deny.
    pub deny: Vec<Rule>,
    /// The agent's home directory, for `~/…` path rules. When `None`, a `~/x` deny or
    /// ask rule matches `x` under any directory and a `~/x` allow rule matches nothing.
    pub home: Option<String>,
}

impl Rules {
    /// Parses the three lists. The first bad rule is the error.
    pub fn parse(allow: &[String], ask: &[String], deny: &[String]) -> Result<Rules, RuleError> {
        let mut rules = Rules::default();
        for (list, sources, out) in [
            (RuleList::Allow, allow, &mut rules.allow),
            (RuleList::Ask, ask, &mut rules.ask),
            (RuleList::Deny, deny, &mut rules.deny),
        ] {
            for s in sources {
                let rule = Rule::parse(s).map_err(|mut e| {
                    e.list = Some(list);
                    e
                })?;
                if list == RuleList::Allow {
                    if let Specifier::Command(p) = &rule.specifier {
                        if let Some(op) = p.operator() {
                            return Err(RuleError {
                                rule: s.clone(),
                                list: Some(list),
                                kind: RuleErrorKind::Operator(op.to_string()),
                            });
                        }
                    }
                }
                out.push(rule);
            }
        }
        Ok(rules)
    }

    /// Sets [`Rules::home`].
    pub fn with_home(mut self, home: impl Into<String>) -> Rules {
        self.home = Some(home.into());
        self
    }
}

impl Rule {
    /// Parses one rule.
    pub fn parse(source: &str) -> Result<Rule, RuleError> {
        let err = |kind| RuleError {
            rule: source.to_string(),
            list: None,
            kind,
        };
        let s = source.trim();
        if s.is_empty() {
            return Err(err(RuleErrorKind::Empty));
        }
        let (tool, spec) = match s.find('(') {
            Some(open) => {
                if !s.ends_with(')') {
                    return Err(err(RuleErrorKind::Unclosed));
                }
                (s[..open].trim(), Some(&s[open + 1..s.len() - 1]))
            }
            None => {
                if s.ends_with(')') {
                    return Err(err(RuleErrorKind::BadToolName(s.to_string())));
                }
                (s, None)
            }
        };
        let is_mcp = tool.starts_with("mcp__");
        let name_ok = !tool.is_empty()
            && tool.char_indices().all(|(i, c)| {
                c.is_ascii_alphanumeric()
                    || c == '_'
                    || c == '-'
                    || (is_mcp && c == '*' && i == tool.len() - 1)
            });
        if !name_ok {
            return Err(err(RuleErrorKind::BadToolName(tool.to_string())));
        }
        let specifier = match spec {
            None => Specifier::Any,
            Some(spec) => {
                let spec = spec.trim();
                if spec.is_empty() {
                    return Err(err(RuleErrorKind::EmptySpecifier));
                }
                if spec == "*" {
                    Specifier::Any
                } else if tool == "Bash" {
                    Specifier::Command(CommandPattern::parse(spec))
                } else if READ_TOOLS.contains(&tool) || EDIT_TOOLS.contains(&tool) {
                    Specifier::Path(
                        PathPattern::parse(spec).map_err(|why| err(RuleErrorKind::BadPath(why)))?,
                    )
                } else if tool == "WebFetch" {
                    Specifier::Domain(
                        DomainPattern::parse(spec)
                            .map_err(|why| err(RuleErrorKind::BadDomain(why)))?,
                    )
                } else if tool == "Task" {
                    Specifier::Exact(spec.to_string())
                } else {
                    return Err(err(RuleErrorKind::NoSpecifier(tool.to_string())));
                }
            }
        };
        Ok(Rule {
            source: s.to_string(),
            tool: tool.to_string(),
            specifier,
        })
    }

    /// Whether the rule is about this tool at all (name, `Read`/`Edit` families, MCP
    /// server prefixes).
    pub fn applies_to_tool(&self, tool_name: &str) -> bool {
        if self.tool == tool_name {
            return true;
        }
        if self.tool == "Read" && READ_TOOLS.contains(&tool_name) {
            return true;
        }
        if self.tool == "Edit" && EDIT_TOOLS.contains(&tool_name) {
            return true;
        }
        if let Some(server) = self.tool.strip_prefix("mcp__") {
            let server = server.strip_suffix("__*").unwrap_or(server);
            if !server.contains("__") {
                if let Some(rest) = tool_name.strip_prefix("mcp__") {
                    return rest
                        .strip_prefix(server)
                        .is_some_and(|r| r.starts_with("__"));
                }
            }
        }
        false
    }

    /// Whether the rule matches a non-Bash call (Bash calls are matched command by
    /// command with [`Rule::matches_command`]). `home` resolves `~/…` path patterns.
    /// For a search (`Glob`, `Grep`, `LS`), a possible match is any overlap with what
    /// lies below the searched directory; see [`Rule::covers_call`] for "the whole
    /// search is inside what the rule names".
    pub fn matches_call(&self, call: &ToolCall, home: Option<&str>, how: Match) -> bool {
        self.call_match(call, home, how, true)
    }

    /// Like [`Rule::matches_call`] with [`Match::Possible`], except that a search
    /// matches only when the searched directory itself is inside what the rule names
    /// (a deny rule for `./.env` covers a `Read` of it, not a `Grep` over the tree
    /// that holds it).
    pub fn covers_call(&self, call: &ToolCall, home: Option<&str>) -> bool {
        self.call_match(call, home, Match::Possible, false)
    }

    fn call_match(&self, call: &ToolCall, home: Option<&str>, how: Match, overlap: bool) -> bool {
        if !self.applies_to_tool(&call.tool_name) {
            return false;
        }
        match &self.specifier {
            Specifier::Any => true,
            Specifier::Command(_) => false,
            Specifier::Path(p) => match file_target(call) {
                Some(target) => p.matches_target(&target, &call.cwd, home, how, overlap),
                None => how == Match::Possible,
            },
            Specifier::Domain(d) => match call.tool_input.get("url").and_then(|u| u.as_str()) {
                Some(url) => d.matches_url(url, how),
                None => how == Match::Possible,
            },
            Specifier::Exact(v) => match call
                .tool_input
                .get("subagent_type")
                .and_then(|u| u.as_str())
            {
                Some(t) => t == v,
                None => how == Match::Possible,
            },
        }
    }

    /// Whether a Bash rule matches one simple command's words. Rules for other tools
    /// never match.
    pub fn matches_command(&self, argv: &[Arg], open_ended: bool, how: Match) -> bool {
        if self.tool != "Bash" {
            return false;
        }
        match &self.specifier {
            Specifier::Any => true,
            Specifier::Command(p) => p.matches(argv, open_ended, how),
            _ => false,
        }
    }

    /// Whether a Bash rule matches the whole command line as written (whitespace
    /// collapsed). Used for deny and ask rules only.
    pub fn matches_line(&self, line: &str) -> bool {
        if self.tool != "Bash" {
            return false;
        }
        match &self.specifier {
            Specifier::Any => true,
            Specifier::Command(p) => p.matches_text(line),
            _ => false,
        }
    }
}

/// A Bash command pattern: `*` wildcards, optional trailing ` *`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandPattern {
    /// The pattern without the trailing ` *` / `:*`, whitespace collapsed.
    pub base: String,
    /// Written with a trailing ` *` or `:*`: the base alone also matches.
    pub prefix: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok {
    Ch(char),
    /// A run-time value: any characters (`Match::Possible`), or only what a `*`
    /// covers (`Match::Sure`).
    Hole,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PTok {
    Ch(char),
    Star,
}

impl CommandPattern {
    /// Parses a Bash specifier (never fails: any text is a pattern).
    pub fn parse(spec: &str) -> CommandPattern {
        let collapsed = spec.split_whitespace().collect::<Vec<_>>().join(" ");
        if let Some(base) = collapsed.strip_suffix(":*") {
            return CommandPattern {
                base: base.trim_end().to_string(),
                prefix: true,
            };
        }
        if let Some(base) = collapsed.strip_suffix(" *") {
            return CommandPattern {
                base: base.to_string(),
                prefix: true,
            };
        }
        CommandPattern {
            base: collapsed,
            prefix: false,
        }
    }

    /// The first shell operator in the pattern, if any.
    pub fn operator(&self) -> Option<&'static str> {
        ["&&", "||", ";", "|", "`", "$(", "\n", "&"]
            .into_iter()
            .find(|op| self.base.contains(op))
    }

    fn ptoks(&self, with_tail: bool) -> Vec<PTok> {
        let mut p: Vec<PTok> = self
            .base
            .chars()
            .map(|c| if c == '*' { PTok::Star } else { PTok::Ch(c) })
            .collect();
        if with_tail {
            p.push(PTok::Ch(' '));
            p.push(PTok::Star);
        }
        p
    }

    fn matches_toks(&self, t: &[Tok], possible: bool) -> bool {
        glob(&self.ptoks(false), t, possible)
            || (self.prefix && glob(&self.ptoks(true), t, possible))
    }

    /// Whether the pattern matches a simple command's words (joined with single
    /// spaces). `open_ended`: more arguments may be appended at run time.
    pub fn matches(&self, argv: &[Arg], open_ended: bool, how: Match) -> bool {
        let mut t: Vec<Tok> = Vec::new();
        for (i, a) in argv.iter().enumerate() {
            if i > 0 {
                t.push(Tok::Ch(' '));
            }
            match a {
                Arg::Literal(s) => t.extend(s.chars().map(Tok::Ch)),
                Arg::Dynamic(_) => t.push(Tok::Hole),
            }
        }
        let possible = how == Match::Possible;
        let bare = self.matches_toks(&t, possible);
        if !open_ended {
            return bare;
        }
        let mut tail = t.clone();
        tail.push(Tok::Ch(' '));
        tail.push(Tok::Hole);
        let with_tail = self.matches_toks(&tail, possible);
        match how {
            Match::Possible => bare || with_tail,
            Match::Sure => bare && with_tail,
        }
    }

    /// Whether the pattern matches a text taken literally (whitespace collapsed).
    pub fn matches_text(&self, text: &str) -> bool {
        let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
        let t: Vec<Tok> = collapsed.chars().map(Tok::Ch).collect();
        self.matches_toks(&t, false)
    }
}

/// Glob match of `p` (chars and `*`) against `t` (chars and holes).
fn glob(p: &[PTok], t: &[Tok], possible: bool) -> bool {
    let (np, nt) = (p.len(), t.len());
    // dp[i][j]: p[i..] matches t[j..]
    let mut dp = vec![vec![false; nt + 1]; np + 1];
    dp[np][nt] = true;
    for j in (0..nt).rev() {
        dp[np][j] = possible && t[j] == Tok::Hole && dp[np][j + 1];
    }
    for i in (0..np).rev() {
        for j in (0..=nt).rev() {
            dp[i][j] = match p[i] {
                PTok::Star => dp[i + 1][j] || (j < nt && dp[i][j + 1]),
                PTok::Ch(c) => {
                    if j == nt {
                        false
                    } else {
                        match t[j] {
                            Tok::Ch(d) => c == d && dp[i + 1][j + 1],
                            // A hole may be empty, or swallow this pattern character
                            // and go on.
                            Tok::Hole => {
                                possible && (dp[i][j + 1] || dp[i + 1][j] || dp[i + 1][j + 1])
                            }
                        }
                    }
                }
            };
        }
    }
    dp[0][0]
}

/// Where a path pattern is anchored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anchor {
    /// The call's cwd (`./x`, `/x`, `x/y`).
    Cwd,
    /// The call's cwd, at any depth (`*.env`, `secrets/`).
    CwdAnyDepth,
    /// The filesystem root (`//x`).
    Root,
    /// The home directory (`~/x`).
    Home,
}

/// A gitignore-style path pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathPattern {
    /// The pattern as written.
    pub source: String,
    /// Where it is anchored.
    pub anchor: Anchor,
    segments: Vec<Seg>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    /// `**`: any number of segments.
    Any,
    /// One segment's glob.
    Glob(Vec<GTok>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum GTok {
    Ch(char),
    One,
    Star,
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

/// What a file tool call touches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileTarget {
    /// The path, absolute and lexically normalized.
    pub path: String,
    /// A directory whose files' contents are searched (`Grep`): everything below it
    /// may be read. `Glob` and `LS` list names only; their target is the directory
    /// itself.
    pub search: bool,
}

/// The path a file tool call touches (`file_path`, `notebook_path`, or for
/// `Glob`/`Grep`/`LS` the searched directory: `path`, default the cwd, narrowed by
/// `Glob`'s pattern's static prefix). `None` when the tool is not a file tool or its
/// path is missing.
pub fn file_target(call: &ToolCall) -> Option<FileTarget> {
    let input = &call.tool_input;
    let field = |k: &str| input.get(k).and_then(|v| v.as_str());
    match call.tool_name.as_str() {
        "Read" | "Edit" | "Write" | "MultiEdit" => field("file_path").map(|p| FileTarget {
            path: normalize(&call.cwd, p),
            search: false,
        }),
        "NotebookEdit" | "NotebookRead" => field("notebook_path").map(|p| FileTarget {
            path: normalize(&call.cwd, p),
            search: false,
        }),
        "Grep" | "LS" => Some(FileTarget {
            path: normalize(&call.cwd, field("path").unwrap_or(".")),
            search: call.tool_name == "Grep",
        }),
        "Glob" => {
            let root = normalize(&call.cwd, field("path").unwrap_or("."));
            let pattern = field("pattern").unwrap_or("**");
            let mut dir = if pattern.starts_with('/') {
                "/".to_string()
            } else {
                root
            };
            let mut escaped = false;
            let mut in_glob = false;
            for seg in pattern.split('/') {
                if seg == ".." && in_glob {
                    escaped = true;
                }
                if in_glob || seg.contains(['*', '?', '[', '{']) {
                    in_glob = true;
                    continue;
                }
                dir = normalize(&dir, seg);
            }
            Some(FileTarget {
                path: if escaped { "/".to_string() } else { dir },
                search: false,
            })
        }
        _ => None,
    }
}

/// `p` made absolute against `cwd` and lexically normalized (`.`/`..` resolved, no
/// symlinks followed, never above `/`).
pub fn normalize(cwd: &str, p: &str) -> String {
    let joined = if p.starts_with('/') {
        p.to_string()
    } else {
        format!("{cwd}/{p}")
    };
    let mut out: Vec<&str> = Vec::new();
    for seg in joined.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
    }
    format!("/{}", out.join("/"))
}

/// Whether `path` is `root` or inside it (both absolute, normalized).
pub fn is_within(path: &str, root: &str) -> bool {
    let root = root.trim_end_matches('/');
    path == root || root.is_empty() || path.strip_prefix(root).is_some_and(|r| r.starts_with('/'))
}

fn segments(path: &str) -> Vec<&str> {
    path.split('/').filter(|s| !s.is_empty()).collect()
}

impl PathPattern {
    /// Parses a file tool specifier.
    pub fn parse(spec: &str) -> Result<PathPattern, String> {
        let (anchor, rest) = if let Some(r) = spec.strip_prefix("//") {
            (Anchor::Root, r)
        } else if spec == "~" {
            (Anchor::Home, "")
        } else if let Some(r) = spec.strip_prefix("~/") {
            (Anchor::Home, r)
        } else if spec.starts_with('~') {
            return Err(format!(
                "`{spec}`: only `~/` (the agent's own home) is understood"
            ));
        } else if let Some(r) = spec.strip_prefix("./") {
            (Anchor::Cwd, r)
        } else if let Some(r) = spec.strip_prefix('/') {
            (Anchor::Cwd, r)
        } else {
            let inner = spec.trim_end_matches('/');
            if inner.contains('/') {
                (Anchor::Cwd, spec)
            } else {
                (Anchor::CwdAnyDepth, spec)
            }
        };
        let mut segments = Vec::new();
        for seg in rest.split('/') {
            match seg {
                "" | "." => {}
                ".." => return Err(format!("`{spec}`: `..` is not allowed in path patterns")),
                "**" => segments.push(Seg::Any),
                s => segments.push(Seg::Glob(
                    parse_segment(s).map_err(|e| format!("`{spec}`: {e}"))?,
                )),
            }
        }
        Ok(PathPattern {
            source: spec.to_string(),
            anchor,
            segments,
        })
    }

    /// The full pattern (base directory, any-depth marker, segments, and a trailing
    /// `**` for "a directory matches its contents"), or `None` when the base is
    /// unknown for a sure match.
    fn full(&self, cwd: &str, home: Option<&str>, how: Match) -> Option<Vec<Seg>> {
        let lit = |s: &str| Seg::Glob(s.chars().map(GTok::Ch).collect());
        let mut full: Vec<Seg> = Vec::new();
        match self.anchor {
            Anchor::Cwd | Anchor::CwdAnyDepth => {
                full.extend(segments(&normalize("/", cwd)).into_iter().map(lit));
                if self.anchor == Anchor::CwdAnyDepth {
                    full.push(Seg::Any);
                }
            }
            Anchor::Root => {}
            Anchor::Home => match home {
                Some(h) => full.extend(segments(&normalize("/", h)).into_iter().map(lit)),
                None if how == Match::Possible => full.push(Seg::Any),
                None => return None,
            },
        }
        full.extend(self.segments.iter().cloned());
        full.push(Seg::Any);
        Some(full)
    }

    /// Whether the pattern matches `path` (absolute, normalized) or a directory
    /// containing it.
    pub fn matches_path(&self, path: &str, cwd: &str, home: Option<&str>, how: Match) -> bool {
        match self.full(cwd, home, how) {
            Some(full) => segs_match(&full, &segments(path)),
            None => false,
        }
    }

    /// Whether the pattern matches a call's target. For a searched directory: with
    /// `overlap` and [`Match::Possible`], any overlap with what lies below it;
    /// otherwise the pattern must cover the whole directory.
    pub fn matches_target(
        &self,
        target: &FileTarget,
        cwd: &str,
        home: Option<&str>,
        how: Match,
        overlap: bool,
    ) -> bool {
        let Some(full) = self.full(cwd, home, how) else {
            return false;
        };
        let path = segments(&target.path);
        if target.search && overlap && how == Match::Possible {
            segs_prefix(&full, &path)
        } else {
            segs_match(&full, &path)
        }
    }
}

fn parse_segment(s: &str) -> Result<Vec<GTok>, String> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '*' => {
                out.push(GTok::Star);
                i += 1;
            }
            '?' => {
                out.push(GTok::One);
                i += 1;
            }
            '\\' if i + 1 < chars.len() => {
                out.push(GTok::Ch(chars[i + 1]));
                i += 2;
            }
            '[' => {
                let mut j = i + 1;
                let negated = matches!(chars.get(j), Some('!' | '^'));
                if negated {
                    j += 1;
                }
                let mut ranges = Vec::new();
                let mut first = true;
                loop {
                    match chars.get(j) {
                        None => return Err("unclosed `[` in a path pattern".to_string()),
                        Some(']') if !first => break,
                        Some(&c) => {
                            if chars.get(j + 1) == Some(&'-')
                                && chars.get(j + 2).is_some_and(|&d| d != ']')
                            {
                                ranges.push((c, chars[j + 2]));
                                j += 3;
                            } else {
                                ranges.push((c, c));
                                j += 1;
                            }
                        }
                    }
                    first = false;
                }
                out.push(GTok::Class { negated, ranges });
                i = j + 1;
            }
            c => {
                out.push(GTok::Ch(c));
                i += 1;
            }
        }
    }
    Ok(out)
}

fn seg_match(p: &[GTok], s: &[char]) -> bool {
    let (np, ns) = (p.len(), s.len());
    let mut dp = vec![vec![false; ns + 1]; np + 1];
    dp[np][ns] = true;
    for i in (0..np).rev() {
        for j in (0..=ns).rev() {
            dp[i][j] = match &p[i] {
                GTok::Star => dp[i + 1][j] || (j < ns && dp[i][j + 1]),
                _ if j == ns => false,
                GTok::One => dp[i + 1][j + 1],
                GTok::Ch(c) => *c == s[j] && dp[i + 1][j + 1],
                GTok::Class { negated, ranges } => {
                    let inside = ranges.iter().any(|&(a, b)| a <= s[j] && s[j] <= b);
                    inside != *negated && dp[i + 1][j + 1]
                }
            };
        }
    }
    dp[0][0]
}

fn seg_matches(seg: &Seg, s: &str) -> bool {
    match seg {
        Seg::Any => true,
        Seg::Glob(p) => seg_match(p, &s.chars().collect::<Vec<_>>()),
    }
}

/// `pattern` matches all of `path`.
fn segs_match(pattern: &[Seg], path: &[&str]) -> bool {
    let (np, ns) = (pattern.len(), path.len());
    let mut dp = vec![vec![false; ns + 1]; np + 1];
    dp[np][ns] = true;
    for i in (0..np).rev() {
        for j in (0..=ns).rev() {
            dp[i][j] = match &pattern[i] {
                Seg::Any => dp[i + 1][j] || (j < ns && dp[i][j + 1]),
                seg => j < ns && seg_matches(seg, path[j]) && dp[i + 1][j + 1],
            };
        }
    }
    dp[0][0]
}

/// A prefix of `pattern` matches all of `path`: the pattern could match `path` or
/// something below it.
fn segs_prefix(pattern: &[Seg], path: &[&str]) -> bool {
    let (np, ns) = (pattern.len(), path.len());
    let mut dp = vec![vec![false; ns + 1]; np + 1];
    for row in dp.iter_mut() {
        row[ns] = true;
    }
    for i in (0..np).rev() {
        for j in (0..ns).rev() {
            dp[i][j] = match &pattern[i] {
                Seg::Any => dp[i + 1][j] || dp[i][j + 1],
                seg => seg_matches(seg, path[j]) && dp[i + 1][j + 1],
            };
        }
    }
    dp[0][0]
}

/// A `WebFetch` domain: a host, or its subdomains (`*.host`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainPattern {
    /// The host, lowercase, without `*.`.
    pub host: String,
    /// Written `*.host`: subdomains of `host` (not `host` itself).
    pub subdomains: bool,
}

impl DomainPattern {
    /// Parses `domain:host` or `domain:*.host`.
    pub fn parse(spec: &str) -> Result<DomainPattern, String> {
        let value = spec
            .strip_prefix("domain:")
            .ok_or_else(|| format!("`{spec}` does not start with `domain:`"))?
            .trim()
            .to_ascii_lowercase();
        let (host, subdomains) = match value.strip_prefix("*.") {
            Some(h) => (h.to_string(), true),
            None => (value.clone(), false),
        };
        let host = host.trim_end_matches('.').to_string();
        if host.is_empty()
            || !host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_')
        {
            return Err(format!("`{value}` is not a host name"));
        }
        Ok(DomainPattern { host, subdomains })
    }

    /// Whether the URL's host matches. A URL whose host cannot be read matches only
    /// [`Match::Possible`].
    pub fn matches_url(&self, url: &str, how: Match) -> bool {
        match url_host(url) {
            None => how == Match::Possible,
            Some(h) => {
                if self.subdomains {
                    h.strip_suffix(&self.host).is_some_and(|r| r.ends_with('.'))
                } else {
                    h == self.host
                }
            }
        }
    }
}

/// The host of an absolute URL (`scheme://[userinfo@]host[:port]/…`), lowercase,
/// without a trailing dot. `None` if it has no `://`, an empty host, or characters
/// that could make different readers see different hosts (`%`, `\`, spaces).
pub fn url_host(url: &str) -> Option<String> {
    let (_, rest) = url.trim().split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains(['\\', '%', ' ', '\t']) {
        // Readers disagree on these (WHATWG treats `\` as `/`): no host.
        return None;
    }
    // WHATWG URL parsing (the `url` crate), as the agent's own fetch reads it.
    let parsed = url::Url::parse(url.trim()).ok()?;
    let host = parsed.host_str()?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
        .trim_end_matches('.')
        .to_ascii_lowercase();
    (!host.is_empty()).then_some(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(words: &[&str]) -> Vec<Arg> {
        words.iter().map(|w| Arg::Literal(w.to_string())).collect()
    }

    #[test]
    fn command_patterns_and_holes() {
        let p = CommandPattern::parse("git  push *");
        assert_eq!((p.base.as_str(), p.prefix), ("git push", true));
        assert!(p.matches(&lit(&["git", "push"]), false, Match::Sure));
        assert!(!p.matches(&lit(&["git", "pushx"]), false, Match::Sure));
        let hole = vec![Arg::Literal("git".into()), Arg::Dynamic("$X".into())];
        assert!(p.matches(&hole, false, Match::Possible));
        assert!(!p.matches(&hole, false, Match::Sure));
        let any = CommandPattern::parse("git *");
        assert!(any.matches(&hole, false, Match::Sure));
        // open-ended: a sure match must hold with and without appended words
        let exact = CommandPattern::parse("cat");
        assert!(!exact.matches(&lit(&["cat"]), true, Match::Sure));
        assert!(exact.matches(&lit(&["cat"]), true, Match::Possible));
        assert!(CommandPattern::parse("npm run test:*").matches(
            &lit(&["npm", "run", "test"]),
            false,
            Match::Sure
        ));
        assert_eq!(CommandPattern::parse("a && b").operator(), Some("&&"));
    }

    #[test]
    fn path_patterns() {
        let m = |pat: &str, path: &str| {
            PathPattern::parse(pat)
                .unwrap()
                .matches_path(path, "/t", None, Match::Sure)
        };
        assert!(m("./secrets/**", "/t/secrets/a/b"));
        assert!(m("./secrets", "/t/secrets/a"));
        assert!(m("/secrets/*.key", "/t/secrets/a.key"));
        assert!(!m("/secrets/*.key", "/t/secrets/x/a.key"));
        assert!(m("*.env", "/t/a/b/.env"));
        assert!(!m("*.env", "/elsewhere/.env"));
        assert!(m("docs/*.md", "/t/docs/a.md"));
        assert!(!m("docs/*.md", "/t/x/docs/a.md"));
        assert!(m("//etc/passwd", "/etc/passwd"));
        assert!(m("./[ab]?.txt", "/t/a1.txt"));
        assert!(!m("./[!ab]?.txt", "/t/a1.txt"));
        assert!(!m("~/.ssh/**", "/home/x/.ssh/id"));
        let home = PathPattern::parse("~/.ssh/**").unwrap();
        assert!(home.matches_path("/home/x/.ssh/id", "/t", None, Match::Possible));
        assert!(home.matches_path("/home/x/.ssh/id", "/t", Some("/home/x"), Match::Sure));
        assert!(!home.matches_path("/home/y/.ssh/id", "/t", Some("/home/x"), Match::Sure));
    }

    #[test]
    fn normalize_and_within() {
        assert_eq!(normalize("/t", "a/../../etc"), "/etc");
        assert_eq!(normalize("/t", "/../x/./y/"), "/x/y");
        assert!(is_within("/t/a", "/t"));
        assert!(is_within("/t", "/t/"));
        assert!(!is_within("/tx", "/t"));
    }

    #[test]
    fn url_hosts() {
        assert_eq!(
            url_host("https://User@Docs.RS:443/x?y#z").as_deref(),
            Some("docs.rs")
        );
        assert_eq!(url_host("http://[::1]:8080/").as_deref(), Some("::1"));
        assert_eq!(url_host("https://evil.test\\@docs.rs/"), None);
        assert_eq!(url_host("docs.rs/x"), None);
    }

    #[test]
    fn tool_families_and_mcp() {
        let r = Rule::parse("Read(./x)").unwrap();
        assert!(r.applies_to_tool("Grep") && !r.applies_to_tool("Edit"));
        let r = Rule::parse("Edit").unwrap();
        assert!(r.applies_to_tool("NotebookEdit") && !r.applies_to_tool("Read"));
        let r = Rule::parse("mcp__srv__*").unwrap();
        assert!(r.applies_to_tool("mcp__srv__a") && !r.applies_to_tool("mcp__srvx__a"));
        let r = Rule::parse("mcp__srv__a").unwrap();
        assert!(r.applies_to_tool("mcp__srv__a") && !r.applies_to_tool("mcp__srv__b"));
    }
}

//! What a Bash command line would run: every simple command, seen through wrappers.
//!
//! The gate never splits a command on spaces. [`analyze`] parses the line with
//! [brush-parser](https://docs.rs/brush-parser/0.4) (a POSIX/bash parser) and walks the
//! whole tree: lists (`;`, newlines, `&`), `&&`/`||`, pipes, `( … )` subshells,
//! `{ …; }` groups, `if`/`while`/`until`/`for`/`case` bodies, function bodies (a
//! function's body counts as commands whether or not it is called), coprocesses,
//! `$( … )` and backtick substitutions wherever a word can hold one (arguments,
//! assignments, redirection targets, here-document bodies, `[[ … ]]`, `case` and `for`
//! words) and process substitutions `<( … )` / `>( … )`.
//!
//! Each simple command is then seen through the wrappers that run another command:
//! `timeout`, `nice`, `nohup`, `env [-i] [-u X] VAR=1 …` (bare `env` is itself the
//! command `env`), `command [-p]`, `exec`, `builtin`, `xargs` (its command gets more
//! arguments at run time: [`SimpleCommand::open_ended`]), `time`, `stdbuf`, `ionice`,
//! `setsid`, `busybox APPLET`, `sh|bash|zsh|dash|ksh|mksh|ash -c '…'` (the string is
//! parsed again, at most [`MAX_DEPTH`] levels deep), and leading `VAR=1` assignments.
//! `sudo`, `doas`, `su -c '…'` and `find … -exec` stay visible as commands of their
//! own *and* the command they run is produced too. Program paths are kept as written in
//! [`SimpleCommand::argv`]; [`SimpleCommand::program`] gives the last path component
//! (`/usr/bin/git` → `git`).
//!
//! Anything that could hide what runs becomes an [`Unparsed`] entry instead of a
//! command (the gate answers `Ask` for it, never `Allow`): a syntax error; a program
//! name that is not a static word (`$X`, `$(…)`, globs, brace expansion, `$'…'` with
//! escapes); `eval`, `source`/`.`, `fc`, `enable`, `alias NAME=…`, `hash -p`; a shell
//! reading its commands from standard input or a here-document (`curl … | sh`,
//! `bash <<EOF`) or a non-static `-c` string; `env -S`; `trap` with a non-static action;
//! command substitutions inside arithmetic or `${…}` expansions; `${x@P}`; assignments
//! to variables that change what runs (`PATH`, `BASH_ENV`, `ENV`, `PS4`,
//! `PROMPT_COMMAND`, `SHELLOPTS`, `BASHOPTS`, `LD_PRELOAD`, `LD_AUDIT`,
//! `LD_LIBRARY_PATH`, `BASH_FUNC_*`); a wrapper option this module does not know (it
//! cannot tell which word is the command); nesting deeper than [`MAX_DEPTH`].
//!
//! Arguments that are not static (`$HOME`, `"$x"`, `$(date)`, `*.rs`, `{a,b}`) are kept
//! as [`Arg::Dynamic`]: matching treats them as "could be any words".
//!
//! Known limits (documented, not handled): variables set by `read`, `printf -v` or
//! `mapfile` and later used in arithmetic (`a[$(…)]` injection through a variable's
//! value); commands run by other programs' own options (`git -c core.pager=…`,
//! `git rebase --exec`, `ssh host cmd`, `watch`, `parallel`, `python -c`); git aliases
//! from configuration files; symlinks. The sandbox is the structural boundary; this
//! module makes the gate's questions precise.
//!
//! Pure: no IO, no clock.

use brush_parser::ast;
use brush_parser::word::{self, ParameterExpr, ParameterTransformOp, WordPiece};
use brush_parser::{Parser, ParserOptions};

/// How many levels of `sh -c '…'`, `$( … )` and backticks are followed before the
/// line is [`Unparsed`].
pub const MAX_DEPTH: usize = 8;

/// One word of a command after quote removal.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Arg {
    /// A static word: its exact value after quote removal (`"a b"` → `a b`,
    /// `~/x` stays `~/x`).
    Literal(String),
    /// A word whose value is only known at run time (parameter or command
    /// substitution, arithmetic, glob, brace expansion, ANSI-C escapes). Holds the
    /// word as written. It may expand to any number of words, including none.
    Dynamic(String),
}

impl Arg {
    /// The literal value, if static.
    pub fn literal(&self) -> Option<&str> {
        match self {
            Arg::Literal(s) => Some(s),
            Arg::Dynamic(_) => None,
        }
    }

    /// The word for display: the literal value, or the word as written.
    pub fn as_text(&self) -> &str {
        match self {
            Arg::Literal(s) | Arg::Dynamic(s) => s,
        }
    }
}

/// One simple command the line would run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimpleCommand {
    /// The command after seeing through wrappers: `argv[0]` is the program as written
    /// (always [`Arg::Literal`]), then its arguments.
    pub argv: Vec<Arg>,
    /// The words as written in the line, wrappers included (`timeout 5 git push` →
    /// `[timeout, 5, git, push]`); equal to `argv` when there was no wrapper.
    pub written: Vec<Arg>,
    /// The wrappers seen through, outermost first (`["timeout", "nice"]`).
    pub wrappers: Vec<String>,
    /// More arguments are appended at run time (`xargs cmd`, `find -exec cmd {} +`).
    pub open_ended: bool,
}

impl SimpleCommand {
    /// The program's name: the last path component of `argv[0]` (`/usr/bin/git` →
    /// `git`).
    pub fn program(&self) -> &str {
        self.argv
            .first()
            .map(|a| basename(a.as_text()))
            .unwrap_or("")
    }

    /// `argv` joined with single spaces (dynamic words as written), for reasons.
    pub fn text(&self) -> String {
        let mut s = join(&self.argv);
        if self.open_ended {
            s.push_str(" …");
        }
        s
    }
}

/// Part of a line whose effect cannot be known statically. The gate answers `Ask`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot tell what runs: {reason}")]
pub struct Unparsed {
    /// What could not be understood, and where.
    pub reason: String,
}

/// Everything [`analyze`] found in one command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Analysis {
    /// Every simple command the line would run, in source order.
    pub commands: Vec<SimpleCommand>,
    /// Everything that could hide what runs. Non-empty means the gate must ask.
    pub unparsed: Vec<Unparsed>,
}

/// Parses a Bash command line and lists every simple command it would run, seen
/// through wrappers, plus everything that could hide what runs. Never fails: a syntax
/// error is an [`Unparsed`] entry.
pub fn analyze(line: &str) -> Analysis {
    let mut walker = Walker {
        out: Analysis::default(),
        opts: ParserOptions::default(),
        sources: Vec::new(),
    };
    walker.program(line, 0);
    walker.out
}

/// [`analyze`], as a result: the commands, or the first [`Unparsed`] reason.
pub fn simple_commands(line: &str) -> Result<Vec<SimpleCommand>, Unparsed> {
    let analysis = analyze(line);
    match analysis.unparsed.into_iter().next() {
        Some(u) => Err(u),
        None => Ok(analysis.commands),
    }
}

/// The last `/`-separated component of a program path.
pub fn basename(program: &str) -> &str {
    let trimmed = program.trim_end_matches('/');
    match trimmed.rfind('/') {
        Some(i) => &trimmed[i + 1..],
        None => trimmed,
    }
}

/// Words joined with single spaces (dynamic words as written).
pub fn join(args: &[Arg]) -> String {
    let mut s = String::new();
    for (i, a) in args.iter().enumerate() {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(a.as_text());
    }
    s
}

/// Variables whose assignment changes which program runs or makes a shell run code.
const DANGEROUS_VARS: &[&str] = &[
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
];

fn dangerous_var(name: &str) -> bool {
    DANGEROUS_VARS.contains(&name) || name.starts_with("BASH_FUNC_")
}

/// Shells whose `-c STRING` is parsed again.
const SHELLS: &[&str] = &["sh", "bash", "zsh", "dash", "ksh", "mksh", "ash"];

/// Builtins that declare variables (their `NAME=…` operands are assignments).
const DECLARATIONS: &[&str] = &["export", "declare", "typeset", "local", "readonly"];

struct Walker {
    out: Analysis,
    opts: ParserOptions,
    /// The source texts being walked, innermost last (locations index into them).
    sources: Vec<String>,
}

/// What a wrapper does with the rest of the words.
enum Step {
    /// The wrapper runs this command (the remaining words); `open_ended` when more
    /// arguments are appended at run time.
    Runs { rest: Vec<Arg>, open_ended: bool },
    /// The words are themselves the command (no inner command, or not a wrapper).
    Itself,
    /// Emit the current words as a command *and* go on with the inner command.
    Visible { rest: Vec<Arg>, open_ended: bool },
    /// Nothing more to emit: the wrapper's commands were already produced
    /// (`sh -c '…'`).
    Consumed,
}

impl Walker {
    fn unparsed(&mut self, reason: impl Into<String>) {
        self.out.unparsed.push(Unparsed {
            reason: reason.into(),
        });
    }

    fn program(&mut self, src: &str, depth: usize) {
        if depth > MAX_DEPTH {
            self.unparsed(format!("nested more than {MAX_DEPTH} levels deep"));
            return;
        }
        // The parser is third-party code: a panic in it must end as "unparsed" (the
        // gate asks), never as a crashed gate.
        let opts = &self.opts;
        let parsed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Parser::new(std::io::Cursor::new(src.as_bytes()), opts).parse_program()
        }));
        match parsed {
            Ok(Ok(program)) => {
                self.sources.push(src.to_string());
                for list in &program.complete_commands {
                    self.list(list, depth);
                }
                self.sources.pop();
            }
            Ok(Err(e)) => self.unparsed(format!("shell syntax: {e}")),
            Err(_) => self.unparsed("the shell parser failed on this line"),
        }
    }

    fn list(&mut self, list: &ast::CompoundList, depth: usize) {
        for item in &list.0 {
            for (_, pipeline) in item.0.iter() {
                for command in &pipeline.seq {
                    self.command(command, depth);
                }
            }
        }
    }

    fn command(&mut self, command: &ast::Command, depth: usize) {
        match command {
            ast::Command::Simple(simple) => self.simple(simple, depth),
            ast::Command::Compound(compound, redirects) => {
                self.compound(compound, depth);
                self.redirects(redirects.as_ref(), depth);
            }
            ast::Command::Function(function) => {
                self.compound(&function.body.0, depth);
                self.redirects(function.body.1.as_ref(), depth);
            }
            ast::Command::ExtendedTest(test, redirects) => {
                self.extended_test(&test.expr, depth);
                self.redirects(redirects.as_ref(), depth);
            }
        }
    }

    fn redirects(&mut self, redirects: Option<&ast::RedirectList>, depth: usize) {
        if let Some(list) = redirects {
            for r in &list.0 {
                self.redirect(r, depth);
            }
        }
    }

    fn extended_test(&mut self, expr: &ast::ExtendedTestExpr, depth: usize) {
        use ast::ExtendedTestExpr as E;
        match expr {
            E::And(a, b) | E::Or(a, b) => {
                self.extended_test(a, depth);
                self.extended_test(b, depth);
            }
            E::Not(a) | E::Parenthesized(a) => self.extended_test(a, depth),
            E::UnaryTest(_, w) => {
                self.word(&w.value, depth);
            }
            E::BinaryTest(_, a, b) => {
                self.word(&a.value, depth);
                self.word(&b.value, depth);
            }
        }
    }

    /// An arithmetic expression: must be one (bash runs a failed `$((…) )` as a
    /// command substitution) and must not hide a command substitution.
    fn arithmetic(&mut self, expr: &str) {
        if expr.contains("$(") || expr.contains('`') || expr.contains("<(") {
            self.unparsed(format!("command substitution inside arithmetic `{expr}`"));
        } else if !is_arithmetic(expr) {
            self.unparsed(format!(
                "`{expr}` is not an arithmetic expression (bash may run it as commands)"
            ));
        }
    }

    /// A `(( … ))` command. bash reads `( (ls) )` and `((ls) )` as nested subshells;
    /// the parser may read them as arithmetic. Genuine only when the source really has
    /// `((` and the inside is an arithmetic expression; otherwise the inside is walked
    /// as commands.
    fn arithmetic_command(&mut self, a: &ast::ArithmeticCommand, depth: usize) {
        let expr = &a.expr.value;
        let adjacent = self
            .sources
            .last()
            .is_some_and(|src| src.chars().skip(a.loc.start.index).take(2).eq("((".chars()));
        if adjacent && is_arithmetic(expr) {
            self.arithmetic(expr);
        } else {
            self.program(expr, depth + 1);
        }
    }

    fn compound(&mut self, compound: &ast::CompoundCommand, depth: usize) {
        use ast::CompoundCommand as C;
        match compound {
            C::Arithmetic(a) => self.arithmetic_command(a, depth),
            C::ArithmeticForClause(f) => {
                for e in [&f.initializer, &f.condition, &f.updater]
                    .into_iter()
                    .flatten()
                {
                    self.arithmetic(&e.value);
                }
                self.list(&f.body.list, depth);
            }
            C::BraceGroup(b) => self.list(&b.list, depth),
            C::Subshell(s) => self.list(&s.list, depth),
            C::ForClause(f) => {
                for w in f.values.iter().flatten() {
                    self.word(&w.value, depth);
                }
                self.list(&f.body.list, depth);
            }
            C::CaseClause(c) => {
                self.word(&c.value.value, depth);
                for case in &c.cases {
                    for p in &case.patterns {
                        self.word(&p.value, depth);
                    }
                    if let Some(cmd) = &case.cmd {
                        self.list(cmd, depth);
                    }
                }
            }
            C::IfClause(i) => {
                self.list(&i.condition, depth);
                self.list(&i.then, depth);
                for e in i.elses.iter().flatten() {
                    if let Some(c) = &e.condition {
                        self.list(c, depth);
                    }
                    self.list(&e.body, depth);
                }
            }
            C::WhileClause(w) | C::UntilClause(w) => {
                self.list(&w.0, depth);
                self.list(&w.1.list, depth);
            }
            C::Coprocess(c) => self.command(&c.body, depth),
        }
    }

    fn redirect(&mut self, redirect: &ast::IoRedirect, depth: usize) {
        match redirect {
            ast::IoRedirect::File(_, _, target) => match target {
                ast::IoFileRedirectTarget::Filename(w)
                | ast::IoFileRedirectTarget::Duplicate(w) => {
                    self.word(&w.value, depth);
                }
                ast::IoFileRedirectTarget::Fd(_) => {}
                ast::IoFileRedirectTarget::ProcessSubstitution(_, sub) => {
                    self.nested_list(&sub.list, depth)
                }
            },
            ast::IoRedirect::HereDocument(_, doc) => {
                if doc.requires_expansion {
                    let opts = &self.opts;
                    let body = &doc.doc.value;
                    let parsed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        word::parse_heredoc(body, opts)
                    }));
                    match parsed {
                        Ok(Ok(pieces)) => {
                            let mut value = String::new();
                            let mut dynamic = false;
                            self.pieces(&pieces, body, true, depth, &mut value, &mut dynamic);
                        }
                        Ok(Err(e)) => self.unparsed(format!("here-document: {e}")),
                        Err(_) => self.unparsed("the word parser failed on a here-document"),
                    }
                }
            }
            ast::IoRedirect::HereString(_, w) | ast::IoRedirect::OutputAndError(w, _) => {
                self.word(&w.value, depth);
            }
        }
    }

    fn nested_list(&mut self, list: &ast::CompoundList, depth: usize) {
        if depth + 1 > MAX_DEPTH {
            self.unparsed(format!("nested more than {MAX_DEPTH} levels deep"));
            return;
        }
        self.list(list, depth + 1);
    }

    /// Evaluates one word: its static value, or dynamic; walks every substitution in
    /// it.
    fn word(&mut self, raw: &str, depth: usize) -> Arg {
        let opts = &self.opts;
        let parsed =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| word::parse(raw, opts)));
        let Ok(parsed) = parsed else {
            self.unparsed(format!("the word parser failed on `{raw}`"));
            return Arg::Dynamic(raw.to_string());
        };
        match parsed {
            Ok(pieces) => {
                let mut value = String::new();
                let mut dynamic = false;
                self.pieces(&pieces, raw, false, depth, &mut value, &mut dynamic);
                if !dynamic && has_brace_expansion(&pieces, raw) {
                    dynamic = true;
                }
                if dynamic {
                    Arg::Dynamic(raw.to_string())
                } else {
                    Arg::Literal(value)
                }
            }
            Err(e) => {
                self.unparsed(format!("word `{raw}`: {e}"));
                Arg::Dynamic(raw.to_string())
            }
        }
    }

    fn pieces(
        &mut self,
        pieces: &[word::WordPieceWithSource],
        raw: &str,
        quoted: bool,
        depth: usize,
        value: &mut String,
        dynamic: &mut bool,
    ) {
        for p in pieces {
            match &p.piece {
                WordPiece::Text(t) => {
                    if !quoted && t.contains(['*', '?', '[', '(']) {
                        *dynamic = true;
                    }
                    value.push_str(t);
                }
                WordPiece::SingleQuotedText(t) => value.push_str(t),
                WordPiece::AnsiCQuotedText(t) => {
                    if t.contains('\\') {
                        *dynamic = true;
                    }
                    value.push_str(t);
                }
                WordPiece::DoubleQuotedSequence(inner)
                | WordPiece::GettextDoubleQuotedSequence(inner) => {
                    self.pieces(inner, raw, true, depth, value, dynamic);
                }
                WordPiece::TildeExpansion(t) => match t {
                    word::TildeExpr::Home => value.push('~'),
                    word::TildeExpr::UserHome(u) => {
                        value.push('~');
                        value.push_str(u);
                    }
                    _ => *dynamic = true,
                },
                WordPiece::ParameterExpansion(expr) => {
                    *dynamic = true;
                    let source = raw.get(p.start_index..p.end_index).unwrap_or(raw);
                    if source.contains("$(")
                        || source.contains('`')
                        || source.contains("<(")
                        || source.contains(">(")
                    {
                        self.unparsed(format!(
                            "command substitution inside a parameter expansion `{source}`"
                        ));
                    }
                    if matches!(
                        expr,
                        ParameterExpr::Transform {
                            op: ParameterTransformOp::PromptExpand,
                            ..
                        }
                    ) {
                        self.unparsed(format!(
                            "prompt expansion `{source}` can run command substitutions"
                        ));
                    }
                }
                WordPiece::CommandSubstitution(src)
                | WordPiece::BackquotedCommandSubstitution(src) => {
                    *dynamic = true;
                    self.program(src, depth + 1);
                }
                WordPiece::EscapeSequence(s) => {
                    let rest = s.strip_prefix('\\').unwrap_or(s);
                    if rest != "\n" {
                        value.push_str(rest);
                    }
                }
                WordPiece::ArithmeticExpression(e) => {
                    *dynamic = true;
                    self.arithmetic(&e.value);
                }
            }
        }
    }

    fn assignment(&mut self, a: &ast::Assignment, depth: usize, check_name: bool) {
        let name = match &a.name {
            ast::AssignmentName::VariableName(n) => n.as_str(),
            ast::AssignmentName::ArrayElementName(n, index) => {
                self.arithmetic(index);
                n.as_str()
            }
        };
        if check_name && dangerous_var(name) {
            self.unparsed(format!("assignment to `{name}` changes what runs"));
        }
        match &a.value {
            ast::AssignmentValue::Scalar(w) => {
                self.word(&w.value, depth);
            }
            ast::AssignmentValue::Array(items) => {
                for (k, v) in items {
                    if let Some(k) = k {
                        self.word(&k.value, depth);
                    }
                    self.word(&v.value, depth);
                }
            }
        }
    }

    fn simple(&mut self, simple: &ast::SimpleCommand, depth: usize) {
        let mut words: Vec<Arg> = Vec::new();
        if let Some(prefix) = &simple.prefix {
            for it in &prefix.0 {
                self.item(it, true, depth, &mut words);
            }
        }
        if let Some(name) = &simple.word_or_name {
            words.push(self.word(&name.value, depth));
        }
        if let Some(suffix) = &simple.suffix {
            for it in &suffix.0 {
                self.item(it, false, depth, &mut words);
            }
        }
        if words.is_empty() {
            return;
        }
        self.resolve(words, depth);
    }

    fn item(
        &mut self,
        it: &ast::CommandPrefixOrSuffixItem,
        in_prefix: bool,
        depth: usize,
        words: &mut Vec<Arg>,
    ) {
        match it {
            ast::CommandPrefixOrSuffixItem::IoRedirect(r) => self.redirect(r, depth),
            ast::CommandPrefixOrSuffixItem::Word(w) => {
                let arg = self.word(&w.value, depth);
                words.push(arg);
            }
            ast::CommandPrefixOrSuffixItem::AssignmentWord(a, w) => {
                self.assignment(a, depth, in_prefix);
                if !in_prefix {
                    // After the program name it is an argument (`export PATH=…` is
                    // checked with the program, see `wrapper`).
                    let arg = self.word(&w.value, depth);
                    words.push(arg);
                }
            }
            ast::CommandPrefixOrSuffixItem::ProcessSubstitution(_, sub) => {
                self.nested_list(&sub.list, depth);
                words.push(Arg::Dynamic("<(…)".to_string()));
            }
        }
    }

    fn emit(&mut self, argv: Vec<Arg>, written: &[Arg], wrappers: &[String], open_ended: bool) {
        self.out.commands.push(SimpleCommand {
            argv,
            written: written.to_vec(),
            wrappers: wrappers.to_vec(),
            open_ended,
        });
    }

    /// Sees through wrappers, emitting the commands found.
    fn resolve(&mut self, written: Vec<Arg>, depth: usize) {
        let mut argv = written.clone();
        let mut wrappers: Vec<String> = Vec::new();
        let mut open_ended = false;
        loop {
            let program = match argv.first() {
                None => return,
                Some(Arg::Literal(p)) if !p.is_empty() => p.clone(),
                Some(other) => {
                    self.unparsed(format!(
                        "the program name `{}` is not a static word",
                        other.as_text()
                    ));
                    return;
                }
            };
            // After a wrapper, `NAME=value` would be run as a program; read it as the
            // assignment it looks like (the stricter reading).
            if !wrappers.is_empty() {
                if let Some((var, _)) = program.split_once('=') {
                    if is_name(var) {
                        if dangerous_var(var) {
                            self.unparsed(format!("assignment to `{var}` changes what runs"));
                            return;
                        }
                        argv.remove(0);
                        continue;
                    }
                }
            }
            let name = basename(&program).to_string();
            let step = match self.wrapper(&name, &argv, depth) {
                Ok(step) => step,
                Err(reason) => {
                    self.unparsed(reason);
                    return;
                }
            };
            match step {
                Step::Itself => {
                    self.emit(argv, &written, &wrappers, open_ended);
                    return;
                }
                Step::Consumed => return,
                Step::Runs {
                    rest,
                    open_ended: o,
                } => {
                    wrappers.push(name);
                    open_ended |= o;
                    argv = rest;
                }
                Step::Visible {
                    rest,
                    open_ended: o,
                } => {
                    self.emit(argv.clone(), &written, &wrappers, open_ended);
                    wrappers.push(name);
                    open_ended |= o;
                    argv = rest;
                }
            }
        }
    }

    /// What the program `name` does with `argv` (argv[0] is the program).
    fn wrapper(&mut self, name: &str, argv: &[Arg], depth: usize) -> Result<Step, String> {
        let args = &argv[1..];
        let runs = |rest: &[Arg]| -> Step {
            if rest.is_empty() {
                Step::Itself
            } else {
                Step::Runs {
                    rest: rest.to_vec(),
                    open_ended: false,
                }
            }
        };
        match name {
            "timeout" => {
                let o = scan(
                    name,
                    args,
                    &OptSpec {
                        short_value: "ks",
                        short_flags: "v",
                        long_value: &["kill-after", "signal"],
                        long_flags: &["preserve-status", "foreground", "verbose"],
                        ..OptSpec::default()
                    },
                )?;
                if o.info {
                    return Ok(Step::Itself);
                }
                // DURATION, then the command.
                match args.get(o.operands) {
                    None => Ok(Step::Itself),
                    Some(_) => Ok(runs(&args[o.operands + 1..])),
                }
            }
            "nice" => {
                let o = scan(
                    name,
                    args,
                    &OptSpec {
                        short_value: "n",
                        long_value: &["adjustment"],
                        numeric_short: true,
                        ..OptSpec::default()
                    },
                )?;
                if o.info {
                    return Ok(Step::Itself);
                }
                Ok(runs(&args[o.operands..]))
            }
            "nohup" | "setsid" | "stdbuf" | "time" | "ionice" | "builtin" | "exec" => {
                let spec = match name {
                    "nohup" | "builtin" => OptSpec::default(),
                    "setsid" => OptSpec {
                        short_flags: "cfw",
                        long_flags: &["ctty", "fork", "wait"],
                        ..OptSpec::default()
                    },
                    "stdbuf" => OptSpec {
                        short_value: "ioe",
                        long_value: &["input", "output", "error"],
                        ..OptSpec::default()
                    },
                    "time" => OptSpec {
                        short_value: "fo",
                        short_flags: "apqv",
                        long_value: &["format", "output"],
                        long_flags: &["append", "verbose", "portability", "quiet"],
                        ..OptSpec::default()
                    },
                    "ionice" => OptSpec {
                        short_value: "cnpPu",
                        short_flags: "t",
                        long_value: &["class", "classdata", "pid", "pgid", "uid"],
                        long_flags: &["ignore"],
                        ..OptSpec::default()
                    },
                    _ => OptSpec {
                        short_value: "a",
                        short_flags: "cl",
                        ..OptSpec::default()
                    },
                };
                let o = scan(name, args, &spec)?;
                if o.info || (name == "ionice" && o.has_any("pPu", &["pid", "pgid", "uid"])) {
                    return Ok(Step::Itself);
                }
                Ok(runs(&args[o.operands..]))
            }
            "command" => {
                let o = scan(
                    name,
                    args,
                    &OptSpec {
                        short_flags: "pvV",
                        ..OptSpec::default()
                    },
                )?;
                if o.has_any("vV", &[]) {
                    return Ok(Step::Itself);
                }
                Ok(runs(&args[o.operands..]))
            }
            "busybox" => match args.first() {
                Some(Arg::Literal(a)) if !a.starts_with('-') => Ok(runs(args)),
                _ => Ok(Step::Itself),
            },
            "env" => self.env(args),
            "xargs" => xargs(args),
            "sudo" | "doas" => {
                let spec = if name == "sudo" {
                    OptSpec {
                        short_value: "ugCDprtTUR",
                        short_flags: "ABbEeHhiKklNnPSsVv",
                        long_value: &[
                            "user",
                            "group",
                            "close-from",
                            "chdir",
                            "host",
                            "prompt",
                            "role",
                            "type",
                            "command-timeout",
                            "other-user",
                            "chroot",
                        ],
                        long_flags: &[
                            "askpass",
                            "bell",
                            "background",
                            "edit",
                            "set-home",
                            "login",
                            "remove-timestamp",
                            "reset-timestamp",
                            "list",
                            "no-update",
                            "non-interactive",
                            "preserve-groups",
                            "stdin",
                            "shell",
                            "validate",
                        ],
                        long_optional: &["preserve-env"],
                        ..OptSpec::default()
                    }
                } else {
                    OptSpec {
                        short_value: "aCu",
                        short_flags: "LnSs",
                        ..OptSpec::default()
                    }
                };
                let o = match scan(name, args, &spec) {
                    Ok(o) => o,
                    Err(reason) => {
                        // The privilege wrapper itself stays visible; what it runs is
                        // unknown.
                        self.emit_visible(argv);
                        return Err(reason);
                    }
                };
                if o.info || o.has_any("eKklLVv", &["edit", "list", "validate"]) {
                    return Ok(Step::Itself);
                }
                let mut rest = &args[o.operands..];
                // sudo VAR=value … cmd
                while let Some(Arg::Literal(a)) = rest.first() {
                    match a.split_once('=') {
                        Some((var, _)) if is_name(var) => {
                            if dangerous_var(var) {
                                self.emit_visible(argv);
                                return Err(format!(
                                    "`{name}` sets `{var}`, which changes what runs"
                                ));
                            }
                            rest = &rest[1..];
                        }
                        _ => break,
                    }
                }
                if rest.is_empty() {
                    return Ok(Step::Itself);
                }
                Ok(Step::Visible {
                    rest: rest.to_vec(),
                    open_ended: false,
                })
            }
            "find" => {
                self.find_exec(argv, depth);
                Ok(Step::Itself)
            }
            "su" => {
                // `su [options] [user] [-c CMD]`: stays visible; its `-c` string is
                // parsed like `sh -c`.
                if let Some(d) = args.iter().find(|a| a.literal().is_none()) {
                    self.emit_visible(argv);
                    return Err(format!("`su` argument `{}` is not static", d.as_text()));
                }
                let mut command: Option<&Arg> = None;
                let mut i = 0;
                while i < args.len() {
                    match args[i].literal() {
                        Some("-c" | "--command") => {
                            command = args.get(i + 1);
                            i += 2;
                        }
                        Some(a) if a.starts_with("--command=") => {
                            command = Some(&args[i]);
                            i += 1;
                        }
                        _ => i += 1,
                    }
                }
                match command {
                    Some(Arg::Literal(c)) => {
                        let c = c.strip_prefix("--command=").unwrap_or(c).to_string();
                        self.program(&c, depth + 1);
                        Ok(Step::Itself)
                    }
                    _ => Ok(Step::Itself),
                }
            }
            "eval" => Err("`eval` runs a string built at run time".to_string()),
            "source" | "." => Err(format!("`{name}` runs a file the gate cannot see")),
            "fc" => Err("`fc` re-runs commands from the history".to_string()),
            "enable" => Err("`enable` can load or replace builtins".to_string()),
            "alias" => {
                if args.iter().any(|a| a.as_text().contains('=')) {
                    Err("`alias` definitions can hide what runs".to_string())
                } else {
                    Ok(Step::Itself)
                }
            }
            "hash" => {
                if args.iter().any(|a| {
                    a.literal()
                        .is_none_or(|s| s.starts_with('-') && s.contains('p'))
                }) {
                    Err("`hash -p` binds a command name to any file".to_string())
                } else {
                    Ok(Step::Itself)
                }
            }
            "trap" => {
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
                            self.program(action, depth + 1);
                        }
                        Ok(Step::Itself)
                    }
                    Some(Arg::Dynamic(a)) => Err(format!("`trap` action `{a}` is not static")),
                }
            }
            n if DECLARATIONS.contains(&n) => {
                for a in args {
                    let text = a.as_text();
                    let var = text.split(['=', '[']).next().unwrap_or("");
                    if text.contains('=') && dangerous_var(var.trim_end_matches('+')) {
                        return Err(format!("`{name}` sets `{var}`, which changes what runs"));
                    }
                }
                Ok(Step::Itself)
            }
            n if SHELLS.contains(&n) => self.shell(name, args, depth),
            _ => Ok(Step::Itself),
        }
    }

    fn emit_visible(&mut self, argv: &[Arg]) {
        self.emit(argv.to_vec(), argv, &[], false);
    }

    fn env(&mut self, args: &[Arg]) -> Result<Step, String> {
        if matches!(args.first(), Some(Arg::Literal(a)) if a == "-") {
            return self.env(&args[1..]);
        }
        let o = scan(
            "env",
            args,
            &OptSpec {
                short_value: "uCS",
                short_flags: "i0v",
                long_value: &["unset", "chdir", "split-string"],
                long_flags: &[
                    "ignore-environment",
                    "null",
                    "debug",
                    "list-signal-handling",
                ],
                long_optional: &["block-signal", "default-signal", "ignore-signal"],
                ..OptSpec::default()
            },
        )?;
        if o.has_any("S", &["split-string"]) {
            return Err("`env -S` splits a string into a command".to_string());
        }
        if o.info {
            return Ok(Step::Itself);
        }
        let mut rest = &args[o.operands..];
        loop {
            match rest.first() {
                Some(Arg::Literal(a)) => match a.split_once('=') {
                    Some((var, _)) => {
                        if dangerous_var(var) {
                            return Err(format!("`env` sets `{var}`, which changes what runs"));
                        }
                        rest = &rest[1..];
                    }
                    None => break,
                },
                Some(Arg::Dynamic(a)) => {
                    return Err(format!("`env` operand `{a}` is not static"));
                }
                None => break,
            }
        }
        if rest.is_empty() {
            // Bare `env` (with or without assignments) prints the environment: it is
            // itself the command.
            return Ok(Step::Itself);
        }
        Ok(Step::Runs {
            rest: rest.to_vec(),
            open_ended: false,
        })
    }

    fn shell(&mut self, name: &str, args: &[Arg], depth: usize) -> Result<Step, String> {
        let mut i = 0;
        let mut dash_c = false;
        let mut dash_s = false;
        while i < args.len() {
            let a = match &args[i] {
                Arg::Literal(a) => a.as_str(),
                Arg::Dynamic(a) => return Err(format!("`{name}` argument `{a}` is not static")),
            };
            if a == "-" || a == "--" {
                i += 1;
                break;
            }
            if a == "--version" || a == "--help" {
                return Ok(Step::Itself);
            }
            if let Some(long) = a.strip_prefix("--") {
                if long == "rcfile" || long == "init-file" {
                    i += 2;
                } else {
                    i += 1;
                }
                continue;
            }
            let cluster = match a.strip_prefix('-').or_else(|| a.strip_prefix('+')) {
                Some(c) if !c.is_empty() => c,
                _ => break,
            };
            i += 1;
            for ch in cluster.chars() {
                match ch {
                    'c' => dash_c = true,
                    's' => dash_s = true,
                    'o' | 'O' => i += 1,
                    _ => {}
                }
            }
        }
        let operands = args.get(i..).unwrap_or(&[]);
        if dash_c {
            return match operands.first() {
                Some(Arg::Literal(script)) => {
                    self.program(script, depth + 1);
                    Ok(Step::Consumed)
                }
                Some(Arg::Dynamic(s)) => Err(format!("`{name} -c` string `{s}` is not static")),
                None => Err(format!("`{name} -c` without a command string")),
            };
        }
        if dash_s || operands.is_empty() {
            return Err(format!("`{name}` reads its commands from standard input"));
        }
        match &operands[0] {
            Arg::Literal(_) => Ok(Step::Itself),
            Arg::Dynamic(s) => Err(format!("`{name}` runs a script `{s}` named at run time")),
        }
    }

    /// `find … -exec cmd … ;` (and `-execdir`, `-ok`, `-okdir`, `+` terminator): the
    /// commands it runs.
    fn find_exec(&mut self, argv: &[Arg], depth: usize) {
        let mut i = 1;
        while i < argv.len() {
            let is_exec = matches!(
                argv[i].literal(),
                Some("-exec" | "-execdir" | "-ok" | "-okdir")
            );
            if !is_exec {
                i += 1;
                continue;
            }
            let start = i + 1;
            let mut end = start;
            let mut plus = false;
            while end < argv.len() {
                match argv[end].literal() {
                    Some(";") => break,
                    Some("+") if end > start && argv[end - 1].literal() == Some("{}") => {
                        plus = true;
                        break;
                    }
                    _ => end += 1,
                }
            }
            let inner: Vec<Arg> = argv[start..end]
                .iter()
                .map(|a| match a {
                    Arg::Literal(s) if s.contains("{}") => Arg::Dynamic(s.clone()),
                    other => other.clone(),
                })
                .collect();
            if !inner.is_empty() {
                let before = self.out.commands.len();
                self.resolve(inner, depth);
                if plus {
                    for c in &mut self.out.commands[before..] {
                        c.open_ended = true;
                    }
                }
                for c in &mut self.out.commands[before..] {
                    c.wrappers.insert(0, "find".to_string());
                }
            }
            i = end + 1;
        }
    }
}

fn xargs(args: &[Arg]) -> Result<Step, String> {
    let o = scan(
        "xargs",
        args,
        &OptSpec {
            short_value: "adEILnPs",
            short_optional: "eil",
            short_flags: "0oprtx",
            long_value: &[
                "arg-file",
                "delimiter",
                "max-args",
                "max-procs",
                "max-chars",
                "process-slot-var",
            ],
            long_optional: &["eof", "replace", "max-lines"],
            long_flags: &[
                "null",
                "no-run-if-empty",
                "verbose",
                "interactive",
                "exit",
                "open-tty",
                "show-limits",
            ],
            ..OptSpec::default()
        },
    )?;
    if o.info {
        return Ok(Step::Itself);
    }
    let mut replace: Option<String> = None;
    for (opt, value) in &o.seen {
        match (opt.as_str(), value) {
            ("I", Some(v)) => replace = Some(v.as_text().to_string()),
            ("i" | "replace", v) => {
                replace = Some(
                    v.as_ref()
                        .map_or("{}".to_string(), |v| v.as_text().to_string()),
                )
            }
            _ => {}
        }
    }
    let rest = &args[o.operands..];
    let mut rest: Vec<Arg> = if rest.is_empty() {
        vec![Arg::Literal("echo".to_string())]
    } else {
        rest.to_vec()
    };
    match replace {
        Some(r) => {
            for a in rest.iter_mut().skip(1) {
                if let Arg::Literal(s) = a {
                    if !r.is_empty() && s.contains(&r) {
                        *a = Arg::Dynamic(s.clone());
                    }
                }
            }
            if let Some(Arg::Literal(p)) = rest.first() {
                if !r.is_empty() && p.contains(&r) {
                    return Err(format!("`xargs` builds the program name `{p}` at run time"));
                }
            }
            Ok(Step::Runs {
                rest,
                open_ended: false,
            })
        }
        None => Ok(Step::Runs {
            rest,
            open_ended: true,
        }),
    }
}

/// Which options a wrapper takes (GNU-style: clustered short options, `--long=value`
/// or `--long value`, `--` ends options, the first operand ends options).
#[derive(Default)]
struct OptSpec {
    short_value: &'static str,
    short_optional: &'static str,
    short_flags: &'static str,
    long_value: &'static [&'static str],
    long_optional: &'static [&'static str],
    long_flags: &'static [&'static str],
    /// `-5`, `-10` (nice's old adjustment form).
    numeric_short: bool,
}

struct Scanned {
    /// Index in `args` of the first operand.
    operands: usize,
    /// The options seen (short as a one-letter string, long without `--`), with
    /// their values.
    seen: Vec<(String, Option<Arg>)>,
    /// `--help` or `--version` seen: the program runs nothing else.
    info: bool,
}

impl Scanned {
    fn has_any(&self, short: &str, long: &[&str]) -> bool {
        self.seen.iter().any(|(o, _)| {
            (o.chars().count() == 1 && short.contains(o.as_str())) || long.contains(&o.as_str())
        })
    }
}

fn scan(program: &str, args: &[Arg], spec: &OptSpec) -> Result<Scanned, String> {
    let mut out = Scanned {
        operands: args.len(),
        seen: Vec::new(),
        info: false,
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

/// Whether brush's arithmetic parser accepts the expression (a panic counts as no).
fn is_arithmetic(expr: &str) -> bool {
    std::panic::catch_unwind(|| brush_parser::arithmetic::parse(expr).is_ok()).unwrap_or(false)
}

/// A shell variable name.
fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// Unquoted `{…,…}` or `{a..b}` anywhere in the word.
fn has_brace_expansion(pieces: &[word::WordPieceWithSource], raw: &str) -> bool {
    let unquoted_brace = pieces
        .iter()
        .any(|p| matches!(&p.piece, WordPiece::Text(t) if t.contains('{')));
    unquoted_brace && raw.contains('}') && (raw.contains(',') || raw.contains(".."))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(line: &str) -> Vec<String> {
        analyze(line)
            .commands
            .iter()
            .map(SimpleCommand::text)
            .collect()
    }

    #[test]
    fn quote_removal_gives_static_words() {
        assert_eq!(
            texts(r#"g\it "pu"sh 'origin' $'main'"#),
            ["git push origin main"]
        );
        assert_eq!(texts("ls \\\n  -la"), ["ls -la"]);
        let a = analyze("git pu{s,}h pus? $X");
        assert!(matches!(a.commands[0].argv[1], Arg::Dynamic(_)));
        assert!(matches!(a.commands[0].argv[2], Arg::Dynamic(_)));
        assert!(matches!(a.commands[0].argv[3], Arg::Dynamic(_)));
    }

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

    #[test]
    fn su_sudo_and_shells() {
        assert_eq!(
            texts("su -c 'git push' root"),
            ["git push", "su -c git push root"]
        );
        assert!(!analyze("su -c \"$X\"").unparsed.is_empty());
        assert_eq!(
            texts("sudo -E FOO=1 git push"),
            ["sudo -E FOO=1 git push", "git push"]
        );
        assert!(!analyze("sudo PATH=/x git push").unparsed.is_empty());
        assert_eq!(texts("bash -o pipefail -ec -- 'a | b'"), ["a", "b"]);
        assert_eq!(texts("bash ./build.sh --fast"), ["bash ./build.sh --fast"]);
        assert!(!analyze("bash").unparsed.is_empty());
        assert_eq!(texts("bash --version"), ["bash --version"]);
    }

    #[test]
    fn arithmetic_is_checked() {
        assert!(analyze("(( i++ ))").unparsed.is_empty());
        assert!(analyze("echo $(( 1 + x ))").unparsed.is_empty());
        assert_eq!(texts("( ( rm x ) )"), ["rm x"]);
        assert_eq!(texts("((rm x) )"), ["rm x"]);
        assert!(!analyze("echo $(( $(rm x) ))").unparsed.is_empty());
        assert!(!analyze("for (( i = $(rm x); i < 2; i++ )); do :; done")
            .unparsed
            .is_empty());
    }

    #[test]
    fn wrapped_assignments() {
        assert_eq!(texts("timeout 5 A=1 git push"), ["git push"]);
        assert!(!analyze("nohup LD_PRELOAD=x ls").unparsed.is_empty());
        assert!(!analyze("env BASH_ENV=x bash -c ls").unparsed.is_empty());
        assert!(!analyze("declare -x PATH=/tmp").unparsed.is_empty());
    }

    #[test]
    fn basename_and_join() {
        assert_eq!(basename("/usr/bin/git"), "git");
        assert_eq!(basename("git"), "git");
        assert_eq!(basename("./bin/"), "bin");
        assert_eq!(
            join(&[Arg::Literal("a b".into()), Arg::Dynamic("$x".into())]),
            "a b $x"
        );
    }
}

//! Interpreters (Python, Perl, Ruby, Node, PHP, Lua, R, Julia, Tcl's `expect`…) and
//! database clients: code given on the command line, read from standard input or a
//! terminal is unparsed; a script file is a program run like any other.

use super::runners::is_python;
use super::step::Step;
use super::Arg;

/// How an interpreter takes code on its command line.
#[derive(Default)]
pub(super) struct Interpreter {
    /// Short options whose value is code (`python -c`, `perl -e`).
    inline_short: &'static str,
    /// Long options whose value is code (`node --eval`).
    inline_long: &'static [&'static str],
    /// Short options taking a value (attached, or the next word).
    value_short: &'static str,
    /// Long options taking a value (`--x=v`, or `--x v`).
    value_long: &'static [&'static str],
    /// Short options naming the code to run from a file or module (`python -m`,
    /// `php -f`): a script is given.
    script_short: &'static str,
    /// Short options that make it read code interactively (`python -i`).
    interactive_short: &'static str,
    /// Short option letters it knows (precise readers only: others are errors).
    flags_short: &'static str,
    /// Long options without a value it knows, and prefixes of such (precise readers
    /// only: an unknown long option might take the next word as its value).
    flags_long: &'static [&'static str],
    /// Inline-code letters are looked for anywhere in every option word (`perl -pie`,
    /// `ruby -rjson -e`), not only before the script, and the reader is not precise.
    anywhere: bool,
    /// With no script it reads code from standard input (or starts a REPL).
    stdin: bool,
    /// Words that print information and run nothing.
    info: &'static [&'static str],
}

/// The interpreter spec for a program name, if it is one.
pub(super) fn interpreter(name: &str) -> Option<Interpreter> {
    let lua = name == "luajit"
        || name
            .strip_prefix("lua")
            .is_some_and(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.'));
    let spec = if is_python(name) || name == "pypy" || name == "pypy3" {
        Interpreter {
            inline_short: "c",
            value_short: "WX",
            value_long: &["check-hash-based-pycs"],
            script_short: "m",
            interactive_short: "i",
            flags_short: "bBdEhIOPqsSuvVx",
            flags_long: &["version", "help", "help-env", "help-xoptions", "help-all"],
            stdin: true,
            info: &["-V", "-VV", "--version", "-h", "--help"],
            ..Interpreter::default()
        }
    } else if name == "node" || name == "nodejs" {
        Interpreter {
            inline_short: "ep",
            inline_long: &["eval", "print"],
            value_short: "rC",
            value_long: &[
                "require",
                "import",
                "loader",
                "experimental-loader",
                "input-type",
                "conditions",
                "title",
                "env-file",
                "inspect-port",
                "redirect-warnings",
                "disable-warning",
                "test-reporter",
                "test-reporter-destination",
                "test-name-pattern",
                "test-skip-pattern",
                "watch-path",
                "icu-data-dir",
                "openssl-config",
                "diagnostic-dir",
                "report-dir",
                "report-directory",
                "report-filename",
                "cpu-prof-dir",
                "heap-prof-dir",
                "secure-heap",
                "run",
            ],
            interactive_short: "i",
            flags_short: "chv",
            flags_long: &[
                "inspect",
                "inspect-brk",
                "inspect-wait",
                "test",
                "watch",
                "check",
                "version",
                "help",
                "enable-source-maps",
                "expose-gc",
                "abort-on-uncaught-exception",
                "preserve-symlinks",
                "preserve-symlinks-main",
                "pending-deprecation",
                "throw-deprecation",
                "frozen-intrinsics",
                "jitless",
                "test-only",
                "experimental-",
                "no-",
                "trace-",
                "harmony",
            ],
            stdin: true,
            info: &["-v", "--version", "-h", "--help", "--test", "--run"],
            ..Interpreter::default()
        }
    } else if name == "perl" || name.starts_with("perl5") {
        Interpreter {
            inline_short: "eE",
            value_short: "I",
            anywhere: true,
            stdin: true,
            info: &["-v", "-V", "--version", "-h", "--help"],
            ..Interpreter::default()
        }
    } else if name == "ruby" {
        Interpreter {
            inline_short: "e",
            value_short: "ICEr",
            anywhere: true,
            stdin: true,
            info: &["-v", "--version", "-h", "--help"],
            ..Interpreter::default()
        }
    } else if name == "php"
        || name.starts_with("php") && name[3..].chars().all(|c| c.is_ascii_digit() || c == '.')
    {
        Interpreter {
            inline_short: "rBRE",
            value_short: "cdtzfFS",
            script_short: "fFS",
            interactive_short: "a",
            anywhere: true,
            stdin: true,
            info: &["-v", "-h", "-i", "-m", "--version", "--help", "--info"],
            ..Interpreter::default()
        }
    } else if lua {
        Interpreter {
            inline_short: "e",
            value_short: "l",
            interactive_short: "i",
            anywhere: true,
            stdin: true,
            info: &["-v"],
            ..Interpreter::default()
        }
    } else if name == "Rscript" || name == "R" {
        Interpreter {
            inline_short: "e",
            value_short: "f",
            script_short: "f",
            anywhere: true,
            stdin: name == "R",
            info: &["--version", "--help", "-h"],
            ..Interpreter::default()
        }
    } else if name == "julia" {
        Interpreter {
            inline_short: "eE",
            inline_long: &["eval", "print"],
            value_short: "CJLOpt",
            interactive_short: "i",
            anywhere: true,
            stdin: true,
            info: &["-v", "--version", "-h", "--help"],
            ..Interpreter::default()
        }
    } else if matches!(name, "osascript" | "jrunscript" | "racket") {
        Interpreter {
            inline_short: "e",
            value_short: "ls",
            interactive_short: "i",
            anywhere: true,
            stdin: true,
            ..Interpreter::default()
        }
    } else if matches!(name, "expect" | "guile") {
        Interpreter {
            inline_short: "c",
            value_short: "fsdlLeD",
            script_short: if name == "expect" { "f" } else { "s" },
            interactive_short: "i",
            anywhere: true,
            stdin: true,
            info: &["-v", "--version", "--help"],
            ..Interpreter::default()
        }
    } else if matches!(
        name,
        "tclsh" | "wish" | "sbcl" | "clisp" | "scheme" | "ocaml"
    ) {
        Interpreter {
            inline_short: "x",
            inline_long: &["eval", "non-interactive"],
            value_long: &["load", "core", "dynamic-space-size", "control-stack-size"],
            anywhere: true,
            stdin: true,
            info: &["--version", "--help"],
            ..Interpreter::default()
        }
    } else if matches!(name, "deno" | "bun") {
        Interpreter {
            inline_short: "ep",
            inline_long: &["eval", "print"],
            anywhere: true,
            stdin: false,
            ..Interpreter::default()
        }
    } else {
        return None;
    };
    Some(spec)
}

/// An interpreter's command line: code given inline (`-c`, `-e`), read from standard
/// input (no script, `-`), or interactively is unparsed; a script or module runs as
/// any program does.
pub(super) fn interpreted(name: &str, args: &[Arg], spec: &Interpreter) -> Result<Step, String> {
    let inline = |opt: &str| Err(format!("`{name} {opt}` runs code from the command line"));
    let stdin = || Err(format!("`{name}` reads its program from standard input"));
    let mut script = false;
    let mut info = false;
    let mut i = 0;
    while i < args.len() {
        let a = match &args[i] {
            Arg::Literal(a) => a.as_str(),
            Arg::Dynamic(_) if script => {
                i += 1;
                continue;
            }
            Arg::Dynamic(d) => {
                return Err(format!(
                    "`{name}` argument `{d}` is not static (it could be inline code)"
                ))
            }
        };
        if spec.info.contains(&a) {
            info = true;
        }
        if a == "--" {
            script |= args.len() > i + 1;
            break;
        }
        if a == "-" {
            return stdin();
        }
        if let Some(long) = a.strip_prefix("--") {
            let (n, value) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (long, None),
            };
            if spec.inline_long.contains(&n) {
                return inline(a);
            }
            if n == "interactive" {
                return stdin();
            }
            if spec.value_long.contains(&n) {
                let v = match value {
                    Some(v) => Some(v),
                    None => {
                        i += 1;
                        args.get(i).and_then(Arg::literal)
                    }
                };
                if v.is_some_and(|v| v.starts_with("data:")) {
                    return inline(a);
                }
            } else if !spec.anywhere
                && value.is_none()
                && !spec
                    .flags_long
                    .iter()
                    .any(|f| n == *f || (f.ends_with('-') || *f == "harmony") && n.starts_with(f))
            {
                return Err(format!(
                    "cannot tell whether `{name} {a}` takes a value (it could hide inline code)"
                ));
            }
            i += 1;
            continue;
        }
        if let Some(cluster) = a.strip_prefix('-') {
            if spec.anywhere {
                if cluster.chars().any(|c| spec.inline_short.contains(c)) && !info {
                    return inline(a);
                }
                if cluster.len() == 1 && spec.interactive_short.contains(cluster) {
                    return stdin();
                }
                let first = cluster.chars().next().unwrap_or(' ');
                if spec.script_short.contains(first) {
                    script = true;
                }
                if cluster.len() == 1 && spec.value_short.contains(first) {
                    i += 1;
                }
                i += 1;
                continue;
            }
            for (pos, ch) in cluster.char_indices() {
                let tail = &cluster[pos + ch.len_utf8()..];
                if spec.inline_short.contains(ch) {
                    return inline(a);
                }
                if spec.interactive_short.contains(ch) {
                    return stdin();
                }
                if spec.script_short.contains(ch) {
                    return Ok(Step::Itself);
                }
                if spec.value_short.contains(ch) {
                    let v = if tail.is_empty() {
                        i += 1;
                        args.get(i).and_then(Arg::literal)
                    } else {
                        Some(tail)
                    };
                    if v.is_some_and(|v| v.starts_with("data:")) {
                        return inline(a);
                    }
                    break;
                }
                if !spec.flags_short.contains(ch) {
                    return Err(format!(
                        "cannot tell what `{name} -{ch}` does (it could hide inline code)"
                    ));
                }
            }
            i += 1;
            continue;
        }
        if !script && reads_stdin_path(a) {
            return stdin();
        }
        script = true;
        if !spec.anywhere {
            break;
        }
        i += 1;
    }
    if script || info || !spec.stdin {
        Ok(Step::Itself)
    } else {
        stdin()
    }
}

/// A script path that is standard input or another open file (`/dev/stdin`,
/// `/dev/fd/0`, `/proc/self/fd/0`): code the gate cannot see.
fn reads_stdin_path(path: &str) -> bool {
    path == "/dev/stdin" || path.starts_with("/dev/fd/") || path.starts_with("/proc/")
}

/// Database clients run shell escapes (`\!`, `.shell`, `system`) from their command
/// line or standard input: commands given on the line must have none, and without one
/// they read commands from standard input.
pub(super) fn sql_client(name: &str, args: &[Arg]) -> Result<Step, String> {
    for a in args {
        match a {
            Arg::Literal(t) => {
                let escape = match name {
                    "sqlite3" => [
                        ".shell", ".system", ".once", ".output", ".import", ".load", ".read",
                        ".excel", ".open",
                    ]
                    .iter()
                    .any(|d| t.contains(d)),
                    "psql" => t.contains('\\'),
                    _ => t.contains('\\') || t.to_ascii_lowercase().contains("system"),
                };
                if escape {
                    return Err(format!("`{name}` argument `{t}` can run commands"));
                }
            }
            Arg::Dynamic(d) => {
                return Err(format!(
                    "`{name}` argument `{d}` is known only at run time (it could run commands)"
                ))
            }
        }
    }
    let words: Vec<&str> = args.iter().filter_map(Arg::literal).collect();
    let has = |opts: &[&str]| {
        words.iter().any(|w| {
            opts.iter()
                .any(|o| w == o || w.starts_with(&format!("{o}=")))
        })
    };
    let given = match name {
        "sqlite3" => {
            const VALUED: &[&str] = &[
                "-cmd",
                "-init",
                "-separator",
                "-newline",
                "-nullvalue",
                "-vfs",
                "-maxsize",
                "-mmap",
                "-pagecache",
                "-lookaside",
                "-heap",
            ];
            let mut operands = 0;
            let mut i = 0;
            while i < words.len() {
                if VALUED.contains(&words[i]) {
                    i += 1;
                } else if !words[i].starts_with('-') {
                    operands += 1;
                }
                i += 1;
            }
            operands >= 2 || has(&["-version", "-help", "--version", "--help"])
        }
        "psql" => has(&[
            "-c",
            "--command",
            "-f",
            "--file",
            "-l",
            "--list",
            "-V",
            "--version",
            "--help",
        ]),
        _ => has(&["-e", "--execute", "-V", "--version", "--help"]),
    };
    if given {
        Ok(Step::Itself)
    } else {
        Err(format!(
            "`{name}` reads commands (with shell escapes) from standard input"
        ))
    }
}

/// `deno eval`/`repl` and `bun eval`/`repl` run code the gate cannot see, and so does
/// `deno` without a subcommand (a REPL); other interpreters have no subcommands.
pub(super) fn subcommand(name: &str, args: &[Arg]) -> Result<(), String> {
    if name == "deno" || name == "bun" {
        let sub = args.iter().find(|a| !a.as_text().starts_with('-'));
        match sub.and_then(Arg::literal) {
            Some("eval" | "repl") => {
                return Err(format!(
                    "`{name} {}` runs code the gate cannot see",
                    sub.map_or("", Arg::as_text)
                ))
            }
            None if name == "deno"
                && !args
                    .iter()
                    .any(|a| matches!(a.literal(), Some("-h" | "--help" | "-V" | "--version"))) =>
            {
                return Err("`deno` without a subcommand starts a REPL".to_string())
            }
            _ => {}
        }
    }
    Ok(())
}

//! Options of ordinary programs that make them run another program: unparsed, since
//! their value is a command the gate does not parse (or a file it cannot see).
//!
//! Long options are matched the way getopt_long reads them: the whole name or any
//! prefix of it (`--to-com=CMD` is `--to-command=CMD`); an ambiguous prefix is refused
//! by the program, so reading every prefix as the option is the safe side. Short
//! options are found inside a cluster (`-xzIcmd`). For these programs a word known only
//! at run time (`sort "$opt"`) could be such an option and is unparsed as well.
//!
//! Programs that read commands the gate cannot see (debuggers, editors, `parallel`,
//! `at`, `crontab`…) are unparsed whatever their arguments ([`ALWAYS_UNPARSED`]).

use super::options::{could_name, splits};
use super::Arg;

/// Programs that read commands the gate cannot see (from standard input or the
/// terminal, with shell escapes) or build them at run time: always unparsed.
pub(super) const ALWAYS_UNPARSED: &[&str] = &[
    "gdb", "lldb", "ed", "red", "ex", "vi", "vim", "nvim", "view", "vimdiff", "emacs", "dc", "ftp",
    "sftp", "lftp", "mail", "mailx", "irb", "jshell", "parallel", "sem", "at", "batch", "newgrp",
    "crontab",
];

/// One program's options that run another program.
struct RunsOptions {
    /// Long option names (without `--`).
    long: &'static [&'static str],
    /// Short option letters.
    short: &'static str,
}

/// The table: program name → its options that run programs.
fn runs_options(name: &str) -> Option<RunsOptions> {
    let (long, short): (&'static [&'static str], &'static str) = match name {
        "sort" => (&["compress-program"], ""),
        "install" | "ginstall" => (&["strip-program"], ""),
        "split" | "gsplit" => (&["filter"], ""),
        "tar" | "gtar" | "bsdtar" => (
            &[
                "to-command",
                "use-compress-program",
                "checkpoint-action",
                "info-script",
                "new-volume-script",
                "rsh-command",
                "rmt-command",
            ],
            "IF",
        ),
        "zip" => (&["unzip-command"], ""),
        "rsync" => (&["rsh", "rsync-path"], "e"),
        "scp" => (&["program"], "SF"),
        "ssh" => (&[], "FS"),
        "rg" => (&["pre", "hostname-bin"], ""),
        "man" => (&["pager", "html"], "PH"),
        "diff3" | "sdiff" => (&["diff-program"], ""),
        "less" | "more" => (&["lesskey-src", "lesskey-file"], "k"),
        _ => return None,
    };
    Some(RunsOptions { long, short })
}

/// Programs that run a command given in their arguments (or build one at run time)
/// and are not modelled otherwise: a run-time word among their arguments could be any
/// command.
const RUN_ARGUMENTS: &[&str] = &[
    "tmux",
    "screen",
    "ssh",
    "docker",
    "podman",
    "xterm",
    "socat",
    "nc",
    "ncat",
    "perf",
    "bwrap",
    "firejail",
    "proot",
    "nix-shell",
    "direnv",
    "npx",
    "uv",
    "uvx",
    "poetry",
    "pipenv",
    "dbus-run-session",
    "xvfb-run",
    "entr",
    "dtach",
    "abduco",
];

/// Why `name` with `args` runs a program the gate cannot see, if it does.
pub(super) fn check(name: &str, args: &[Arg]) -> Result<(), String> {
    if RUN_ARGUMENTS.contains(&name) {
        if let Some(d) = args.iter().find(|a| matches!(a, Arg::Dynamic(_))) {
            return Err(format!(
                "`{name}` runs a command built from `{}`, known only at run time",
                d.as_text()
            ));
        }
    }
    if name == "ssh" || name == "scp" || name == "sftp" {
        ssh_options(name, args)?;
    }
    if matches!(name, "sed" | "gsed" | "make" | "gmake") {
        // GNU getopt takes options anywhere: a run-time word that splits could be
        // `-e SCRIPT`, `-f FILE`, `--eval=…`.
        if let Some(d) = args
            .iter()
            .find(|a| matches!(a, Arg::Dynamic(d) if splits(d)))
        {
            return Err(format!(
                "`{name}` word `{}` is known only at run time and could be an option that \
                 runs commands",
                d.as_text()
            ));
        }
    }
    if name == "find" {
        // Unquoted, a run-time word can split into `-exec CMD ;` or `-fprint FILE`.
        if let Some(d) = args
            .iter()
            .find(|a| matches!(a, Arg::Dynamic(d) if splits(d)))
        {
            return Err(format!(
                "`find` word `{}` is known only at run time and could be `-exec …`",
                d.as_text()
            ));
        }
    }
    if matches!(name, "less" | "more") {
        // `+CMD` runs less commands at start (`+!cmd` a shell command).
        if let Some(a) = args
            .iter()
            .filter_map(Arg::literal)
            .find(|a| a.starts_with('+') && a.contains('!'))
        {
            return Err(format!("`{name} {a}` runs a shell command"));
        }
    }
    let Some(spec) = runs_options(name) else {
        return Ok(());
    };
    for (i, a) in args.iter().enumerate() {
        let text = match a {
            Arg::Literal(t) => t.as_str(),
            Arg::Dynamic(d) => {
                return Err(format!(
                    "`{name}` word `{d}` is known only at run time and could be an option \
                     that runs a program"
                ))
            }
        };
        if text == "--" {
            break;
        }
        if let Some(long) = text.strip_prefix("--") {
            let n = long.split('=').next().unwrap_or(long);
            if let Some(opt) = spec.long.iter().find(|o| could_name(n, o)) {
                return Err(format!("`{name} {text}` (`--{opt}`) runs another program"));
            }
        } else if let Some(cluster) = text.strip_prefix('-') {
            if name == "zip" && cluster.starts_with("TT") {
                return Err(format!("`zip {text}` runs another program"));
            }
            if let Some(c) = cluster.chars().find(|c| spec.short.contains(*c)) {
                return Err(format!("`{name} {text}` (`-{c}`) runs another program"));
            }
        } else if i == 0 && matches!(name, "tar" | "gtar" | "bsdtar") {
            // Old-style `tar xIf PROG a.tar`: the first word is a cluster.
            if let Some(c) = text.chars().find(|c| spec.short.contains(*c)) {
                return Err(format!("`tar {text}` (`{c}`) runs another program"));
            }
        }
    }
    Ok(())
}

/// ssh's `-o` options that run a local command (`ProxyCommand`, `LocalCommand`,
/// `KnownHostsCommand`, `Match exec`…) or load code.
fn ssh_options(name: &str, args: &[Arg]) -> Result<(), String> {
    const RUNS: &[&str] = &[
        "proxycommand",
        "localcommand",
        "permitlocalcommand",
        "knownhostscommand",
        "match",
        "pkcs11provider",
        "securitykeyprovider",
        "include",
        "controlpath",
        "proxyjump",
    ];
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_text();
        let value = if a == "-o" {
            i += 1;
            args.get(i).map(Arg::as_text)
        } else {
            a.strip_prefix("-o")
        };
        if let Some(v) = value {
            let key = v
                .split(|c: char| c == '=' || c.is_whitespace())
                .next()
                .unwrap_or("")
                .to_ascii_lowercase();
            if RUNS.contains(&key.as_str()) || key.starts_with('$') || key.is_empty() {
                return Err(format!("`{name} -o {v}` can run a local command"));
            }
        }
        i += 1;
    }
    Ok(())
}

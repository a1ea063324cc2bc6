//! What a Bash command line would run: every simple command, seen through wrappers.
//!
//! The gate never splits a command on spaces. [`analyze`] first bounds the input (see
//! *Limits*), then parses the line with
//! [brush-parser](https://docs.rs/brush-parser/0.4) (a POSIX/bash parser) and walks the
//! whole tree: lists (`;`, newlines, `&`), `&&`/`||`, pipes, `( … )` subshells,
//! `{ …; }` groups, `if`/`while`/`until`/`for`/`case` bodies, function bodies (a
//! function's body counts as commands whether or not it is called), coprocesses,
//! `$( … )` and backtick substitutions wherever a word can hold one (arguments,
//! assignments, redirection targets, here-document bodies, `[[ … ]]`, `case` and `for`
//! words) and process substitutions `<( … )` / `>( … )`.
//!
//! ## Limits
//!
//! Before anything is parsed, a linear scan (`prescan.rs`) refuses (one [`Unparsed`]
//! entry, the gate asks) a line longer than [`MAX_LINE_BYTES`] (64 KiB), nested deeper
//! than [`MAX_NESTING`] (64) levels, or nested deeper than [`MAX_AMBIGUOUS_NESTING`]
//! (16) levels of bare parentheses and `case` blocks. The scan is a small lexer that
//! knows bash's quoting, comments and here-documents (a `)` inside quotes closes
//! nothing) and counts what is open: parentheses (`(`, `$(`, `$((`, `<(`), braces
//! (`{`, `${`), double quotes, backticks and keyword blocks (`if`/`fi`, `case`/`esac`,
//! `do`/`done`) ([`nesting`]). The parser recurses once per level, so a hostile line
//! (`$(` two thousand times) would overflow a 2 MiB thread stack; and on a syntax
//! error it retries every reading of nested bare parentheses (`((` is arithmetic or two
//! subshells) and case patterns, doubling its time per level (32 unclosed `(` took
//! minutes). Every command string parsed again (`sh -c '…'`…) goes through the same
//! scan, and the walker follows at most [`MAX_DEPTH`] levels of strings and
//! substitutions, checked before any parsing.
//!
//! ## Wrappers and command strings
//!
//! Each simple command is seen through the wrappers that run another command:
//! `timeout`, `nice`, `nohup`, `env [-i] [-u X] VAR=1 …` (bare `env` is itself the
//! command `env`), `command [-p]`, `exec`, `builtin`, `xargs` (its command gets more
//! arguments at run time: [`SimpleCommand::open_ended`]), `time`, `stdbuf`, `ionice`,
//! `setsid`, `busybox APPLET`, `flock`, `taskset`, `chrt`, `setpriv`, `unshare`,
//! `runuser -u`, `prlimit`, `systemd-run`, `nsenter` (not into another mount namespace),
//! `chroot /`, `strace`, `ltrace`, `valgrind`, `eatmydata`, `fakeroot`, `pkexec`,
//! `watch` (without `-x` its words are joined and parsed as `sh -c` would), and leading
//! `VAR=1` assignments. Command strings are parsed again, at most [`MAX_DEPTH`] levels
//! deep: `-c` of the shells whose grammar is bash's ([`SHELLS`]: `sh`, `bash`, `rbash`,
//! `dash`, also as `busybox sh`), `su -c`/`runuser -c`, `script -c`, `flock -c`,
//! `sg GROUP CMD`, `trap` actions, `mapfile -C`, `strace -o '|CMD'`, the value of a
//! command variable (`GIT_EDITOR`, `GIT_SEQUENCE_EDITOR`, `GIT_PAGER`, `EDITOR`,
//! `VISUAL`, `PAGER`, `MANPAGER`, `SYSTEMD_PAGER`), and the commands git runs for its
//! options (`rebase -x/--exec`, `submodule foreach`, `bisect run`,
//! `difftool -x/--extcmd`, `filter-branch --*-filter`, `grep -O`, `--upload-pack`,
//! `--receive-pack`, `--exec`, `clone -u`). `sudo`, `doas`, `su`, `runuser`, `script`
//! and `find … -exec` stay visible as commands of their own (without the command
//! string) *and* the command they run is produced too. Program paths are kept as
//! written in [`SimpleCommand::argv`]; [`SimpleCommand::program`] gives the last path
//! component (`/usr/bin/git` → `git`).
//!
//! Option grammars follow the programs' own parsers. git's parse-options
//! (gitcli(7)) and GNU getopt_long take any unambiguous prefix of a long option, so
//! every prefix that could name an option that runs a command is read as it
//! (`git fetch --upl=CMD` is `--upload-pack`, `git grep --op=CMD` is
//! `--open-files-in-pager`, `sed --e`, `gawk --so`, `tar --to-com`: [`could_name`]);
//! short options are found inside clusters (`git grep -iOCMD`, `tar -cIf CMD`). git's
//! global options that take a value ([`GIT_GLOBAL_WITH_VALUE`], `--shallow-file`
//! included) are skipped with it, so the subcommand is found. For a git subcommand
//! or a program with such options, a word known only at run time before `--` could be
//! one (`git grep "$p"` with `p=-Ocmd`) and is unparsed.
//!
//! ## Unparsed
//!
//! Anything that could hide what runs becomes an [`Unparsed`] entry instead of a
//! command (the gate answers `Ask` for it, never `Allow`, in every mode):
//! - a syntax error; a line over the limits above; a program name that is not a static
//!   word (`$X`, `$(command -v git)`, backticks, globs such as `/usr/bin/gi?` or
//!   `[g]it`, brace expansion, `$'…'` with escapes); a wrapper option this module does
//!   not know (it cannot tell which word is the command);
//! - `eval`, `source`/`.`, `fc`, `enable` (`enable -f` loads code), `bind`,
//!   `alias NAME=…`, `hash -p` and `hash NAME=…`, `declare -n`, `env -S`, `trap` with a
//!   non-static action, `compgen`/`complete` with `-C` (runs a command) or `-F` (runs
//!   a function);
//! - a shell running anything but a parsed `-c` string: standard input (`curl … | sh`,
//!   `bash <<EOF`, `sh -s`, a wrapper with no command, `su` without `-c`), a script
//!   (`bash script.sh`, `sh /dev/stdin`, `bash /proc/self/fd/0`), `--rcfile`; every
//!   shell whose grammar is not bash's (`zsh`, `rzsh`, `ksh`, `ksh93`, `mksh`, `ash`,
//!   `hush`, `yash`, `posh`, `fish`, `csh`, `tcsh`, `elvish`, `nu`, `xonsh`, `pwsh`,
//!   `tclsh`, `wish`, `expect`…), a shell or interpreter name with a version suffix
//!   (`bash5`, `zsh-5.9`; `python3.11`, `perl5.36`, `node20` are checked as the
//!   interpreter they name), and any program run through `/proc` or `/dev`
//!   (`/proc/self/exe -c …`);
//! - interpreters running code from the command line, standard input or a terminal
//!   (`python3 -c`, `python3 -` or with no script, `python3 /dev/stdin`, `perl -e`,
//!   `ruby -e`, `node -e/-p/--eval`, `php -r`, `lua -e`, `deno eval`, `bun -e`,
//!   `osascript -e`…); an awk program with `system`, a lone `|`, `getline` or `@`, or
//!   read from a file or loaded (`-f`, `-E`, `-i`, `-l`, `--file`, `--exec`,
//!   `--include`, `--load` and their prefixes); a GNU sed script with the `e` command
//!   or `s///e` flag, or read from a file (`-f`, `--file` and prefixes);
//!   `make --eval`/`-E`/`SHELL=`; database clients with shell escapes or reading
//!   standard input; programs that read commands we cannot see or build them at run
//!   time (`parallel`, `at`, `crontab`, `vim`, `gdb`, `ed`, `dc`…);
//! - options of other programs that run a program (`sort --compress-program`,
//!   `tar --to-command/--use-compress-program/-I/--checkpoint-action/--info-script/
//!   --new-volume-script/-F`, `zip -TT/--unzip-command`, `rsync -e/--rsh/--rsync-path`,
//!   `ssh -o ProxyCommand=/LocalCommand=/…` and `-F`, `scp -S`, `rg --pre/--hostname-bin`,
//!   `man -P/--pager/-H`, `diff3`/`sdiff --diff-program`, `less +!CMD`); a run-time word
//!   among the arguments of `tmux`, `screen`, `ssh`, `docker`… (see `programs.rs`);
//! - git configuration that can make git run commands: `git -c KEY=…`,
//!   `git --config-env KEY=…`, `git clone -c/--config KEY=…` or `git config KEY VALUE`
//!   for keys outside a small safe list (`user.*`, `color.*`, `alias.*`…),
//!   `--exec-path=`, `git clone/init --template` (hooks from another directory);
//!   `chroot` into another root, `unshare --root`, `nsenter -m`;
//! - assignments (prefix, standalone, after a wrapper, through `env`, `sudo`,
//!   `systemd-run -E`, `strace -E`, `export`/`declare`/`typeset`/`local`/`readonly`,
//!   `read`, `mapfile`, `printf -v`, arithmetic, and the assigning expansions
//!   `${VAR:=…}`/`${VAR=…}`, also on an array element or through `${!name:=…}`) to
//!   variables that change what runs: `PATH`, `BASH_ENV`, `ENV`, `PS0`–`PS4`,
//!   `PROMPT_COMMAND`, `SHELL`, `SHELLOPTS`, `BASHOPTS`, bash's command and alias tables
//!   `BASH_CMDS` and `BASH_ALIASES` (any element: `BASH_CMDS[ls]=/bin/bash` makes `ls`
//!   run bash), `BASH_LOADABLES_PATH`, `BASH_XTRACEFD`, `LD_PRELOAD`, `LD_AUDIT`,
//!   `LD_LIBRARY_PATH`, `GCONV_PATH`, `BASH_FUNC_*`, `HOME`, `XDG_CONFIG_HOME`,
//!   `GIT_DIR`, `GIT_COMMON_DIR`, `GIT_CONFIG*`, `GIT_SSH*`, `GIT_ALIAS*`,
//!   `GIT_EXEC_PATH`, `GIT_ASKPASS`, `GIT_PROXY_COMMAND`, `GIT_EXTERNAL_DIFF`,
//!   `GIT_TEMPLATE_DIR`, `GIT_ALLOW_PROTOCOL`, `PERL5OPT`, `NODE_OPTIONS`, `LESSOPEN`,
//!   `LESS`, `*_ASKPASS`, `BROWSER`, programs' option variables (`TAR_OPTIONS`,
//!   `ZIPOPT`, `MANOPT`, `RSYNC_RSH`, `RIPGREP_CONFIG_PATH`, `AWKPATH`…), interpreter
//!   module paths (`PYTHONPATH`, `PERL5LIB`, `RUBYOPT`, `NODE_PATH`…); `MAKEFLAGS` with
//!   `eval`/`E`;
//! - files the line writes and then runs (`writes.rs`): a program given by a path
//!   outside the system directories in a line that writes files (`cp /usr/bin/git
//!   ./g; ./g push`), a program or an interpreter's operand named like a written file
//!   (`… > s.py; python3 s.py`, `… > Makefile; make`), and any write to git's
//!   configuration or hooks or to a shell's or another program's startup files
//!   (`… >> .git/config`, `cp h .git/hooks/post-checkout`, `sed -n 'w .git/config'`,
//!   `>> ~/.profile`, `~/.ssh/config`, Python's `usercustomize`/`.pth`). Writes are
//!   redirections, the operands of `cp`, `ln`, `install`, `mv`, `rsync`, `tee`, `dd
//!   of=`, `chmod`, `sed -i`, `tar`…, `sort -o`, `find -fprint*`, sed's `w`, and awk's
//!   `print >` (a name the gate does not work out: any file);
//! - a run-time word that could split into options or a command (unquoted `$X` with
//!   `IFS=,` and `X=5,git,push`): the value of a wrapper's option (`nice -n $N`), any
//!   word of `find`, `sed` or `make`, of a git subcommand or other program with options
//!   that run commands; what `xargs` reads is such a word of the command it runs
//!   (`echo --upload-pack=… | xargs git fetch`); a double-quoted `"$X"` stays one word;
//! - command substitutions inside arithmetic or `${…}` expansions; `${x@P}`;
//! - **any word whose text holds `$(` or a backtick** even quoted (`'a[$(rm x)]'`,
//!   `$'\x24(…)'`, an unquoted here-document's escaped `\$(`): bash runs it wherever the
//!   value reaches arithmetic (`test -v`, `let`, `[[ … -eq … ]]`, `declare -i`,
//!   `$((x))`, array subscripts). Exempt: words consumed as code this module parsed or
//!   checked (`sh -c '… $(…)'`, awk programs, sed scripts, grep patterns). False
//!   positives, by design: `git commit -m 'fix `x`'`, `echo '$(…)'`, `printf '`'`.
//!
//! Arguments that are not static (`$HOME`, `"$x"`, `$(date)`, `*.rs`, `{a,b}`) are kept
//! as [`Arg::Dynamic`]: matching treats them as "could be any words", and outside
//! `bypassPermissions` no allow rule covers a command that has one (see
//! [`crate::policy`]). One substitution is static: `"$(cat <<'EOF' … EOF)"` (a quoted
//! here-document, the usual commit message) is the here-document's text; a `$(` or
//! backtick in that text is fine only when the word goes straight to one program that
//! is not a shell builtin or a shell (`git commit -m …`), where it cannot reach
//! arithmetic.
//!
//! Known limits (documented, not handled): values built at run time and then used in
//! arithmetic (`x=$(printf 'a[\x24(rm x)]'); echo $((x))`, `read` from a file, a
//! quoted here-document's body); what files contain when they were written by an
//! earlier call or another tool (scripts run as programs, `./x` copied from git by a
//! previous command, `python3 x.py`, Makefiles, `.git/config` and hooks, startup
//! files, another repository's configuration reached with `git -C`/`--git-dir`,
//! programs found on `PATH`); writes this module does not recognise as writes (a
//! program it does not know writing a file it then runs from a system directory);
//! command strings run by `$SHELL` (`script -c`, `flock -c`) are parsed as bash even if
//! the environment's `SHELL` is another shell; code an interpreter module evaluates
//! from its arguments (`python3 -m timeit …`) unless it names an always-ask program
//! literally (the policy's catch-all). The sandbox is the structural boundary; this
//! module makes the gate's questions precise.
//!
//! Pure: no IO, no clock.

mod git;
mod interpreters;
mod prescan;
mod programs;
mod scripts;
mod wrappers;
mod writes;

pub use git::{could_name, GIT_GLOBAL_WITH_VALUE};
pub use prescan::{nesting, MAX_AMBIGUOUS_NESTING, MAX_LINE_BYTES, MAX_NESTING};

use interpreters::{interpreted, interpreter, sql_client};

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
        let marked = matches!(self.argv.last(), Some(Arg::Dynamic(d)) if d == XARGS_INPUT);
        if self.open_ended && !marked {
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
        static_bodies: Vec::new(),
        body_marked: Vec::new(),
        code: Vec::new(),
        writes: writes::Writes::default(),
    };
    walker.program(line, 0);
    writes::check(&mut walker.out, &walker.writes);
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

/// Variables whose assignment changes which program runs, or makes a program run code
/// the gate cannot see (git's configuration and helpers, loaders, askpass programs).
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
const DANGEROUS_PREFIXES: &[&str] = &["BASH_FUNC_", "GIT_CONFIG", "GIT_SSH", "GIT_ALIAS"];

/// Variables holding a command line that programs hand to `sh -c` (git's editor and
/// pager): an assignment's value is parsed as the commands it runs.
const COMMAND_VARS: &[&str] = &[
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
const MAKE_VARS: &[&str] = &["MAKEFLAGS", "GNUMAKEFLAGS", "MFLAGS"];

fn dangerous_var(name: &str) -> bool {
    DANGEROUS_VARS.contains(&name) || DANGEROUS_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Shells whose `-c STRING` is parsed again, as bash (bash's own grammar is the one
/// the parser knows; `sh` and `dash` are a subset of it for what matters here).
pub const SHELLS: &[&str] = &["sh", "bash", "rbash", "dash"];

/// Shells whose grammar is not bash's, or differs from it where it matters (`zsh`
/// expands `=cmd`, has its own globbing qualifiers that run code, `ksh` and `mksh`
/// differ in quoting), and command languages of their own: whatever they run is
/// unparsed.
const OTHER_SHELLS: &[&str] = &[
    "zsh",
    "rzsh",
    "ksh",
    "ksh88",
    "ksh93",
    "rksh",
    "pdksh",
    "oksh",
    "lksh",
    "loksh",
    "mksh",
    "ash",
    "hush",
    "msh",
    "yash",
    "posh",
    "bosh",
    "jsh",
    "fish",
    "csh",
    "tcsh",
    "nu",
    "xonsh",
    "elvish",
    "pwsh",
    "powershell",
    "osh",
    "ysh",
    "oil",
    "es",
    "rc",
    "tclsh",
    "wish",
    "jimsh",
    "scsh",
    "sash",
];

/// Program names that are a shell or an interpreter with a version suffix (`bash5`,
/// `zsh-5.9`, `python3.11`, `perl5.36`, `ruby3.1`, `node20`): the name without it.
fn versioned_stem(name: &str) -> Option<&str> {
    let stem = name.trim_end_matches(|c: char| c.is_ascii_digit() || ".-_".contains(c));
    (stem.len() < name.len() && !stem.is_empty()).then_some(stem)
}

/// Programs that read commands the gate cannot see (from standard input or the
/// terminal, with shell escapes) or build them at run time: always unparsed.
const ALWAYS_UNPARSED: &[&str] = &[
    "gdb", "lldb", "ed", "red", "ex", "vi", "vim", "nvim", "view", "vimdiff", "emacs", "dc", "ftp",
    "sftp", "lftp", "mail", "mailx", "irb", "jshell", "parallel", "sem", "at", "batch", "newgrp",
    "crontab",
];

/// Whether a run-time word could split into several words at run time (it is not one
/// double-quoted string).
fn splits(d: &str) -> bool {
    !(d.len() >= 2 && d.starts_with('"') && d.ends_with('"'))
}

/// Whether `name` is a shell, interpreter, debugger or editor that runs code handed to
/// it: named in another program's arguments (`docker exec c sh`, `ssh host python3`), it
/// could run anything. Common English words (`dash`, `fish`, `expect`…) are left out.
pub fn is_code_runner(name: &str) -> bool {
    const RUNNERS: &[&str] = &[
        "sh",
        "bash",
        "rbash",
        "zsh",
        "ksh",
        "ksh93",
        "mksh",
        "yash",
        "busybox",
        "csh",
        "tcsh",
        "pwsh",
        "powershell",
        "xonsh",
        "elvish",
        "pypy",
        "pypy3",
        "perl",
        "ruby",
        "node",
        "nodejs",
        "deno",
        "php",
        "lua",
        "luajit",
        "Rscript",
        "julia",
        "osascript",
        "tclsh",
        "rzsh",
        "hush",
        "nushell",
        "jimsh",
        "gdb",
        "lldb",
        "vim",
        "nvim",
        "emacs",
        "parallel",
    ];
    RUNNERS.contains(&name)
        || is_python(name)
        || versioned_stem(name).is_some_and(|stem| RUNNERS.contains(&stem))
}

/// `python`, `python3`, `python3.12`…
fn is_python(name: &str) -> bool {
    name.strip_prefix("python")
        .is_some_and(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

/// bash's builtins: they can evaluate their arguments as arithmetic (`test -v`,
/// `let`, `declare -i`, `shift`, `return`…) or run them.
const BASH_BUILTINS: &[&str] = &[
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
const DECLARATIONS: &[&str] = &["export", "declare", "typeset", "local", "readonly"];

struct Walker {
    out: Analysis,
    opts: ParserOptions,
    /// The source texts being walked, innermost last (locations index into them).
    sources: Vec<String>,
    /// Argument words consumed as code the gate parsed or checked (`sh -c STRING`, an
    /// awk program, a grep pattern): a `$(` or backtick in them is not a hidden
    /// substitution (see [`Walker::word_marked`]).
    code: Vec<String>,
    /// Bodies of `$(cat <<'EOF' … EOF)` substitutions taken into a word's static value:
    /// text the gate knows, never run, so not checked for `$(` (see
    /// [`static_heredoc_cat`]).
    static_bodies: Vec<String>,
    /// Word values marked only because of such a body (`git commit -m "$(cat <<'EOF'`
    /// … `` `x` `` … `EOF)"`): fine as an argument of a program that is not a shell
    /// builtin (it cannot evaluate arithmetic), see [`Walker::simple`].
    body_marked: Vec<String>,
    /// What the line writes (see [`writes`]).
    writes: writes::Writes,
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
        // Too long or too deep for the parser's recursion: refused before parsing.
        if let Some(reason) = prescan::refuse(src) {
            self.unparsed(reason);
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
            if matches!(item.1, ast::SeparatorOperator::Async) {
                self.writes.unordered = true;
            }
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
                self.writes.unordered = true;
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
        let assigns_dangerous = expr
            .split(|c: char| !(c == '_' || c.is_ascii_alphanumeric()))
            .find(|w| dangerous_var(w) || COMMAND_VARS.contains(w));
        if expr.contains("$(") || expr.contains('`') || expr.contains("<(") {
            self.unparsed(format!("command substitution inside arithmetic `{expr}`"));
        } else if let Some(name) = assigns_dangerous {
            self.unparsed(format!(
                "arithmetic `{expr}` names `{name}`, which changes what runs"
            ));
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
                self.writes.unordered = true;
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
                self.writes.unordered = true;
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
                self.writes.unordered = true;
                self.list(&w.0, depth);
                self.list(&w.1.list, depth);
            }
            C::Coprocess(c) => {
                self.writes.unordered = true;
                self.command(&c.body, depth)
            }
        }
    }

    fn redirect(&mut self, redirect: &ast::IoRedirect, depth: usize) {
        match redirect {
            ast::IoRedirect::File(_, kind, target) => match target {
                ast::IoFileRedirectTarget::Filename(w)
                | ast::IoFileRedirectTarget::Duplicate(w) => {
                    let arg = self.word(&w.value, depth);
                    if !matches!(
                        kind,
                        ast::IoFileRedirectKind::Read | ast::IoFileRedirectKind::DuplicateInput
                    ) {
                        self.writes.at = self.out.commands.len();
                        self.writes.redirect(&arg);
                    }
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
                            if has_substitution_text(&value) {
                                self.unparsed(marked_reason(value.trim()));
                            }
                        }
                        Ok(Err(e)) => self.unparsed(format!("here-document: {e}")),
                        Err(_) => self.unparsed("the word parser failed on a here-document"),
                    }
                }
            }
            ast::IoRedirect::HereString(_, w) => {
                self.word(&w.value, depth);
            }
            ast::IoRedirect::OutputAndError(w, _) => {
                let arg = self.word(&w.value, depth);
                self.writes.at = self.out.commands.len();
                self.writes.redirect(&arg);
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
    /// it. A `$(` or backtick in its quoted or escaped text is unparsed (see
    /// [`Walker::word_marked`]).
    fn word(&mut self, raw: &str, depth: usize) -> Arg {
        let (arg, marked) = self.word_marked(raw, depth);
        if let Some(text) = marked {
            self.unparsed(marked_reason(&text));
        }
        arg
    }

    /// [`Walker::word`], but a word whose literal text (quoted, escaped, or decoded from
    /// `$'…'`) holds `$(` or a backtick is returned as marked instead of unparsed: bash
    /// runs such text as a command substitution wherever a value reaches arithmetic
    /// evaluation (`test -v 'a[$(…)]'`, `let`, `[[ … -eq … ]]`, `declare -i`,
    /// `$((x))` of a variable holding it). The caller decides (an argument consumed as
    /// code that the gate parses, `sh -c '… $(…)'`, is fine).
    fn word_marked(&mut self, raw: &str, depth: usize) -> (Arg, Option<String>) {
        let opts = &self.opts;
        let parsed =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| word::parse(raw, opts)));
        let Ok(parsed) = parsed else {
            self.unparsed(format!("the word parser failed on `{raw}`"));
            return (Arg::Dynamic(raw.to_string()), None);
        };
        match parsed {
            Ok(pieces) => {
                let mut value = String::new();
                let mut dynamic = false;
                self.pieces(&pieces, raw, false, depth, &mut value, &mut dynamic);
                if !dynamic && has_brace_expansion(&pieces, raw) {
                    dynamic = true;
                }
                let mut checked = value.clone();
                for body in std::mem::take(&mut self.static_bodies) {
                    checked = checked.replace(&body, "");
                }
                let marked = has_substitution_text(&value).then(|| value.clone());
                if marked.is_some() && !has_substitution_text(&checked) {
                    self.body_marked.push(value.clone());
                }
                if dynamic {
                    (Arg::Dynamic(raw.to_string()), marked)
                } else {
                    (Arg::Literal(value), marked)
                }
            }
            Err(e) => {
                self.unparsed(format!("word `{raw}`: {e}"));
                (Arg::Dynamic(raw.to_string()), None)
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
                        // Kept dynamic; the decoded text is what a substitution check
                        // must see (`$'\x24(rm x)'` is `$(rm x)`).
                        *dynamic = true;
                        value.push_str(&decode_ansi_c(t));
                    } else {
                        value.push_str(t);
                    }
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
                    if let ParameterExpr::AssignDefaultValues {
                        parameter,
                        indirect,
                        ..
                    } = expr
                    {
                        let name = match parameter {
                            word::Parameter::Named(n) => Some(n.as_str()),
                            word::Parameter::NamedWithIndex { name, .. }
                            | word::Parameter::NamedWithAllIndices { name, .. } => {
                                Some(name.as_str())
                            }
                            _ => None,
                        };
                        match name {
                            _ if *indirect => self.unparsed(format!(
                                "`{source}` assigns to a variable named at run time"
                            )),
                            Some(n)
                                if dangerous_var(n)
                                    || COMMAND_VARS.contains(&n)
                                    || MAKE_VARS.contains(&n) =>
                            {
                                self.unparsed(format!(
                                    "`{source}` assigns to `{n}`, which changes what runs"
                                ))
                            }
                            _ => {}
                        }
                    }
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
                    self.program(src, depth + 1);
                    // `"$(cat <<'EOF' … EOF)"` (a commit message): its output is the
                    // here-document's text, known statically.
                    match static_heredoc_cat(src).filter(|_| quoted) {
                        Some(body) => {
                            value.push_str(&body);
                            self.static_bodies.push(body);
                        }
                        None => *dynamic = true,
                    }
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
    fn assigned(&mut self, name: &str, value: Option<&Arg>, depth: usize) -> Result<(), String> {
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

    /// Parses `script` as the commands an argument runs, and records the argument as
    /// consumed code.
    fn code(&mut self, script: &str, depth: usize) {
        self.code.push(script.to_string());
        self.program(script, depth + 1);
    }

    /// Words run as one command line (`watch a b`, `sg g a b`): joined with spaces and
    /// parsed; every word is consumed code.
    fn code_joined(&mut self, name: &str, words: &[Arg], depth: usize) -> Result<(), String> {
        let mut line = Vec::new();
        for w in words {
            match w {
                Arg::Literal(s) => line.push(s.clone()),
                Arg::Dynamic(d) => {
                    return Err(format!(
                        "`{name}` runs the command word `{d}`, known only at run time"
                    ))
                }
            }
        }
        self.code.extend(line.iter().cloned());
        self.program(&line.join(" "), depth + 1);
        Ok(())
    }

    fn simple(&mut self, simple: &ast::SimpleCommand, depth: usize) {
        let mut words: Vec<Arg> = Vec::new();
        let mut marked: Vec<String> = Vec::new();
        if let Some(prefix) = &simple.prefix {
            for it in &prefix.0 {
                self.item(it, true, depth, &mut words, &mut marked);
            }
        }
        if let Some(name) = &simple.word_or_name {
            let (arg, m) = self.word_marked(&name.value, depth);
            words.push(arg);
            marked.extend(m);
        }
        if let Some(suffix) = &simple.suffix {
            for it in &suffix.0 {
                self.item(it, false, depth, &mut words, &mut marked);
            }
        }
        let before = self.code.len();
        let commands_before = self.out.commands.len();
        if !words.is_empty() {
            self.resolve(words, depth);
        }
        // A word marked only by a quoted here-document's text reaches no arithmetic
        // when it is an argument of one external program, run directly (`git commit -m
        // "$(cat <<'EOF' … EOF)"`): no command string consumed, no shell, no builtin
        // but `echo`.
        let emitted = &self.out.commands[commands_before..];
        let external = self.code.len() == before
            && emitted.len() == 1
            && emitted.iter().all(|c| {
                let p = c.program();
                (p == "echo" || !BASH_BUILTINS.contains(&p))
                    && !is_code_runner(p)
                    && !SHELLS.contains(&p)
                    && interpreter(p).is_none()
            });
        // A marked word is fine only when it was consumed as code the gate parsed or
        // checked (`sh -c '… $(…)'`, an awk program).
        for m in marked {
            let body_only = external && self.body_marked.contains(&m);
            if !self.code[before..].contains(&m) && !body_only {
                self.unparsed(marked_reason(&m));
            }
        }
    }

    fn item(
        &mut self,
        it: &ast::CommandPrefixOrSuffixItem,
        in_prefix: bool,
        depth: usize,
        words: &mut Vec<Arg>,
        marked: &mut Vec<String>,
    ) {
        match it {
            ast::CommandPrefixOrSuffixItem::IoRedirect(r) => self.redirect(r, depth),
            ast::CommandPrefixOrSuffixItem::Word(w) => {
                let (arg, m) = self.word_marked(&w.value, depth);
                words.push(arg);
                marked.extend(m);
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
        self.writes.at = self.out.commands.len();
        self.writes.command(&argv);
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
                if let Some((var, value)) = program.split_once('=') {
                    if is_name(var) {
                        let value = Arg::Literal(value.to_string());
                        if let Err(reason) = self.assigned(var, Some(&value), depth) {
                            self.unparsed(reason);
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
                Some(Arg::Literal(a)) if a.starts_with('-') => Ok(Step::Itself),
                // An applet named at run time is unparsed when resolved.
                _ => Ok(runs(args)),
            },
            "env" => self.env(args, depth),
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
                        Some((var, value)) if is_name(var) => {
                            let value = Arg::Literal(value.to_string());
                            if let Err(reason) = self.assigned(var, Some(&value), depth) {
                                self.emit_visible(argv);
                                return Err(format!("`{name}`: {reason}"));
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
                programs::check(name, args)?;
                self.find_exec(argv, depth);
                Ok(Step::Itself)
            }
            "su" | "runuser" => self.su(name, argv, depth),
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
                        .is_none_or(|s| (s.starts_with('-') && s.contains('p')) || s.contains('='))
                }) {
                    Err("`hash -p` binds a command name to any file".to_string())
                } else {
                    Ok(Step::Itself)
                }
            }
            "trap" => {
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
            n if DECLARATIONS.contains(&n) => self.declaration(name, args, depth),
            "read" | "mapfile" | "readarray" | "getopts" | "printf" => {
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
            "let" => {
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
            n if SHELLS.contains(&n) => self.shell(name, args, depth),
            "compgen" | "complete" => {
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
            "bind" => Err("`bind` can bind keys to shell commands".to_string()),
            _ => self.other(name, argv, depth),
        }
    }

    fn emit_visible(&mut self, argv: &[Arg]) {
        self.emit(argv.to_vec(), argv, &[], false);
    }

    fn env(&mut self, args: &[Arg], depth: usize) -> Result<Step, String> {
        if matches!(args.first(), Some(Arg::Literal(a)) if a == "-") {
            return self.env(&args[1..], depth);
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
                    Some((var, value)) => {
                        let value = Arg::Literal(value.to_string());
                        self.assigned(var, Some(&value), depth)
                            .map_err(|reason| format!("`env`: {reason}"))?;
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
                    return Err(format!("`{name} --{long}` runs a file the gate cannot see"));
                }
                i += 1;
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
                    self.code(script, depth);
                    Ok(Step::Consumed)
                }
                Some(Arg::Dynamic(s)) => Err(format!("`{name} -c` string `{s}` is not static")),
                None => Err(format!("`{name} -c` without a command string")),
            };
        }
        if dash_s || operands.is_empty() {
            return Err(format!("`{name}` reads its commands from standard input"));
        }
        // `bash script.sh`, `sh /dev/stdin`, `bash /proc/self/fd/0`: code the gate
        // cannot see.
        Err(format!(
            "`{name}` runs the script `{}`, which the gate cannot see",
            operands[0].as_text()
        ))
    }

    /// `su` and `runuser`: the privilege wrapper stays visible (without its `-c`
    /// string), its `-c` string is parsed like `sh -c`; `runuser -u USER [--] CMD…`
    /// runs `CMD…`. Without a command they start a shell reading standard input.
    fn su(&mut self, name: &str, argv: &[Arg], depth: usize) -> Result<Step, String> {
        let args = &argv[1..];
        let spec = OptSpec {
            short_value: if name == "runuser" { "cgGswu" } else { "cgGsw" },
            short_flags: "flmpP",
            long_value: &[
                "command",
                "session-command",
                "group",
                "supp-group",
                "shell",
                "whitelist-environment",
                "user",
            ],
            long_flags: &["login", "fast", "preserve-environment", "pty"],
            ..OptSpec::default()
        };
        let (o, operands) = match scan_permuted(name, args, &spec) {
            Ok(x) => x,
            Err(reason) => {
                self.emit_visible(argv);
                return Err(reason);
            }
        };
        if o.info {
            return Ok(Step::Itself);
        }
        let mut command: Option<Arg> = None;
        let mut visible = vec![argv[0].clone()];
        for (opt, value) in &o.seen {
            match opt.as_str() {
                "c" | "command" | "session-command" => command = value.clone(),
                "s" | "shell" => {
                    let ok = value
                        .as_ref()
                        .and_then(Arg::literal)
                        .is_some_and(|s| SHELLS.contains(&basename(s)));
                    if !ok {
                        self.emit_visible(argv);
                        return Err(format!(
                            "`{name}` runs the shell `{}`, which is not a known shell",
                            value.as_ref().map_or("", Arg::as_text)
                        ));
                    }
                }
                _ => {}
            }
        }
        let user_form = o.has_any("u", &["user"]);
        if name == "runuser" && user_form && command.is_none() {
            if operands.is_empty() {
                return Err("`runuser -u` without a command starts a shell".to_string());
            }
            return Ok(Step::Runs {
                rest: operands,
                open_ended: false,
            });
        }
        visible.extend(operands.iter().cloned());
        self.emit_visible(&visible);
        match command {
            Some(Arg::Literal(c)) => {
                self.code(&c, depth);
                Ok(Step::Consumed)
            }
            Some(Arg::Dynamic(d)) => Err(format!("`{name}` command `{d}` is not static")),
            None => Err(format!(
                "`{name}` without `-c` runs a shell reading standard input"
            )),
        }
    }

    /// `export`, `declare`, `typeset`, `local`, `readonly`: their `NAME=value` operands
    /// are assignments; `-n` (a name reference) can alias any variable.
    fn declaration(&mut self, name: &str, args: &[Arg], depth: usize) -> Result<Step, String> {
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

    /// Programs that are not shells or builtins: more wrappers, git, interpreters and
    /// other programs that run code given on their command line.
    fn other(&mut self, name: &str, argv: &[Arg], depth: usize) -> Result<Step, String> {
        let args = &argv[1..];
        if name == "git" || (name.starts_with("git-") && name.len() > 4) {
            return self.git(name, args, depth);
        }
        if ALWAYS_UNPARSED.contains(&name) {
            return Err(format!(
                "`{name}` runs commands the gate cannot see (from standard input, the \
                 terminal, or built at run time)"
            ));
        }
        if OTHER_SHELLS.contains(&name) {
            return Err(format!(
                "`{name}` is a shell whose language the gate does not parse"
            ));
        }
        if argv[0].as_text().starts_with("/proc/") || argv[0].as_text().starts_with("/dev/") {
            return Err(format!(
                "`{}` runs a program through /proc or /dev (the shell itself, or any open \
                 file)",
                argv[0].as_text()
            ));
        }
        if interpreter(name).is_none() {
            if let Some(stem) = versioned_stem(name) {
                if SHELLS.contains(&stem) || OTHER_SHELLS.contains(&stem) {
                    return Err(format!(
                        "`{name}` is a versioned shell the gate does not parse"
                    ));
                }
                if let Some(spec) = interpreter(stem) {
                    return interpreted(name, args, &spec);
                }
            }
        }
        programs::check(name, args)?;
        if let Some(spec) = interpreter(name) {
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
                        && !args.iter().any(|a| {
                            matches!(a.literal(), Some("-h" | "--help" | "-V" | "--version"))
                        }) =>
                    {
                        return Err("`deno` without a subcommand starts a REPL".to_string())
                    }
                    _ => {}
                }
            }
            return interpreted(name, args, &spec);
        }
        match name {
            "flock" | "taskset" | "chrt" | "setpriv" | "unshare" | "nsenter" | "chroot"
            | "prlimit" | "systemd-run" => self.namespaces(name, argv, depth),
            "strace" | "ltrace" | "valgrind" | "eatmydata" | "fakeroot" | "pkexec" => {
                self.tracers(name, argv, depth)
            }
            "script" | "watch" | "sg" => self.terminals(name, argv, depth),
            "awk" | "gawk" | "mawk" | "nawk" => {
                self.awk(name, args)?;
                Ok(Step::Itself)
            }
            "sed" | "gsed" => {
                self.sed(name, args)?;
                Ok(Step::Itself)
            }
            "grep" | "egrep" | "fgrep" | "rg" => {
                // A pattern is matched, never run or printed: `$(` in it is plain text.
                self.code
                    .extend(args.iter().filter_map(Arg::literal).map(str::to_string));
                Ok(Step::Itself)
            }
            "make" | "gmake" => {
                for a in args {
                    let t = a.as_text();
                    let short_e = t.starts_with('-') && !t.starts_with("--") && t.contains('E');
                    let var = t
                        .split('=')
                        .next()
                        .unwrap_or("")
                        .trim_end_matches([':', '+', '?', '!']);
                    if t.starts_with("--eval") || short_e {
                        return Err(format!("`{name} {t}` evaluates code from the command line"));
                    }
                    if t.contains('=')
                        && (matches!(var, "SHELL" | ".SHELLFLAGS" | "MAKESHELL")
                            || MAKE_VARS.contains(&var))
                    {
                        return Err(format!(
                            "`{name} {t}` changes the shell make runs recipes with"
                        ));
                    }
                }
                Ok(Step::Itself)
            }
            "sqlite3" | "psql" | "mysql" | "mariadb" => sql_client(name, args),
            _ => Ok(Step::Itself),
        }
    }

    /// `NAME=value` option values (`systemd-run -E`, `strace -E`) are assignments in
    /// the command's environment.
    fn env_options(
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

    /// `find … -exec cmd … ;` (and `-execdir`, `-ok`, `-okdir`, `+` terminator): the
    /// commands it runs.
    fn find_exec(&mut self, argv: &[Arg], depth: usize) {
        // Commands run once per file, interleaved.
        self.writes.unordered = true;
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
        None => {
            // The words xargs reads are arguments too: a run-time word at the end lets
            // every check see them (`xargs git fetch` may get `--upload-pack=…`,
            // `xargs find` may get `-exec …`).
            rest.push(Arg::Dynamic(XARGS_INPUT.to_string()));
            Ok(Step::Runs {
                rest,
                open_ended: true,
            })
        }
    }
}

/// The run-time word standing for what `xargs` reads from its input.
const XARGS_INPUT: &str = "…";

/// The output of a command substitution that is only `cat` of a quoted here-document
/// (`cat <<'EOF'` … `EOF`, also `"EOF"` or `\EOF`): the body, trailing newlines
/// removed as bash does. `None` for anything else (a `<<-` here-document, other
/// commands or words, an unquoted delimiter whose body would be expanded).
fn static_heredoc_cat(src: &str) -> Option<String> {
    let s = src.trim_start_matches([' ', '\t', '\n']);
    let s = s.strip_prefix("cat")?;
    let s = s.trim_start_matches([' ', '\t']).strip_prefix("<<")?;
    let s = s.trim_start_matches([' ', '\t']);
    let (delim, s) = if let Some(r) = s.strip_prefix('\'') {
        r.split_once('\'')?
    } else if let Some(r) = s.strip_prefix('"') {
        r.split_once('"')?
    } else {
        let r = s.strip_prefix('\\')?;
        let end = r
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(r.len());
        r.split_at(end)
    };
    if delim.is_empty() || !delim.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    let s = s.trim_start_matches([' ', '\t']).strip_prefix('\n')?;
    let mut body = String::new();
    let mut lines = s.split('\n');
    loop {
        let line = lines.next()?;
        if line == delim {
            break;
        }
        body.push_str(line);
        body.push('\n');
    }
    let rest: String = lines.collect::<Vec<_>>().join("\n");
    if !rest.trim().is_empty() {
        return None;
    }
    Some(body.trim_end_matches('\n').to_string())
}

/// [`scan`], with options allowed after operands (GNU getopt's permutation: `su root -c
/// CMD`); `--` ends options.
fn scan_permuted(
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
    /// Options ended at `--`.
    dashdash: bool,
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

/// Whether brush's arithmetic parser accepts the expression (a panic counts as no).
fn is_arithmetic(expr: &str) -> bool {
    std::panic::catch_unwind(|| brush_parser::arithmetic::parse(expr).is_ok()).unwrap_or(false)
}

/// Literal text holding `$(` or a backtick: bash runs it as a command substitution if
/// the value ever reaches arithmetic evaluation (an array subscript: `a[$(…)]`).
fn has_substitution_text(text: &str) -> bool {
    text.contains("$(") || text.contains('`')
}

fn marked_reason(text: &str) -> String {
    let shown: String = text.chars().take(60).collect();
    let more = if text.chars().count() > 60 { "…" } else { "" };
    format!(
        "`{shown}{more}` holds `$(` or a backtick as text, which bash runs wherever the value \
         reaches arithmetic (`test -v`, `let`, `[[ -eq ]]`, array subscripts)"
    )
}

/// The value of a `$'…'` body (bash's ANSI-C escapes), for the substitution check only.
/// Unknown escapes are kept as written.
fn decode_ansi_c(body: &str) -> String {
    let chars: Vec<char> = body.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    let radix = |cs: &[char], start: usize, max: usize, base: u32| -> (u32, usize) {
        let mut v = 0u32;
        let mut n = 0;
        while n < max {
            match cs.get(start + n).and_then(|c| c.to_digit(base)) {
                Some(d) => {
                    v = v.wrapping_mul(base).wrapping_add(d);
                    n += 1;
                }
                None => break,
            }
        }
        (v, n)
    };
    while i < chars.len() {
        let c = chars[i];
        if c != '\\' || i + 1 >= chars.len() {
            out.push(c);
            i += 1;
            continue;
        }
        let e = chars[i + 1];
        i += 2;
        let simple = match e {
            'a' => Some('\u{7}'),
            'b' => Some('\u{8}'),
            'e' | 'E' => Some('\u{1b}'),
            'f' => Some('\u{c}'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            'v' => Some('\u{b}'),
            '\\' | '\'' | '"' | '?' => Some(e),
            _ => None,
        };
        if let Some(c) = simple {
            out.push(c);
            continue;
        }
        let (value, used) = match e {
            'x' => radix(&chars, i, 2, 16),
            'u' => radix(&chars, i, 4, 16),
            'U' => radix(&chars, i, 8, 16),
            '0'..='7' => {
                let (v, n) = radix(&chars, i - 1, 3, 8);
                (v, n - 1)
            }
            'c' if i < chars.len() => ((chars[i] as u32) & 0x1f, 1),
            _ => {
                out.push('\\');
                out.push(e);
                continue;
            }
        };
        if used == 0 && matches!(e, 'x' | 'u' | 'U') {
            out.push('\\');
            out.push(e);
            continue;
        }
        i += used;
        out.push(char::from_u32(value).unwrap_or('\u{fffd}'));
    }
    out
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
        // `su` stays visible without its command string, which is parsed.
        assert_eq!(texts("su -c 'git push' root"), ["su root", "git push"]);
        assert_eq!(texts("su - root -c 'ls'"), ["su - root", "ls"]);
        assert!(!analyze("su root").unparsed.is_empty());
        assert!(!analyze("su -s /tmp/x -c ls").unparsed.is_empty());
        assert!(!analyze("su -c \"$X\"").unparsed.is_empty());
        assert_eq!(
            texts("sudo -E FOO=1 git push"),
            ["sudo -E FOO=1 git push", "git push"]
        );
        assert!(!analyze("sudo PATH=/x git push").unparsed.is_empty());
        assert_eq!(texts("bash -o pipefail -ec -- 'a | b'"), ["a", "b"]);
        // A shell running a script (or standard input) runs code the gate cannot see.
        assert!(!analyze("bash ./build.sh --fast").unparsed.is_empty());
        assert!(!analyze("sh /dev/stdin").unparsed.is_empty());
        assert!(!analyze("bash --rcfile x -c ls").unparsed.is_empty());
        assert!(!analyze("bash").unparsed.is_empty());
        assert_eq!(texts("rbash -c 'rm x'"), ["rm x"]);
        assert!(!analyze("fish -c ls").unparsed.is_empty());
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
    fn more_wrappers_are_seen_through() {
        for (line, want) in [
            ("flock L rm x", "rm x"),
            ("flock -n L -c 'rm x'", "rm x"),
            ("taskset -c 1 rm x", "rm x"),
            ("chrt -f 10 rm x", "rm x"),
            ("setpriv --reuid=1 --init-groups rm x", "rm x"),
            ("unshare -r -n rm x", "rm x"),
            ("runuser -u nobody -- rm x", "rm x"),
            ("watch -n 1 rm x", "rm x"),
            ("watch -x rm x", "rm x"),
            ("prlimit --nofile=5 rm x", "rm x"),
            ("systemd-run --user --wait rm x", "rm x"),
            ("nsenter -t 1 -n rm x", "rm x"),
            ("chroot / rm x", "rm x"),
            ("sg wheel -c 'rm x'", "rm x"),
            ("strace -f -o t.log rm x", "rm x"),
            ("strace -o '|rm x' ls", "rm x"),
            ("ltrace -e malloc rm x", "rm x"),
            ("valgrind --tool=memcheck -q rm x", "rm x"),
            ("eatmydata rm x", "rm x"),
            ("script -qc 'rm x' /dev/null", "rm x"),
            ("git rebase -x 'rm x' main", "rm x"),
            ("git rebase --exec='rm x' main", "rm x"),
            ("git submodule foreach 'rm x'", "rm x"),
            ("git submodule --quiet foreach --recursive rm x", "rm x"),
            ("git bisect run rm x", "rm x"),
            ("git difftool --extcmd 'rm x'", "rm x"),
            ("git filter-branch --tree-filter 'rm x' HEAD", "rm x"),
            ("git fetch --upload-pack='rm x' .", "rm x"),
            ("git clone -u 'rm x' . y", "rm x"),
            ("git grep -O'rm x' foo", "rm x"),
            ("mapfile -C 'rm x' -c 1 a", "rm x"),
            ("GIT_EDITOR='rm x' git commit", "rm x"),
        ] {
            let got = texts(line);
            assert!(got.iter().any(|t| t == want), "{line:?}: {got:?}");
            assert!(
                analyze(line).unparsed.is_empty(),
                "{line:?}: {:?}",
                analyze(line)
            );
        }
        for line in [
            "unshare",
            "chroot /srv/root ls",
            "nsenter -t 1 -m ls",
            "unshare -R /x ls",
            "script /dev/null",
            "sg wheel",
            "parallel rm ::: x",
            "systemd-run -S",
            "fakeroot",
            "watch \"$X\"",
        ] {
            assert!(!analyze(line).unparsed.is_empty(), "{line:?} parsed");
        }
    }

    #[test]
    fn git_configuration_that_runs_commands_is_unparsed() {
        for line in [
            "GIT_CONFIG_COUNT=1 git status",
            "GIT_CONFIG_PARAMETERS=x git status",
            "env GIT_SSH_COMMAND=x git fetch",
            "export GIT_CONFIG_KEY_0=alias.p",
            "declare -x GIT_EXEC_PATH=/tmp",
            "read GIT_CONFIG_PARAMETERS",
            "git -c core.pager=less log",
            "git --config-env=core.sshCommand=X fetch",
            "git --exec-path=/tmp status",
            "git config core.fsmonitor x",
            "git config --global include.path x",
            "git config set core.editor x",
            "git config --rename-section user core",
            "git config \"$K\" v",
            "declare -n r=PATH",
            "(( PATH = 1 ))",
        ] {
            assert!(!analyze(line).unparsed.is_empty(), "{line:?} parsed");
        }
        for line in [
            "git -c user.name=x -c color.ui=never commit -m y",
            "git -c alias.p=push p",
            "git config user.email a@b.c",
            "git config --get core.pager",
            "git config --unset core.pager",
            "git config -l",
            "git config --global --add safe.directory /x",
            "git config alias.st status",
            "GIT_EDITOR=true git rebase --continue",
            "export FOO=1 BAR=\"$HOME\"",
            "local -r x=1",
        ] {
            assert!(
                analyze(line).unparsed.is_empty(),
                "{line:?}: {:?}",
                analyze(line)
            );
        }
    }

    #[test]
    fn interpreters_awk_sed_and_make() {
        for line in [
            "python3 -c 'import os'",
            "python3.12 -Bc x",
            "python3 -W ignore -c x",
            "python3",
            "python3 -",
            "python3 /dev/stdin",
            "python3 -i s.py",
            "node -e 1",
            "node --eval=1",
            "node -r data:text/javascript,1 a.js",
            "node --title t -e 1",
            "perl -pi -e 's/a/b/' f",
            "perl -ne 'print'",
            "perl",
            "ruby -rjson -e 'p 1'",
            "php -r 'echo 1;'",
            "lua -e 'os.execute(1)'",
            "deno eval 1",
            "bun -e 1",
            "osascript -e x",
            "awk 'BEGIN{system(\"x\")}'",
            "awk '{print | \"sh\"}'",
            "awk '{\"date\" | getline d}'",
            "gawk -e 'BEGIN{system(1)}' f",
            "awk -l x 'BEGIN{}'",
            "awk \"$P\" f",
            "sed '1e rm x' f",
            "sed -n 's/a/b/e' f",
            "sed -e p -e 'e rm' f",
            "sed --expression='1e x' f",
            "sed \"$S\" f",
            "sed 's/[/]/x/e' f",
            "make --eval 'x:;rm y' x",
            "make -E 'x:;rm y' x",
            "make SHELL=/tmp/x",
            "sqlite3 db",
            "sqlite3 db '.shell rm x'",
            "psql",
            "mysql -e 'system rm x'",
            "vim -c '!rm x'",
            "gdb -batch -ex 'shell rm x'",
            // program and script files the gate cannot see
            "awk -f prog.awk f",
            "gawk --so='BEGIN{system(\"x\")}'",
            "gawk --exec=p.awk",
            "sed -f script.sed f",
            "sed --fi=script.sed f",
            "sed --expr='1e rm x' f",
            "sed --e '1e rm x' f",
        ] {
            assert!(!analyze(line).unparsed.is_empty(), "{line:?} parsed");
        }
        for line in [
            "python3 script.py -c x",
            "python3 -m pytest -x",
            "python3 --version",
            "node server.js -p 3000",
            "node --test",
            "node --max-old-space-size=4096 a.js",
            "perl script.pl",
            "ruby -v",
            "awk '{print $1}' f",
            "awk -F: '$3 > 5 || $4 < 2 {print $(NF-1)}' f",
            "sed -i 's/a/b/g' f",
            "sed -n '/x/,/y/{p;q}' f",
            "sed -E 's#a|b#c#2' f",
            "sed 'y/abc/xyz/;1d;$a\\\nend' f",
            "sed --sandbox 's/a/b/e' f",
            "make -j4 test",
            "sqlite3 db 'select 1'",
            "psql -c 'select 1'",
        ] {
            assert!(
                analyze(line).unparsed.is_empty(),
                "{line:?}: {:?}",
                analyze(line)
            );
        }
    }

    #[test]
    fn substitution_text_in_words() {
        for line in [
            "test -v 'a[$(rm x)]'",
            "let 'a[$(rm x)]=1'",
            "x='a[`rm x`]'; echo $((x))",
            "[[ 'a[$(rm x)]' -eq 1 ]]",
            "echo \"a[\\$(rm x)]\"",
            "x=$'a[\\x24(rm x)]'",
            "x=$'a[\\140rm x\\140]'",
            "cat <<E\n\\$(rm x)\nE",
            "cat <<< '$(rm x)'",
            "sh -c 'echo hi' 'a[$(rm x)]'",
        ] {
            assert!(!analyze(line).unparsed.is_empty(), "{line:?} parsed");
        }
        for line in [
            "sh -c 'echo $(date)'",
            "bash -c 'echo `date`'",
            "trap 'echo $(date)' EXIT",
            "grep -rn '$(shell' .",
            "awk '{print $(NF-1)}' f",
            "git commit -m \"$(cat <<'E'\nuse `x`\nE\n)\"",
            "echo $'a\\tb'",
        ] {
            assert!(
                analyze(line).unparsed.is_empty(),
                "{line:?}: {:?}",
                analyze(line)
            );
        }
        assert_eq!(decode_ansi_c(r"\x24(\101\u0042\ca"), "$(AB\u{1}");
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

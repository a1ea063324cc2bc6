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
//!
//! ## Files
//!
//! This file is the public face: the types [`analyze`] answers with. The walk:
//! `walker.rs` (the walker's state, parsing a string as commands), `syntax.rs` (lists,
//! compound commands, redirections, simple commands), `words.rs` (quote removal,
//! substitutions, text bash would run as a substitution, arithmetic), `commands.rs` (a
//! simple command seen through its wrappers: which family reads which program),
//! `step.rs` (what a wrapper does with the rest of the words), `options.rs` (option
//! grammars). The families: `wrappers.rs`, `privilege.rs` (`sudo`, `doas`, `su`,
//! `runuser`), `xargs.rs` (`xargs`, `find -exec`), `shells.rs`, `builtins.rs`,
//! `variables.rs` (assignments that change what runs), `git.rs`, `interpreters.rs`,
//! `scripts.rs` (awk, sed, grep patterns, make), `programs.rs` (other programs that run
//! a program); `runners.rs` names the programs that run code handed to them.
//! `prescan.rs` bounds the input; `writes.rs` checks what the line writes and then
//! runs.

mod builtins;
mod commands;
mod git;
mod interpreters;
mod options;
mod prescan;
mod privilege;
mod programs;
mod runners;
mod scripts;
mod shells;
mod step;
mod syntax;
mod variables;
mod walker;
mod words;
mod wrappers;
mod writes;
mod xargs;

pub use git::GIT_GLOBAL_WITH_VALUE;
pub use options::could_name;
pub use prescan::{nesting, MAX_AMBIGUOUS_NESTING, MAX_LINE_BYTES, MAX_NESTING};
pub use runners::is_code_runner;
pub use shells::SHELLS;

use walker::Walker;
use xargs::XARGS_INPUT;

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
    let mut walker = Walker::new();
    walker.program(line, 0);
    walker.finish()
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

#[cfg(test)]
mod tests {
    use super::words::decode_ansi_c;
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

//! Files a line writes, and what it then runs from them.
//!
//! A line can make a program and run it (`cp /usr/bin/git ./g; ./g push`,
//! `echo 'git push' > s.sh; chmod +x s.sh; ./s.sh`), write a script and hand it to an
//! interpreter (`… > p.py; python3 p.py`, `… > Makefile; make`), or write git's
//! configuration or hooks and then run git (`… >> .git/config; git fetch`). The walker
//! records every write destination it can see: redirection targets (`>`, `>>`, `>|`,
//! `<>`, `&>`, `>&FILE`) and the file operands of programs that copy, link, move or
//! write files (`cp`, `ln`, `install`, `mv`, `rsync`, `tee`, `dd of=`, `chmod`,
//! `sed -i`, `patch`, `tar`, `unzip`…). After the walk, [`check`] makes unparsed:
//!
//! - any program given by a path outside the system directories (`./g`, `/tmp/x`,
//!   `d/cat`) when the line writes anything (`/dev/null` and the standard streams aside);
//! - a program, or an operand of a shell, interpreter or `make`, whose name is the last
//!   component of a written path (or any, when a destination is known only at run time);
//! - a write to git's configuration or hooks (`.git/config`, `.git/hooks/…`,
//!   `.gitconfig`, `git/config`, any file named like a git hook or a `hooks`
//!   directory, wherever the repository is kept) or to a shell's or another program's
//!   startup files
//!   (`.bashrc`, `.profile`, `~/.ssh/config`, `usercustomize`, `.pth`…), and a written
//!   path known only at run time in a line that also runs git;
//! - a build or test tool ([`BUILD_TOOLS`]: `make`, `cargo`, `npm`, `pytest`…, which
//!   run code from the project's files) after a write.
//!
//! Order is ignored (a write after the command counts too: the stricter reading),
//! except for build tools, whose own output (`cargo build | tee log`) is common: for
//! them only a write earlier in the line counts, or any write when source order is not
//! run order (loops, functions, traps, `find -exec`, coprocesses, background jobs).

use super::interpreters::interpreter;
use super::runners::is_code_runner;
use super::{basename, Analysis, Arg, Unparsed};

/// Directories whose programs are the system's own.
const SYSTEM_BIN_DIRS: &[&str] = &[
    "/usr/bin/",
    "/bin/",
    "/usr/local/bin/",
    "/usr/sbin/",
    "/sbin/",
];

/// Write destinations that are not files a later command could run.
const HARMLESS: &[&str] = &["/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"];

/// Programs that write the files named in their operands.
const WRITERS: &[&str] = &[
    "cp", "mv", "ln", "install", "rsync", "tee", "dd", "chmod", "patch", "tar", "unzip", "cpio",
    "sed", "gsed", "truncate", "mkfifo", "link", "gzip", "gunzip", "bunzip2", "xz", "unxz", "zstd",
    "7z", "split", "csplit", "curl", "wget", "git-lfs", "uniq", "xxd",
];

/// Programs that run code from files in the working tree (build scripts, test
/// configuration, package hooks): after a write in the same line, they could run it.
const BUILD_TOOLS: &[&str] = &[
    "make", "gmake", "cmake", "meson", "ninja", "cargo", "npm", "npx", "yarn", "pnpm", "bun",
    "deno", "pip", "pip3", "poetry", "uv", "uvx", "pytest", "py.test", "tox", "nox", "go", "mvn",
    "gradle", "ant", "rake", "bundle", "composer", "dotnet", "swift", "mix", "sbt",
];

/// git's hook names: a file written under one of them may be a hook of a repository
/// kept anywhere (`git init --separate-git-dir=/tmp/d`, `git --git-dir=/tmp/d`).
const GIT_HOOKS: &[&str] = &[
    "applypatch-msg",
    "pre-applypatch",
    "post-applypatch",
    "pre-commit",
    "pre-merge-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "pre-rebase",
    "post-checkout",
    "post-merge",
    "pre-push",
    "pre-receive",
    "update",
    "proc-receive",
    "post-receive",
    "post-update",
    "reference-transaction",
    "push-to-checkout",
    "pre-auto-gc",
    "post-rewrite",
    "sendemail-validate",
    "fsmonitor-watchman",
    "post-index-change",
];

/// Programs that only read the files they name.
const READERS: &[&str] = &[
    "cat",
    "ls",
    "head",
    "tail",
    "less",
    "more",
    "grep",
    "egrep",
    "fgrep",
    "rg",
    "wc",
    "stat",
    "file",
    "diff",
    "cmp",
    "test",
    "[",
    "echo",
    "printf",
    "git",
    "du",
    "realpath",
    "readlink",
    "basename",
    "dirname",
    "md5sum",
    "sha256sum",
    "sha1sum",
    "cd",
    "pushd",
    "tree",
    "bat",
];

/// The write destinations a line has, as the walker found them.
#[derive(Debug, Default)]
pub(super) struct Writes {
    /// Every destination (literal or known only at run time).
    dests: Vec<Arg>,
    /// For each destination, how many commands came before the write.
    positions: Vec<usize>,
    /// Where the next write is (the number of commands emitted so far).
    pub(super) at: usize,
    /// The line has loops, functions, traps or background jobs: source order is not
    /// run order.
    pub(super) unordered: bool,
    /// The line changes into git's directory (`cd .git`), where a relative write could
    /// be its configuration or hooks.
    cd_git: bool,
}

impl Writes {
    fn push(&mut self, dest: Arg) {
        self.dests.push(dest);
        self.positions.push(self.at);
    }

    /// A redirection target (`> FILE`).
    pub(super) fn redirect(&mut self, target: &Arg) {
        if let Arg::Literal(t) = target {
            if HARMLESS.contains(&t.as_str()) || t.chars().all(|c| c.is_ascii_digit() || c == '-') {
                return;
            }
        }
        self.push(target.clone());
    }

    /// A simple command about to be emitted: records what it writes.
    pub(super) fn command(&mut self, argv: &[Arg]) {
        let Some(name) = argv.first().map(|a| basename(a.as_text()).to_string()) else {
            return;
        };
        if (name == "cd" || name == "pushd")
            && argv[1..].iter().any(|a| a.as_text().contains(".git"))
        {
            self.cd_git = true;
        }
        // Any program but a reader that names git's configuration or hooks, or a
        // shell's startup file, may write it (`sed -n 'w .git/config'`,
        // `find -fprintf .git/config …`, `awk '{print > ".git/config"}'`).
        if !READERS.contains(&name.as_str()) {
            for a in &argv[1..] {
                if let Arg::Literal(t) = a {
                    if runs_code_when_read(t) {
                        self.push(a.clone());
                    }
                }
            }
        }
        // Options that name an output file.
        let outputs: &[&str] = match name.as_str() {
            "sort" => &["-o", "--output"],
            "find" => &["-fprint", "-fprint0", "-fprintf", "-fls"],
            _ => &[],
        };
        for (i, a) in argv.iter().enumerate().skip(1) {
            let t = a.as_text();
            if outputs.contains(&t) {
                if let Some(v) = argv.get(i + 1) {
                    self.push(v.clone());
                }
            } else if let Some(v) = outputs
                .iter()
                .filter(|o| o.starts_with("--") || (name == "sort" && **o == "-o"))
                .find_map(|o| t.strip_prefix(o).map(|v| v.trim_start_matches('=')))
                .filter(|v| !v.is_empty())
            {
                self.push(Arg::Literal(v.to_string()));
            }
        }
        if !WRITERS.contains(&name.as_str()) {
            return;
        }
        if (name == "sed" || name == "gsed")
            && !argv[1..].iter().any(|a| {
                let t = a.as_text();
                t.starts_with("--in")
                    || (t.starts_with('-') && !t.starts_with("--") && t.contains('i'))
            })
        {
            return;
        }
        for a in &argv[1..] {
            match a {
                Arg::Literal(t) if name == "dd" => {
                    if let Some(of) = t.strip_prefix("of=") {
                        self.push(Arg::Literal(of.to_string()));
                    }
                }
                Arg::Literal(t) if t.starts_with('-') && !t.contains('/') => {}
                other => self.push(other.clone()),
            }
        }
    }
}

fn is_system_program(path: &str) -> bool {
    SYSTEM_BIN_DIRS.iter().any(|d| {
        path.strip_prefix(d)
            .is_some_and(|rest| !rest.contains('/') && !rest.is_empty())
    })
}

/// A path of git's configuration or hooks, or of a shell's startup files.
fn runs_code_when_read(path: &str) -> bool {
    const STARTUP: &[&str] = &[
        ".bashrc",
        ".bash_profile",
        ".bash_login",
        ".bash_logout",
        ".profile",
        ".zshenv",
        ".zshrc",
        ".zprofile",
        ".kshrc",
        ".mkshrc",
        "bash.bashrc",
        "gitconfig",
        ".gitmodules",
        ".lessfilter",
        "lesskey",
        ".ssh/config",
        ".ssh/rc",
        ".ssh/environment",
        ".cargo/config",
        ".npmrc",
        "usercustomize",
        "sitecustomize",
    ];
    let p = path.trim_end_matches('/');
    let name = basename(p);
    GIT_HOOKS.contains(&name)
        || name == "hooks"
        || STARTUP.iter().any(|s| p.contains(s))
        || p.contains(".git/")
        || p.ends_with(".git")
        || p.ends_with("git/config")
        || p.ends_with(".pth")
}

/// Unparsed entries for what the line runs from files it writes (module docs).
pub(super) fn check(out: &mut Analysis, writes: &Writes) {
    if writes.dests.is_empty() {
        return;
    }
    let mut reasons: Vec<String> = Vec::new();
    let run_time = writes.dests.iter().any(|d| matches!(d, Arg::Dynamic(_)));
    let names: std::collections::HashSet<&str> = writes
        .dests
        .iter()
        .filter_map(Arg::literal)
        .map(basename)
        .filter(|n| !n.is_empty())
        .collect();
    for d in writes.dests.iter().filter_map(Arg::literal) {
        if runs_code_when_read(d) || (writes.cd_git && !d.starts_with('/')) {
            reasons.push(format!(
                "the line writes `{d}`, which makes git or a shell run commands"
            ));
        }
    }
    let first_write = writes.positions.iter().copied().min().unwrap_or(usize::MAX);
    for (index, c) in out.commands.iter().enumerate() {
        let Some(program) = c.argv.first().map(Arg::as_text) else {
            continue;
        };
        let name = c.program();
        if program.contains('/') && !is_system_program(program) {
            reasons.push(format!(
                "`{program}` is run from a path this line writes or could write"
            ));
        } else if !program.contains('/') && names.contains(name) {
            reasons.push(format!("`{name}` is a name this line writes a file under"));
        }
        let runner = is_code_runner(name)
            || interpreter(name).is_some()
            || matches!(
                name,
                "make" | "gmake" | "tclsh" | "wish" | "expect" | "php" | "ruby"
            );
        if runner {
            let makefile = matches!(name, "make" | "gmake")
                && ["Makefile", "makefile", "GNUmakefile"]
                    .iter()
                    .any(|n| names.contains(n));
            let operand = c.argv[1..].iter().any(|a| match a {
                Arg::Literal(t) => {
                    let t = t.rsplit('=').next().unwrap_or(t);
                    names.contains(basename(t))
                }
                Arg::Dynamic(_) => run_time,
            });
            let make = matches!(name, "make" | "gmake");
            if makefile || operand || (run_time && (c.argv.len() > 1 || make)) {
                reasons.push(format!("`{}` runs a file this line writes", c.text()));
            }
        }
        let written_before = writes.unordered || first_write < index;
        if BUILD_TOOLS.contains(&name) && written_before {
            reasons.push(format!(
                "`{}` runs code from the project's files, and this line writes files",
                c.text()
            ));
        }
        if run_time && (name == "git" || name.starts_with("git-")) {
            reasons.push(format!(
                "`{}` runs after a write to a path known only at run time (it could be \
                 git's configuration or hooks)",
                c.text()
            ));
        }
    }
    reasons.dedup();
    out.unparsed
        .extend(reasons.into_iter().map(|reason| Unparsed { reason }));
}

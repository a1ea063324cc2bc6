//! git as the gate reads it: global options, the subcommand, configuration that can
//! make git run commands, and the commands git runs for its options. Option grammar
//! follows git's parse-options (gitcli(7)): long options may be abbreviated to any
//! unambiguous prefix, short options bundle (`-iO…`) and take attached values.

use super::options::could_name;
use super::step::Step;
use super::walker::Walker;
use super::Arg;

impl Walker {
    /// git, and `git-SUB` programs (git's plumbing paths, `/usr/lib/git-core/git-push`
    /// is `git push`). Configuration that can make git run commands (`-c core.pager=…`,
    /// `git config core.fsmonitor …`) and `--exec-path=` are unparsed; the commands git
    /// runs for its options (`rebase --exec`, `submodule foreach`, `bisect run`,
    /// `difftool --extcmd`, `filter-branch --*-filter`, `grep -O`, `--upload-pack`…)
    /// are parsed. Whether the subcommand could be `push` (an alias, a command that is
    /// not git's own) is the policy's question.
    pub(super) fn git(&mut self, name: &str, args: &[Arg], depth: usize) -> Result<Step, String> {
        let (sub, rest): (&str, &[Arg]) = if name == "git" {
            let mut i = 0;
            loop {
                // A run-time word where the subcommand goes: the policy treats it as
                // any subcommand.
                let Some(Arg::Literal(a)) = args.get(i) else {
                    return Ok(Step::Itself);
                };
                match a.as_str() {
                    "-c" | "--config-env" => {
                        match args.get(i + 1) {
                            Some(Arg::Literal(kv)) => {
                                git_config_key_ok(kv.split('=').next().unwrap_or(""), "git -c")?
                            }
                            Some(Arg::Dynamic(d)) => {
                                return Err(format!(
                                    "`git {a} {d}` sets configuration known only at run time"
                                ))
                            }
                            None => {}
                        }
                        i += 2;
                    }
                    _ if a.starts_with("--config-env=") => {
                        let kv = &a["--config-env=".len()..];
                        git_config_key_ok(kv.split('=').next().unwrap_or(""), "git -c")?;
                        i += 1;
                    }
                    _ if a.starts_with("--exec-path=") => {
                        return Err(format!(
                            "`git {a}` runs git's commands from another directory"
                        ))
                    }
                    _ if GIT_GLOBAL_WITH_VALUE.contains(&a.as_str()) => i += 2,
                    _ if a.starts_with('-') => i += 1,
                    _ => break (a.as_str(), &args[i + 1..]),
                }
            }
        } else {
            (&name[4..], args)
        };
        // Subcommands with options that run commands: a run-time word before `--`
        // could be such an option (`git grep "$p"` with `p=-Ocmd`).
        let runs_options: &[&str] = match sub {
            "rebase" => &["exec"],
            "difftool" => &["extcmd"],
            "clone" => &["upload-pack", "config"],
            "fetch" | "pull" | "ls-remote" | "fetch-pack" => &["upload-pack", "exec"],
            "push" | "send-pack" => &["receive-pack", "exec"],
            "archive" => &["exec"],
            "grep" => &["open-files-in-pager"],
            "filter-branch" => &[
                "env-filter",
                "tree-filter",
                "index-filter",
                "parent-filter",
                "msg-filter",
                "commit-filter",
                "tag-name-filter",
                "setup",
            ],
            _ => &[],
        };
        if !runs_options.is_empty() {
            for a in rest {
                match a {
                    Arg::Literal(w) if w == "--" => break,
                    Arg::Dynamic(d) => {
                        return Err(format!(
                            "`git {sub}` word `{d}` is known only at run time and could be an \
                             option that runs a command (`--{}`)",
                            runs_options[0]
                        ))
                    }
                    _ => {}
                }
            }
        }
        match sub {
            "config" => git_config(rest)?,
            "init" | "init-db" => git_template(sub, rest)?,
            "rebase" => self.option_code(rest, 'x', &["exec"], true, depth)?,
            "difftool" => self.option_code(rest, 'x', &["extcmd"], true, depth)?,
            "clone" => {
                git_template(sub, rest)?;
                self.option_code(rest, 'u', &["upload-pack"], true, depth)?;
                // `clone -c KEY=VALUE` / `--config`: configuration of the new
                // repository, in effect while it is fetched.
                for (opt, value) in git_option_values(rest, 'c', "config") {
                    match value {
                        Some(Arg::Literal(kv)) => git_config_key_ok(
                            kv.split('=').next().unwrap_or(""),
                            &format!("git clone {opt}"),
                        )?,
                        Some(Arg::Dynamic(d)) => {
                            return Err(format!(
                                "`git clone {opt} {d}` sets configuration known only at run time"
                            ))
                        }
                        None => {}
                    }
                }
            }
            "filter-branch" => {
                self.option_code(rest, '\0', runs_options, true, depth)?;
            }
            "grep" => {
                // `-O[CMD]` (attached only, also inside a cluster: `-iOcmd`) and
                // `--open-files-in-pager[=CMD]` or any prefix of it (`--open=CMD`).
                for a in rest.iter().filter_map(Arg::literal) {
                    if a == "--" {
                        break;
                    }
                    let cmd = if let Some(long) = a.strip_prefix("--") {
                        match long.split_once('=') {
                            Some((n, v)) if could_name(n, "open-files-in-pager") => Some(v),
                            _ => None,
                        }
                    } else if let Some(cluster) = a.strip_prefix('-') {
                        cluster.find('O').map(|at| &cluster[at + 1..])
                    } else {
                        None
                    };
                    if let Some(cmd) = cmd.filter(|c| !c.is_empty()) {
                        self.code(cmd, depth);
                    }
                }
            }
            "submodule" => {
                if let Some(at) = rest.iter().position(|a| a.literal() == Some("foreach")) {
                    let mut words = &rest[at + 1..];
                    while let Some(Arg::Literal(o)) = words.first() {
                        if !o.starts_with('-') {
                            break;
                        }
                        words = &words[1..];
                        if o == "--" {
                            break;
                        }
                    }
                    self.git_runs("git submodule foreach", words, depth)?;
                }
            }
            "bisect" if rest.first().and_then(Arg::literal) == Some("run") => {
                self.git_runs("git bisect run", &rest[1..], depth)?;
            }
            _ => {}
        }
        // Transports run these commands (through a shell, locally for local remotes);
        // parse-options takes any unambiguous prefix (`--upload-p=`, `--exe=`).
        let transport = matches!(
            sub,
            "fetch"
                | "pull"
                | "clone"
                | "ls-remote"
                | "push"
                | "archive"
                | "fetch-pack"
                | "send-pack"
        );
        self.option_code(
            rest,
            '\0',
            &["upload-pack", "receive-pack", "exec"],
            transport,
            depth,
        )?;
        Ok(Step::Itself)
    }

    /// The values of a command-taking option (`-xCMD`, `-x CMD`, `--exec=CMD`,
    /// `--exec CMD`), parsed as code. A short option is also found inside a cluster
    /// (`-ix CMD`). With `abbrev`, a long option may be written as any prefix of its
    /// name (git's parse-options: `--exe=CMD` is `--exec=CMD`).
    pub(super) fn option_code(
        &mut self,
        rest: &[Arg],
        short: char,
        long: &[&str],
        abbrev: bool,
        depth: usize,
    ) -> Result<(), String> {
        let names = |n: &str| long.iter().any(|l| *l == n || (abbrev && could_name(n, l)));
        let mut i = 0;
        while i < rest.len() {
            let a = match &rest[i] {
                Arg::Literal(a) => a.as_str(),
                Arg::Dynamic(d) => {
                    // `--exec="$C"`, `-x"$C"`: the option is static, its value is not.
                    let t = d.trim_start_matches(['"', '\'']);
                    let named = match t.strip_prefix("--") {
                        Some(l) => {
                            let n: String = l
                                .chars()
                                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                                .collect();
                            names(&n)
                        }
                        None => {
                            short != '\0'
                                && t.strip_prefix('-').is_some_and(|c| {
                                    c.split(['$', '"', '\'', '`'])
                                        .next()
                                        .unwrap_or("")
                                        .contains(short)
                                })
                        }
                    };
                    if named {
                        return Err(format!("`{d}` runs a command known only at run time"));
                    }
                    i += 1;
                    continue;
                }
            };
            if a == "--" {
                break;
            }
            let mut value: Option<Arg> = None;
            let mut found = false;
            if let Some(l) = a.strip_prefix("--") {
                let (n, inline) = match l.split_once('=') {
                    Some((n, v)) => (n, Some(v)),
                    None => (l, None),
                };
                if names(n) {
                    found = true;
                    value = match inline {
                        Some(v) => Some(Arg::Literal(v.to_string())),
                        None => {
                            i += 1;
                            rest.get(i).cloned()
                        }
                    };
                }
            } else if let Some(cluster) = a.strip_prefix('-') {
                if short != '\0' {
                    if let Some(at) = cluster.find(short) {
                        found = true;
                        let tail = &cluster[at + short.len_utf8()..];
                        value = if tail.is_empty() {
                            i += 1;
                            rest.get(i).cloned()
                        } else {
                            Some(Arg::Literal(tail.to_string()))
                        };
                    }
                }
            }
            if found {
                match value {
                    Some(Arg::Literal(cmd)) => self.code(&cmd, depth),
                    Some(Arg::Dynamic(d)) => {
                        return Err(format!(
                            "`{a}` runs `{d}`, a command known only at run time"
                        ))
                    }
                    None => {}
                }
            }
            i += 1;
        }
        Ok(())
    }

    /// A command git runs (`submodule foreach`, `bisect run`): one word goes through
    /// `sh -c`; several are run as they are (through `sh -c` if the first has shell
    /// syntax).
    pub(super) fn git_runs(
        &mut self,
        what: &str,
        words: &[Arg],
        depth: usize,
    ) -> Result<(), String> {
        match words {
            [] => Ok(()),
            [Arg::Literal(one)] => {
                self.code(one, depth);
                Ok(())
            }
            [Arg::Dynamic(d)] => Err(format!("`{what}` runs `{d}`, known only at run time")),
            [Arg::Literal(first), ..] if first.contains(|c: char| !is_plain_word_char(c)) => {
                self.code_joined(what, words, depth)
            }
            _ => {
                self.resolve(words.to_vec(), depth);
                Ok(())
            }
        }
    }
}

/// git's global options that take their value as the next word (`git -C DIR`,
/// `git --git-dir DIR`…): skipped with it, so the subcommand after them is found.
/// `--shallow-file` is undocumented but still read by git.
pub const GIT_GLOBAL_WITH_VALUE: &[&str] = &[
    "-C",
    "-c",
    "--git-dir",
    "--work-tree",
    "--namespace",
    "--config-env",
    "--super-prefix",
    "--attr-source",
    "--list-cmds",
    "--shallow-file",
];

/// The values of a git option that takes one (`-c V`, `-cV`, `--config V`,
/// `--config=V`, prefixes of the long name), with the option as written.
fn git_option_values(rest: &[Arg], short: char, long: &str) -> Vec<(String, Option<Arg>)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < rest.len() {
        let Some(a) = rest[i].literal() else {
            i += 1;
            continue;
        };
        if a == "--" {
            break;
        }
        if let Some(l) = a.strip_prefix("--") {
            let (n, inline) = match l.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (l, None),
            };
            if could_name(n, long) {
                let value = match inline {
                    Some(v) => Some(Arg::Literal(v.to_string())),
                    None => {
                        i += 1;
                        rest.get(i).cloned()
                    }
                };
                out.push((a.to_string(), value));
            }
        } else if let Some(cluster) = a.strip_prefix('-') {
            if let Some(at) = cluster.find(short) {
                let tail = &cluster[at + short.len_utf8()..];
                let value = if tail.is_empty() {
                    i += 1;
                    rest.get(i).cloned()
                } else {
                    Some(Arg::Literal(tail.to_string()))
                };
                out.push((format!("-{short}"), value));
            }
        }
        i += 1;
    }
    out
}

/// `git clone`/`git init --template=DIR` (or a prefix, `--templ=`): hooks copied from a
/// directory the gate cannot see, run by the clone itself (`post-checkout`).
fn git_template(sub: &str, rest: &[Arg]) -> Result<(), String> {
    for a in rest {
        let t = a.as_text().trim_start_matches(['"', '\'']);
        if t == "--" {
            break;
        }
        if let Some(long) = t.strip_prefix("--") {
            let n = long.split('=').next().unwrap_or(long);
            if could_name(n, "template") {
                return Err(format!(
                    "`git {sub} {t}` copies hooks from a directory the gate cannot see"
                ));
            }
        }
    }
    Ok(())
}

/// Characters of a word that needs no shell quoting (git runs such a command without a
/// shell).
fn is_plain_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-_./,:+@%^".contains(c)
}

/// Configuration keys that cannot make git run a command (matched lowercased). `alias.*`
/// is accepted too: an alias never shadows a git command, and the policy treats every
/// subcommand that is not git's own as a possible alias.
const GIT_SAFE_CONFIG_SECTIONS: &[&str] = &["user.", "color.", "advice.", "i18n.", "alias."];
const GIT_SAFE_CONFIG_KEYS: &[&str] = &[
    "init.defaultbranch",
    "core.quotepath",
    "core.autocrlf",
    "core.safecrlf",
    "core.filemode",
    "core.abbrev",
    "core.ignorecase",
    "core.eol",
    "core.symlinks",
    "pull.rebase",
    "pull.ff",
    "merge.ff",
    "merge.conflictstyle",
    "rebase.autosquash",
    "rebase.autostash",
    "rebase.updaterefs",
    "fetch.prune",
    "push.default",
    "push.autosetupremote",
    "commit.gpgsign",
    "tag.gpgsign",
    "gc.auto",
    "safe.directory",
    "diff.renames",
    "diff.noprefix",
    "diff.algorithm",
    "log.showsignature",
    "status.showuntrackedfiles",
    "column.ui",
];

fn git_config_key_ok(key: &str, what: &str) -> Result<(), String> {
    let k = key.trim().to_ascii_lowercase();
    if GIT_SAFE_CONFIG_SECTIONS.iter().any(|s| k.starts_with(s))
        || GIT_SAFE_CONFIG_KEYS.contains(&k.as_str())
    {
        Ok(())
    } else {
        Err(format!(
            "`{what} {key}` sets configuration that can make git run commands"
        ))
    }
}

/// `git config …`: a write of a key that can make git run commands is unparsed; reads,
/// removals and safe keys are not.
fn git_config(rest: &[Arg]) -> Result<(), String> {
    const VALUE_OPTS: &[&str] = &[
        "-f",
        "--file",
        "--blob",
        "--type",
        "--default",
        "--comment",
        "--value",
        "--url",
    ];
    const READS: &[&str] = &[
        "--get",
        "--get-all",
        "--get-regexp",
        "--get-urlmatch",
        "--get-color",
        "--get-colorbool",
        "-l",
        "--list",
        "--unset",
        "--unset-all",
        "--remove-section",
        "-e",
        "--edit",
    ];
    let mut operands: Vec<&str> = Vec::new();
    let (mut reads, mut writes) = (false, false);
    let mut i = 0;
    while i < rest.len() {
        let a = match &rest[i] {
            Arg::Literal(a) => a.as_str(),
            Arg::Dynamic(d) => {
                return Err(format!(
                    "`git config` operand `{d}` is known only at run time"
                ))
            }
        };
        if VALUE_OPTS.contains(&a) {
            i += 2;
            continue;
        }
        if a == "--rename-section" {
            return Err("`git config --rename-section` can move keys into any section".into());
        }
        if READS.contains(&a) {
            reads = true;
        } else if a == "--add" || a == "--replace-all" {
            writes = true;
        } else if !a.starts_with('-') {
            operands.push(a);
        }
        i += 1;
    }
    let key = match operands.first().copied() {
        Some("set") => operands.get(1).copied(),
        Some("rename-section") => {
            return Err("`git config rename-section` can move keys into any section".into())
        }
        Some("get" | "list" | "unset" | "remove-section" | "edit" | "get-color") => None,
        _ if reads => None,
        Some(k) if writes || operands.len() >= 2 => Some(k),
        _ => None,
    };
    match key {
        Some(k) => git_config_key_ok(k, "git config"),
        None => Ok(()),
    }
}

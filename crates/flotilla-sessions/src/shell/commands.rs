//! A simple command seen through its wrappers: the loop that peels them off
//! ([`Walker::resolve`]) and the table from a program's name to the family of programs
//! that reads its words (wrappers, privilege wrappers, shells, builtins, git,
//! interpreters, awk and sed, other programs), each in its own file.

use super::builtins::{self, DECLARATIONS};
use super::interpreters::{self, interpreted, interpreter, sql_client};
use super::programs::{self, ALWAYS_UNPARSED};
use super::runners::versioned_stem;
use super::scripts;
use super::shells::{OTHER_SHELLS, SHELLS};
use super::step::Step;
use super::variables::is_name;
use super::walker::Walker;
use super::wrappers;
use super::xargs::xargs;
use super::{basename, Arg};

impl Walker {
    /// Sees through wrappers, emitting the commands found.
    pub(super) fn resolve(&mut self, written: Vec<Arg>, depth: usize) {
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
        match name {
            "timeout" => wrappers::timeout(args),
            "nice" => wrappers::nice(args),
            "nohup" | "setsid" | "stdbuf" | "time" | "ionice" | "builtin" | "exec" => {
                wrappers::plain(name, args)
            }
            "command" => wrappers::command(args),
            "busybox" => wrappers::busybox(args),
            "env" => self.env(args, depth),
            "xargs" => xargs(args),
            "sudo" | "doas" => self.sudo(name, argv, depth),
            "find" => self.find(argv, depth),
            "su" | "runuser" => self.su(name, argv, depth),
            "eval" | "source" | "." | "fc" | "enable" | "bind" => {
                Err(builtins::runs_unseen_code(name))
            }
            "alias" => builtins::alias(args),
            "hash" => builtins::hash(args),
            "trap" => self.trap(args, depth),
            n if DECLARATIONS.contains(&n) => self.declaration(name, args, depth),
            "read" | "mapfile" | "readarray" | "getopts" | "printf" => {
                self.sets_variables(name, args, depth)
            }
            "let" => self.let_builtin(args),
            n if SHELLS.contains(&n) => self.shell(name, args, depth),
            "compgen" | "complete" => builtins::completion(name, args),
            _ => self.other(name, argv, depth),
        }
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
            interpreters::subcommand(name, args)?;
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
                self.patterns(args);
                Ok(Step::Itself)
            }
            "make" | "gmake" => {
                scripts::make(name, args)?;
                Ok(Step::Itself)
            }
            "sqlite3" | "psql" | "mysql" | "mariadb" => sql_client(name, args),
            _ => Ok(Step::Itself),
        }
    }
}

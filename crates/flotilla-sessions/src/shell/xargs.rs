//! Commands that run another command once per input, with arguments known only at
//! run time: `xargs CMD` (what it reads is one more run-time word of `CMD`) and
//! `find … -exec CMD` (its commands, `open_ended` with `+`).

use super::options::{scan, OptSpec};
use super::programs;
use super::step::Step;
use super::walker::Walker;
use super::Arg;

/// `xargs [options] [CMD…]`: the command it runs (`echo` without one), with the words
/// it reads as a run-time word, or `-I`'s replacement words made run-time words.
pub(super) fn xargs(args: &[Arg]) -> Result<Step, String> {
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
pub(super) const XARGS_INPUT: &str = "…";

impl Walker {
    /// `find`: its options are checked and the commands of its `-exec`s walked; it is
    /// itself the command.
    pub(super) fn find(&mut self, argv: &[Arg], depth: usize) -> Result<Step, String> {
        let name = "find";
        let args = &argv[1..];
        programs::check(name, args)?;
        self.find_exec(argv, depth);
        Ok(Step::Itself)
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

//! The walker's state, and what every part of the walk shares: parsing a string as
//! commands (the line itself, a substitution, a command string a program runs), the
//! commands found.

use brush_parser::{Parser, ParserOptions};

use super::{prescan, writes, Analysis, Arg, SimpleCommand, Unparsed, MAX_DEPTH};

/// The walk over one command line: what it found so far, and what it remembers to
/// judge the rest.
pub(super) struct Walker {
    /// What was found so far.
    pub(super) out: Analysis,
    /// The parser's options (its defaults).
    pub(super) opts: ParserOptions,
    /// The source texts being walked, innermost last (locations index into them).
    pub(super) sources: Vec<String>,
    /// Argument words consumed as code the gate parsed or checked (`sh -c STRING`, an
    /// awk program, a grep pattern): a `$(` or backtick in them is not a hidden
    /// substitution (see `Walker::word_marked`).
    pub(super) code: Vec<String>,
    /// Bodies of `$(cat <<'EOF' … EOF)` substitutions taken into a word's static value:
    /// text the gate knows, never run, so not checked for `$(` (see
    /// `static_heredoc_cat` in `words.rs`).
    pub(super) static_bodies: Vec<String>,
    /// Word values marked only because of such a body (`git commit -m "$(cat <<'EOF'`
    /// … `` `x` `` … `EOF)"`): fine as an argument of a program that is not a shell
    /// builtin (it cannot evaluate arithmetic), see `Walker::simple`.
    pub(super) body_marked: Vec<String>,
    /// What the line writes (see `writes.rs`).
    pub(super) writes: writes::Writes,
}

impl Walker {
    /// A walker that has seen nothing yet.
    pub(super) fn new() -> Self {
        Walker {
            out: Analysis::default(),
            opts: ParserOptions::default(),
            sources: Vec::new(),
            static_bodies: Vec::new(),
            body_marked: Vec::new(),
            code: Vec::new(),
            writes: writes::Writes::default(),
        }
    }

    /// The analysis of the walked line, with what it writes and then runs checked.
    pub(super) fn finish(mut self) -> Analysis {
        writes::check(&mut self.out, &self.writes);
        self.out
    }

    /// Records something that could hide what runs.
    pub(super) fn unparsed(&mut self, reason: impl Into<String>) {
        self.out.unparsed.push(Unparsed {
            reason: reason.into(),
        });
    }

    /// Parses `src` as commands and walks them (the line, a substitution, a command
    /// string), at most [`MAX_DEPTH`] levels deep.
    pub(super) fn program(&mut self, src: &str, depth: usize) {
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

    /// Records one command the line runs (`written`: the words as written, wrappers
    /// included).
    pub(super) fn emit(
        &mut self,
        argv: Vec<Arg>,
        written: &[Arg],
        wrappers: &[String],
        open_ended: bool,
    ) {
        self.writes.at = self.out.commands.len();
        self.writes.command(&argv);
        self.out.commands.push(SimpleCommand {
            argv,
            written: written.to_vec(),
            wrappers: wrappers.to_vec(),
            open_ended,
        });
    }

    /// Records a wrapper that stays visible as a command of its own (`sudo`, `su`).
    pub(super) fn emit_visible(&mut self, argv: &[Arg]) {
        self.emit(argv.to_vec(), argv, &[], false);
    }

    /// Parses `script` as the commands an argument runs, and records the argument as
    /// consumed code.
    pub(super) fn code(&mut self, script: &str, depth: usize) {
        self.code.push(script.to_string());
        self.program(script, depth + 1);
    }

    /// Words run as one command line (`watch a b`, `sg g a b`): joined with spaces and
    /// parsed; every word is consumed code.
    pub(super) fn code_joined(
        &mut self,
        name: &str,
        words: &[Arg],
        depth: usize,
    ) -> Result<(), String> {
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
}

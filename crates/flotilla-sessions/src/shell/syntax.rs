//! The walk over brush's syntax tree: lists and pipelines, compound commands (their
//! bodies, loop words, `case` patterns, `(( … ))`), function bodies, `[[ … ]]`,
//! redirections and here-documents, and simple commands (prefix, name and suffix).

use brush_parser::{ast, word};

use super::builtins::BASH_BUILTINS;
use super::interpreters::interpreter;
use super::runners::is_code_runner;
use super::shells::SHELLS;
use super::walker::Walker;
use super::words::{has_substitution_text, is_arithmetic, marked_reason};
use super::{Arg, MAX_DEPTH};

impl Walker {
    pub(super) fn list(&mut self, list: &ast::CompoundList, depth: usize) {
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

    /// A simple command: its words (a marked word is unparsed unless consumed as code
    /// the gate parsed), seen through its wrappers.
    pub(super) fn simple(&mut self, simple: &ast::SimpleCommand, depth: usize) {
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
                    // checked with the program, see `Walker::wrapper`).
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
}

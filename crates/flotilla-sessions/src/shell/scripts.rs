//! Programs whose argument is a small program the gate reads: awk (a program that can
//! run commands, `system`, pipes, `getline`, or one read from a file is unparsed) and
//! GNU sed (the `e` command and `s///e` flag, or a script read from a file). Also grep
//! patterns (matched, never run: consumed as checked code) and make (`--eval`, `-E` and
//! a `SHELL=` on the command line run code).

use super::options::could_name;
use super::variables::MAKE_VARS;
use super::walker::Walker;
use super::Arg;

impl Walker {
    /// awk: a program that can run commands (`system(…)`, pipes to or from commands,
    /// `getline`, `@load`/`@include`), or one known only at run time, is unparsed;
    /// `-l`/`--load` loads a shared library. The program text is consumed code.
    pub(super) fn awk(&mut self, name: &str, args: &[Arg]) -> Result<(), String> {
        let mut programs: Vec<&Arg> = Vec::new();
        let mut i = 0;
        while i < args.len() {
            let a = match &args[i] {
                Arg::Literal(a) => a.as_str(),
                Arg::Dynamic(d) if programs.is_empty() => {
                    return Err(format!("`{name}` program `{d}` is known only at run time"))
                }
                Arg::Dynamic(_) => break,
            };
            if a == "--" {
                i += 1;
                break;
            }
            if let Some(long) = a.strip_prefix("--") {
                let (n, inline) = match long.split_once('=') {
                    Some((n, v)) => (n, Some(v)),
                    None => (long, None),
                };
                // gawk takes any unambiguous prefix (`--so` is `--source`).
                if let Some(o) = ["load", "file", "exec", "include"]
                    .into_iter()
                    .find(|o| could_name(n, o))
                {
                    return Err(format!(
                        "`{name} {a}` (`--{o}`) runs a program file or library the gate \
                         cannot see"
                    ));
                }
                let source = could_name(n, "source");
                let takes = source || could_name(n, "field-separator") || could_name(n, "assign");
                if takes && inline.is_none() {
                    i += 1;
                }
                if source {
                    programs.push(match inline {
                        Some(_) => &args[i],
                        None => args.get(i).unwrap_or(&args[i - 1]),
                    });
                }
                i += 1;
                continue;
            }
            if a.len() > 1 && a.starts_with('-') {
                let flag = a.chars().nth(1).unwrap_or(' ');
                let attached = a.len() > 2;
                match flag {
                    'l' => return Err(format!("`{name} -l` loads a shared library")),
                    'f' | 'E' | 'i' => {
                        return Err(format!(
                            "`{name} -{flag}` runs a program file the gate cannot see"
                        ))
                    }
                    'F' | 'v' | 'e' | 'W' => {
                        if !attached {
                            i += 1;
                        }
                        if flag == 'e' {
                            programs.push(args.get(i).unwrap_or(&args[i - 1]));
                        }
                        if flag == 'W' {
                            let w = if attached {
                                &a[2..]
                            } else {
                                args.get(i).and_then(Arg::literal).unwrap_or("")
                            };
                            let n = w.split('=').next().unwrap_or(w);
                            if ["load", "file", "exec", "include", "source"]
                                .into_iter()
                                .any(|o| could_name(n, o))
                            {
                                return Err(format!(
                                    "`{name} -W {w}` runs a program the gate does not check"
                                ));
                            }
                        }
                    }
                    _ => {}
                }
                i += 1;
                continue;
            }
            break;
        }
        if programs.is_empty() {
            match args.get(i) {
                Some(p) => programs.push(p),
                None => return Ok(()),
            }
        }
        for p in programs {
            match p {
                Arg::Literal(text) => {
                    if let Some(why) = awk_runs_commands(text) {
                        return Err(format!("the {name} program {why}"));
                    }
                    if awk_writes_files(text) {
                        // `print … > FILE`: a file written under a name the gate does
                        // not work out.
                        self.writes.at = self.out.commands.len();
                        self.writes
                            .redirect(&Arg::Dynamic(format!("{name} output")));
                    }
                    self.code.push(text.clone());
                }
                Arg::Dynamic(d) => {
                    return Err(format!("`{name}` program `{d}` is known only at run time"))
                }
            }
        }
        Ok(())
    }

    /// GNU sed: a script with the `e` command or the `s///e` flag runs commands; one
    /// known only at run time is unparsed. `--sandbox` forbids both. The script is
    /// consumed code.
    pub(super) fn sed(&mut self, name: &str, args: &[Arg]) -> Result<(), String> {
        let mut scripts: Vec<&Arg> = Vec::new();
        let mut inline_scripts: Vec<String> = Vec::new();
        // Files the scripts write (`w FILE`, `s/a/b/w FILE`).
        let mut written: Vec<String> = Vec::new();
        let mut from_flag = false;
        let mut sandbox = false;
        let mut first_operand: Option<&Arg> = None;
        let mut i = 0;
        let mut options_done = false;
        while i < args.len() {
            let a = &args[i];
            let text = a.as_text();
            if options_done || !text.starts_with('-') || text == "-" {
                if first_operand.is_none() {
                    first_operand = Some(a);
                }
                i += 1;
                continue;
            }
            if let Arg::Dynamic(d) = a {
                return Err(format!("`{name}` option `{d}` is known only at run time"));
            }
            if text == "--" {
                options_done = true;
            } else if let Some(long) = text.strip_prefix("--") {
                let (n, inline) = match long.split_once('=') {
                    Some((n, v)) => (n, Some(v)),
                    None => (long, None),
                };
                // getopt_long takes any unambiguous prefix (`--expr`, `--e`).
                if could_name(n, "file") {
                    return Err(format!(
                        "`{name} {text}` runs a script file the gate cannot see"
                    ));
                }
                if could_name(n, "expression") {
                    from_flag = true;
                    match inline {
                        Some(v) => {
                            inline_scripts.push(v.to_string());
                            self.code.push(text.to_string());
                        }
                        None => {
                            i += 1;
                            if let Some(s) = args.get(i) {
                                scripts.push(s);
                            }
                        }
                    }
                } else if could_name(n, "line-length") && inline.is_none() {
                    i += 1;
                } else if n.len() >= 2 && could_name(n, "sandbox") {
                    sandbox = true;
                }
            } else {
                for (pos, ch) in text[1..].char_indices() {
                    let tail = &text[1 + pos + ch.len_utf8()..];
                    match ch {
                        'f' => {
                            return Err(format!(
                                "`{name} {text}` runs a script file the gate cannot see"
                            ))
                        }
                        'e' | 'l' => {
                            if ch != 'l' {
                                from_flag = true;
                            }
                            if tail.is_empty() {
                                i += 1;
                                if ch == 'e' {
                                    if let Some(s) = args.get(i) {
                                        scripts.push(s);
                                    }
                                }
                            } else if ch == 'e' {
                                scripts.push(a);
                            }
                            break;
                        }
                        'i' => break,
                        _ => {}
                    }
                }
            }
            i += 1;
        }
        if !from_flag {
            if let Some(s) = first_operand {
                scripts.push(s);
            }
        }
        for script in &inline_scripts {
            if !sandbox && sed_runs_commands(script, &mut written) {
                return Err(format!(
                    "the {name} script `{script}` can run commands (`e`, `s///e`)"
                ));
            }
        }
        for s in scripts {
            match s {
                Arg::Literal(text) => {
                    // `-e SCRIPT` attached: the script follows the option letters.
                    let script = if let Some(s) = text.strip_prefix("--expression=") {
                        s
                    } else if text.starts_with('-') && !text.starts_with("--") {
                        text.split_once('e').map_or("", |(_, s)| s)
                    } else {
                        text.as_str()
                    };
                    if !sandbox && sed_runs_commands(script, &mut written) {
                        return Err(format!(
                            "the {name} script `{script}` can run commands (`e`, `s///e`)"
                        ));
                    }
                    self.code.push(text.clone());
                }
                Arg::Dynamic(d) => {
                    return Err(format!("`{name}` script `{d}` is known only at run time"))
                }
            }
        }
        for w in written {
            self.writes.at = self.out.commands.len();
            self.writes.redirect(&Arg::Literal(w));
        }
        Ok(())
    }

    /// grep and ripgrep: a pattern is matched, never run or printed, so a `$(` in it is
    /// plain text (every static argument is consumed as code the gate checked).
    pub(super) fn patterns(&mut self, args: &[Arg]) {
        // A pattern is matched, never run or printed: `$(` in it is plain text.
        self.code
            .extend(args.iter().filter_map(Arg::literal).map(str::to_string));
    }
}

/// make: `--eval`/`-E` evaluate code from the command line, and `SHELL=` (or a make
/// option variable) changes the shell recipes run with.
pub(super) fn make(name: &str, args: &[Arg]) -> Result<(), String> {
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
            && (matches!(var, "SHELL" | ".SHELLFLAGS" | "MAKESHELL") || MAKE_VARS.contains(&var))
        {
            return Err(format!(
                "`{name} {t}` changes the shell make runs recipes with"
            ));
        }
    }
    Ok(())
}

/// Whether an awk program could write a file: `print`/`printf` redirected with `>` or
/// `>>` (a comparison after `print` counts too: the stricter reading).
fn awk_writes_files(program: &str) -> bool {
    program.match_indices("print").any(|(at, _)| {
        program[at..]
            .split(['\n', ';', '}'])
            .next()
            .is_some_and(|statement| statement.contains('>'))
    })
}

/// Why an awk program can run commands, if it can.
fn awk_runs_commands(program: &str) -> Option<&'static str> {
    if program.contains("system") {
        return Some("calls `system`");
    }
    if program.contains("getline") {
        return Some("uses `getline`");
    }
    if program.contains('@') {
        return Some("uses an `@` directive (`@load`, `@include`)");
    }
    let b = program.as_bytes();
    let lone_pipe = (0..b.len())
        .any(|i| b[i] == b'|' && (i == 0 || b[i - 1] != b'|') && b.get(i + 1) != Some(&b'|'));
    lone_pipe.then_some("pipes to or from a command (`|`)")
}

/// Whether a GNU sed script could run a command: the `e` command or the `s///e` flag.
/// Anything this reader does not understand counts as yes.
fn sed_runs_commands(script: &str, writes: &mut Vec<String>) -> bool {
    let c: Vec<char> = script.chars().collect();
    let n = c.len();
    let mut i = 0;
    // Skips a regex delimited by `d` (escapes and bracket expressions honoured); false
    // if unterminated.
    let skip_regex = |i: &mut usize, d: char| -> bool {
        while *i < n && c[*i] != d {
            match c[*i] {
                '\\' => *i += 2,
                '[' => {
                    *i += 1;
                    if *i < n && c[*i] == '^' {
                        *i += 1;
                    }
                    if *i < n && c[*i] == ']' {
                        *i += 1;
                    }
                    while *i < n && c[*i] != ']' {
                        if c[*i] == '[' && *i + 1 < n && ".:=".contains(c[*i + 1]) {
                            let close = c[*i + 1];
                            *i += 2;
                            while *i + 1 < n && !(c[*i] == close && c[*i + 1] == ']') {
                                *i += 1;
                            }
                            *i += 2;
                        } else {
                            *i += 1;
                        }
                    }
                    *i += 1;
                }
                _ => *i += 1,
            }
        }
        if *i >= n {
            return false;
        }
        *i += 1;
        true
    };
    let skip_plain = |i: &mut usize, d: char| -> bool {
        while *i < n && c[*i] != d {
            *i += if c[*i] == '\\' { 2 } else { 1 };
        }
        if *i >= n {
            return false;
        }
        *i += 1;
        true
    };
    let to_eol = |i: &mut usize| {
        while *i < n && c[*i] != '\n' {
            *i += if c[*i] == '\\' { 2 } else { 1 };
        }
    };
    let to_end = |i: &mut usize| {
        while *i < n && c[*i] != '\n' && c[*i] != ';' {
            *i += 1;
        }
    };
    let address = |i: &mut usize| -> Option<bool> {
        if *i >= n {
            return Some(false);
        }
        match c[*i] {
            '0'..='9' => {
                while *i < n && (c[*i].is_ascii_digit() || c[*i] == '~') {
                    *i += 1;
                }
            }
            '$' => *i += 1,
            '/' => {
                *i += 1;
                if !skip_regex(i, '/') {
                    return None;
                }
                while *i < n && (c[*i] == 'I' || c[*i] == 'M') {
                    *i += 1;
                }
            }
            '\\' => {
                if *i + 1 >= n {
                    return None;
                }
                let d = c[*i + 1];
                *i += 2;
                if !skip_regex(i, d) {
                    return None;
                }
                while *i < n && (c[*i] == 'I' || c[*i] == 'M') {
                    *i += 1;
                }
            }
            _ => return Some(false),
        }
        Some(true)
    };
    loop {
        while i < n && (c[i].is_whitespace() || c[i] == ';') {
            i += 1;
        }
        if i >= n {
            return false;
        }
        match address(&mut i) {
            None => return true,
            Some(true) => {
                if i < n && c[i] == ',' {
                    i += 1;
                    if i < n && (c[i] == '+' || c[i] == '~') {
                        i += 1;
                    }
                    if address(&mut i) != Some(true) {
                        return true;
                    }
                }
            }
            Some(false) => {}
        }
        while i < n && (c[i] == ' ' || c[i] == '\t' || c[i] == '!') {
            i += 1;
        }
        if i >= n {
            return true;
        }
        let cmd = c[i];
        i += 1;
        match cmd {
            '{' | '}' | '=' | 'd' | 'D' | 'g' | 'G' | 'h' | 'H' | 'x' | 'n' | 'N' | 'p' | 'P'
            | 'z' | 'F' => {}
            'w' | 'W' => {
                let start = i;
                to_eol(&mut i);
                writes.push(
                    c[start..i.min(n)]
                        .iter()
                        .collect::<String>()
                        .trim()
                        .to_string(),
                );
            }
            '#' | 'a' | 'i' | 'c' | 'r' | 'R' => to_eol(&mut i),
            ':' | 'b' | 't' | 'T' | 'v' => to_end(&mut i),
            'q' | 'Q' | 'l' | 'L' => {
                while i < n && (c[i] == ' ' || c[i].is_ascii_digit()) {
                    i += 1;
                }
            }
            'y' => {
                if i >= n || c[i] == '\n' || c[i] == '\\' {
                    return true;
                }
                let d = c[i];
                i += 1;
                if !skip_plain(&mut i, d) || !skip_plain(&mut i, d) {
                    return true;
                }
            }
            's' => {
                if i >= n || c[i] == '\n' || c[i] == '\\' {
                    return true;
                }
                let d = c[i];
                i += 1;
                if !skip_regex(&mut i, d) || !skip_plain(&mut i, d) {
                    return true;
                }
                while i < n && !matches!(c[i], ';' | '\n' | '}') {
                    match c[i] {
                        'e' => return true,
                        'w' | 'W' => {
                            let start = i + 1;
                            to_eol(&mut i);
                            writes.push(
                                c[start.min(n)..i.min(n)]
                                    .iter()
                                    .collect::<String>()
                                    .trim()
                                    .to_string(),
                            );
                            break;
                        }
                        'g' | 'p' | 'i' | 'I' | 'm' | 'M' | ' ' | '\t' | '0'..='9' => i += 1,
                        _ => return true,
                    }
                }
            }
            // `e`, and anything unknown.
            _ => return true,
        }
    }
}

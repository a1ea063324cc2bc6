//! Shells: those whose grammar is bash's have their `-c` string parsed again
//! ([`SHELLS`]); the others, versioned names and anything a shell reads from standard
//! input or a script are unparsed.

use super::step::Step;
use super::walker::Walker;
use super::Arg;

/// Shells whose `-c STRING` is parsed again, as bash (bash's own grammar is the one
/// the parser knows; `sh` and `dash` are a subset of it for what matters here).
pub const SHELLS: &[&str] = &["sh", "bash", "rbash", "dash"];

/// Shells whose grammar is not bash's, or differs from it where it matters (`zsh`
/// expands `=cmd`, has its own globbing qualifiers that run code, `ksh` and `mksh`
/// differ in quoting), and command languages of their own: whatever they run is
/// unparsed.
pub(super) const OTHER_SHELLS: &[&str] = &[
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

impl Walker {
    /// A shell of [`SHELLS`]: its `-c` string is parsed; a script, standard input or
    /// an rc file is code the gate cannot see.
    pub(super) fn shell(&mut self, name: &str, args: &[Arg], depth: usize) -> Result<Step, String> {
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
}

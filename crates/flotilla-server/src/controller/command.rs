//! The equivalent `flotilla` command lines of an operation shown in a face: what a
//! person would type in a terminal to do the same (pure).
//!
//! The CLI plans from an inventory file, not from the authority's selection, so the
//! lines come with the revision that file must be: planned from another one, the
//! plan differs (and `apply` refuses it as stale).

use flotilla_plan::Operation;

/// What to type for an operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Equivalent {
    /// Plans and applies in one go: `flotilla --server URL start llama`.
    pub run: String,
    /// Exactly this plan, reviewed then applied: `flotilla --server URL plan start
    /// llama --json > plan.json && flotilla --server URL apply plan.json`.
    pub exact: String,
    /// Where to run them: in the directory of the inventory published as `revision`.
    pub note: String,
}

/// The command lines of `op` typed as `typed` (`start`, `up`…) against the authority
/// at `server` (its public URL), planned on `revision` (`sha256:…`).
pub fn equivalent(op: &Operation, typed: &str, server: &str, revision: &str) -> Equivalent {
    let through = |line: String| with_server(&line, server);
    let server = shlex::try_quote(server)
        .map(|s| s.into_owned())
        .unwrap_or_else(|_| server.to_string());
    let quoted = Operation {
        target: shlex::try_quote(&op.target)
            .map(|s| s.into_owned())
            .unwrap_or_else(|_| op.target.clone()),
        ..op.clone()
    };
    let short = revision.get(..19).unwrap_or(revision);
    Equivalent {
        run: through(quoted.typed_as(typed)),
        exact: format!(
            "{} --json > plan.json && flotilla --server {server} apply plan.json",
            through(quoted.typed_as(&format!("plan {typed}")))
        ),
        note: format!(
            "Run them in the directory of the inventory published as revision {short}… (`flotilla topology` ends with an inventory's digest; `flotilla config history` names the selected revision): the CLI plans from that file."
        ),
    }
}

/// `line` (a `flotilla …` command line) run through the authority at `server`
/// (quoted for a POSIX shell): `flotilla --server URL …`.
pub fn with_server(line: &str, server: &str) -> String {
    let server = shlex::try_quote(server).map_or_else(|_| server.to_string(), |s| s.into_owned());
    line.replacen("flotilla ", &format!("flotilla --server {server} "), 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_plan::Verb;

    #[test]
    fn the_cli_spellings_with_the_server_and_quoted_names() {
        let mut op = Operation::new(Verb::Stop, "llm");
        op.cascade = true;
        let e = equivalent(
            &op,
            "stop",
            "https://127.0.0.1:7443",
            "sha256:0123456789abcdef0123",
        );
        assert_eq!(
            e.run,
            "flotilla --server https://127.0.0.1:7443 stop llm --cascade"
        );
        assert_eq!(
            e.exact,
            "flotilla --server https://127.0.0.1:7443 plan stop llm --cascade --json > plan.json && flotilla --server https://127.0.0.1:7443 apply plan.json"
        );
        assert!(e.note.contains("sha256:0123456789ab…"), "{}", e.note);
        let odd = equivalent(
            &Operation::new(Verb::Start, "a b;rm"),
            "up",
            "https://x",
            "sha256:1",
        );
        assert_eq!(odd.run, "flotilla --server https://x up 'a b;rm'");
    }
}

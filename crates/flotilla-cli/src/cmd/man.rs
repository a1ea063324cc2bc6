//! `flotilla man [SUBCOMMAND…] [--dir DIR]`: the manual page (roff, generated from
//! the command line's own definition by clap_mangen), of flotilla or of one
//! subcommand; `--dir` writes every page (`flotilla.1`, `flotilla-up.1`…) there.

use crate::{EXIT_OK, EXIT_USAGE};
use std::io::Write;
use std::path::PathBuf;

/// Arguments of `flotilla man`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A subcommand (`up`, or `host check`): print its page instead.
    #[arg(value_name = "SUBCOMMAND")]
    pub command: Vec<String>,
    /// Write every page (flotilla.1, flotilla-SUBCOMMAND.1…) into this directory
    /// instead, e.g. ~/.local/share/man/man1, and list the files written.
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    pub dir: Option<PathBuf>,
}

/// Runs the subcommand; returns the exit status.
pub fn run(args: &Args) -> anyhow::Result<u8> {
    let mut cmd = crate::command().disable_help_subcommand(true);
    cmd.build();
    if let Some(dir) = &args.dir {
        std::fs::create_dir_all(dir)?;
        let mut written = Vec::new();
        write_all(&cmd, dir, &mut written)?;
        for p in written {
            println!("{}", p.display());
        }
        return Ok(EXIT_OK);
    }
    let mut page = &cmd;
    for word in &args.command {
        match page.find_subcommand(word) {
            Some(sub) if !sub.is_hide_set() => page = sub,
            _ => {
                let mut subs: Vec<&clap::Command> = page
                    .get_subcommands()
                    .filter(|s| !s.is_hide_set())
                    .collect();
                subs.sort_by_key(|s| s.get_display_order());
                let names: Vec<&str> = subs.iter().map(|s| s.get_name()).collect();
                let suggestion = flotilla_model::diag::did_you_mean(word, names.iter().copied())
                    .map(|s| format!("; did you mean `{s}`?"))
                    .unwrap_or_default();
                eprintln!(
                    "error: `{word}` is not a subcommand of `{}`{suggestion}\n  subcommands: {}",
                    page.get_display_name().unwrap_or(page.get_name()),
                    names.join(", ")
                );
                return Ok(EXIT_USAGE);
            }
        }
    }
    std::io::stdout().lock().write_all(&render(page)?)?;
    Ok(EXIT_OK)
}

/// The page of `cmd` (built), with `.TH` as its first line: clap_mangen puts the
/// definition of the `Aq` (apostrophe) string first, which may as well follow the
/// title (it is only used in the text after it), and a page that opens with `.TH` is
/// what `man`, `file` and packaging checks expect.
fn render(cmd: &clap::Command) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    man(cmd).render(&mut out)?;
    let mut text = String::from_utf8_lossy(&out).into_owned();
    if cmd.get_name() == "flotilla" {
        // The main page: the inventory's shape, examples and files, before VERSION.
        match text.find("\n.SH VERSION") {
            Some(i) => text.insert_str(i + 1, MAIN_SECTIONS),
            None => text.push_str(MAIN_SECTIONS),
        }
    }
    let Some(th) = text.lines().position(|l| l.starts_with(".TH ")) else {
        return Ok(out);
    };
    let mut lines: Vec<&str> = text.lines().collect();
    let title = lines.remove(th);
    lines.insert(0, title);
    let mut page = lines.join("\n");
    page.push('\n');
    Ok(page.into_bytes())
}

/// What the main page adds to clap's sections (roff): an inventory reference,
/// examples and the files Flotilla reads and writes.
const MAIN_SECTIONS: &str = r#".SH INVENTORY
\fIflotilla.toml\fR (or \fIflotilla.json\fR) declares the fleet once; \fBflotilla schema\fR prints its JSON Schema.
.TP
\fB[hosts.NAME]\fR
\fBtransport\fR = "local" | "ssh" | "agent"; \fBaddress\fR, \fBuser\fR for ssh.
.TP
\fB[components.NAME]\fR
\fBcommand\fR (argv list), \fBhost\fR, \fBadapter\fR ("process", "systemd", "launchd", "ssh-tunnel"), \fBowner\fR ("managed" | "external"), \fBenv\fR, \fBenv_file\fR, \fBinherit_env\fR, \fBendpoints\fR (name = "http://127.0.0.1:8080"), \fBdepends_on\fR (names), \fBconnections\fR, \fBreadiness\fR and \fBliveness\fR (\fBhttp\fR, \fBtcp\fR, \fBexec\fR, \fBrequest\fR, \fBlog\fR or \fBprocess\fR, with \fBperiod\fR, \fBtimeout\fR; \fBhttp\fR and \fBtcp\fR name an \fBendpoint\fR, or give \fBurl\fR = "http://127.0.0.1:8080/health" or \fBaddress\fR = "127.0.0.1:5432" inline), \fBstop\fR (\fBsignal\fR, \fBgrace_period\fR), \fBrestart\fR (\fBpolicy\fR = "on-failure" | "always" | "never", \fBbackoff\fR, \fBmax_restarts\fR), \fBtemplate\fR and \fBparams\fR.
.TP
\fB[stacks.NAME]\fR
\fBcomponents\fR (the members; their dependencies come along), \fBreadiness\fR (end-to-end probes).
.SH EXAMPLES
.nf
flotilla validate                 # check the inventory, with file:line:column errors
flotilla plan up chat             # what `up chat` would do, changing nothing
flotilla up chat                  # start the stack, each member proven ready
flotilla status -v                # every signal with its evidence
flotilla logs llm -f              # follow one component's log
flotilla restart llm --cascade    # restart it and what depends on it
flotilla down chat                # stop the stack in reverse start order
flotilla man --dir ~/.local/share/man/man1
.fi
.SH FILES
.TP
\fI./flotilla.toml\fR, \fI./flotilla.json\fR, \fI./templates/*.toml\fR
The inventory (\fB\-f\fR, \fBFLOTILLA_FILE\fR) and user templates beside it.
.TP
\fI$FLOTILLA_STATE_DIR\fR, else \fI$XDG_STATE_HOME/flotilla\fR, else \fI~/.local/state/flotilla\fR
The base state directory (\fB\-\-state\-dir\fR).
.TP
\fIBASE/projects/PROJECT/state.db\fR
The journal: operations, steps, instances, desired lifecycles, stack start orders (SQLite).
.TP
\fIBASE/projects/PROJECT/logs/COMPONENT.log\fR
A component's output, rotated (\fI.1\fR, \fI.2\fR…).
.TP
\fIBASE/projects/PROJECT/run/lifecycle.lock\fR
The lifecycle lock and its holder.
.TP
\fIBASE/secrets.env\fR
Secrets (NAME=value, mode 0600), shared by the projects.
.TP
\fIBASE/agent/\fR
\fBflotilla agent\fR's enrollment, status and update records.
.TP
\fIBASE/authority/\fR
\fBflotilla serve\fR's CA, database and operator credential.
.TP
\fIBASE/backups/\fR
Verified archives of \fBflotilla backup\fR and \fBflotilla serve backup\fR, and the automatic ones (before a migration, a self\-update).
"#;

/// The page of one command, whose footer names flotilla's version (clap_mangen would
/// name the subcommand's).
fn man(cmd: &clap::Command) -> clap_mangen::Man {
    clap_mangen::Man::new(cmd.clone()).source(format!("flotilla {}", env!("CARGO_PKG_VERSION")))
}

/// Writes the page of `cmd` and of each visible subcommand, depth first.
fn write_all(
    cmd: &clap::Command,
    dir: &std::path::Path,
    written: &mut Vec<PathBuf>,
) -> std::io::Result<()> {
    let m = man(cmd);
    let path = dir.join(m.get_filename());
    std::fs::write(&path, render(cmd)?)?;
    written.push(path);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_all(sub, dir, written)?;
    }
    Ok(())
}

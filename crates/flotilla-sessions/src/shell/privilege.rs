//! Privilege wrappers: `sudo`, `doas`, `su` and `runuser` stay visible as commands of
//! their own (without `su`'s command string) and the command they run is walked too;
//! `su -c`'s string is parsed like `sh -c`, `runuser -u USER CMD…` runs `CMD…`.

use super::options::{scan, scan_permuted, OptSpec};
use super::shells::SHELLS;
use super::step::Step;
use super::variables::is_name;
use super::walker::Walker;
use super::{basename, Arg};

impl Walker {
    /// `sudo` and `doas`: the wrapper stays visible, `VAR=value` operands are
    /// assignments, then the command it runs.
    pub(super) fn sudo(&mut self, name: &str, argv: &[Arg], depth: usize) -> Result<Step, String> {
        let args = &argv[1..];
        let spec = if name == "sudo" {
            OptSpec {
                short_value: "ugCDprtTUR",
                short_flags: "ABbEeHhiKklNnPSsVv",
                long_value: &[
                    "user",
                    "group",
                    "close-from",
                    "chdir",
                    "host",
                    "prompt",
                    "role",
                    "type",
                    "command-timeout",
                    "other-user",
                    "chroot",
                ],
                long_flags: &[
                    "askpass",
                    "bell",
                    "background",
                    "edit",
                    "set-home",
                    "login",
                    "remove-timestamp",
                    "reset-timestamp",
                    "list",
                    "no-update",
                    "non-interactive",
                    "preserve-groups",
                    "stdin",
                    "shell",
                    "validate",
                ],
                long_optional: &["preserve-env"],
                ..OptSpec::default()
            }
        } else {
            OptSpec {
                short_value: "aCu",
                short_flags: "LnSs",
                ..OptSpec::default()
            }
        };
        let o = match scan(name, args, &spec) {
            Ok(o) => o,
            Err(reason) => {
                // The privilege wrapper itself stays visible; what it runs is
                // unknown.
                self.emit_visible(argv);
                return Err(reason);
            }
        };
        if o.info || o.has_any("eKklLVv", &["edit", "list", "validate"]) {
            return Ok(Step::Itself);
        }
        let mut rest = &args[o.operands..];
        // sudo VAR=value … cmd
        while let Some(Arg::Literal(a)) = rest.first() {
            match a.split_once('=') {
                Some((var, value)) if is_name(var) => {
                    let value = Arg::Literal(value.to_string());
                    if let Err(reason) = self.assigned(var, Some(&value), depth) {
                        self.emit_visible(argv);
                        return Err(format!("`{name}`: {reason}"));
                    }
                    rest = &rest[1..];
                }
                _ => break,
            }
        }
        if rest.is_empty() {
            return Ok(Step::Itself);
        }
        Ok(Step::Visible {
            rest: rest.to_vec(),
            open_ended: false,
        })
    }

    /// `su` and `runuser`: the privilege wrapper stays visible (without its `-c`
    /// string), its `-c` string is parsed like `sh -c`; `runuser -u USER [--] CMD…`
    /// runs `CMD…`. Without a command they start a shell reading standard input.
    pub(super) fn su(&mut self, name: &str, argv: &[Arg], depth: usize) -> Result<Step, String> {
        let args = &argv[1..];
        let spec = OptSpec {
            short_value: if name == "runuser" { "cgGswu" } else { "cgGsw" },
            short_flags: "flmpP",
            long_value: &[
                "command",
                "session-command",
                "group",
                "supp-group",
                "shell",
                "whitelist-environment",
                "user",
            ],
            long_flags: &["login", "fast", "preserve-environment", "pty"],
            ..OptSpec::default()
        };
        let (o, operands) = match scan_permuted(name, args, &spec) {
            Ok(x) => x,
            Err(reason) => {
                self.emit_visible(argv);
                return Err(reason);
            }
        };
        if o.info {
            return Ok(Step::Itself);
        }
        let mut command: Option<Arg> = None;
        let mut visible = vec![argv[0].clone()];
        for (opt, value) in &o.seen {
            match opt.as_str() {
                "c" | "command" | "session-command" => command = value.clone(),
                "s" | "shell" => {
                    let ok = value
                        .as_ref()
                        .and_then(Arg::literal)
                        .is_some_and(|s| SHELLS.contains(&basename(s)));
                    if !ok {
                        self.emit_visible(argv);
                        return Err(format!(
                            "`{name}` runs the shell `{}`, which is not a known shell",
                            value.as_ref().map_or("", Arg::as_text)
                        ));
                    }
                }
                _ => {}
            }
        }
        let user_form = o.has_any("u", &["user"]);
        if name == "runuser" && user_form && command.is_none() {
            if operands.is_empty() {
                return Err("`runuser -u` without a command starts a shell".to_string());
            }
            return Ok(Step::Runs {
                rest: operands,
                open_ended: false,
            });
        }
        visible.extend(operands.iter().cloned());
        self.emit_visible(&visible);
        match command {
            Some(Arg::Literal(c)) => {
                self.code(&c, depth);
                Ok(Step::Consumed)
            }
            Some(Arg::Dynamic(d)) => Err(format!("`{name}` command `{d}` is not static")),
            None => Err(format!(
                "`{name}` without `-c` runs a shell reading standard input"
            )),
        }
    }
}

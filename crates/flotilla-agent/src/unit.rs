//! `flotilla agent unit`: the service definition that starts the agent at boot — a
//! systemd unit (Linux: a system unit for root, `User=` when asked; a user unit
//! otherwise) or a launchd LaunchAgent property list (macOS). Both run
//! the absolute path of the binary that printed them, restart the agent whenever it
//! exits, and leave the components running when the agent itself stops or restarts
//! (they run in their own sessions; the unit says `KillMode=process`, the plist
//! `AbandonProcessGroup`), so an agent restart restarts nothing.
//!
//! Sources: systemd.service(5), systemd.exec(5), systemd.kill(5) and systemd.syntax(7)
//! (quoting of `ExecStart=` arguments, `%` specifiers); launchd.plist(5) (`RunAtLoad`,
//! `KeepAlive`, `AbandonProcessGroup`, `StandardErrorPath`).

use std::path::{Path, PathBuf};

/// The systemd unit's file name.
pub const SYSTEMD_UNIT: &str = "flotilla-agent.service";

/// The launchd job's label (and the plist's file name without `.plist`).
pub const LAUNCHD_LABEL: &str = "dev.flotilla.agent";

/// What the service runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitSpec {
    /// The flotilla binary, absolute (`std::env::current_exe`).
    pub executable: PathBuf,
    /// Its arguments (`agent run --inventory /abs/flotilla.toml …`).
    pub args: Vec<String>,
    /// `PATH` for the agent and the components it starts: [`SERVICE_PATH`] with the
    /// binary's own directory first, never a copy of the invoking shell's (shims and
    /// per-user tool directories belong in a component's `env`).
    pub path_env: Option<String>,
    /// Where the unit goes: the system manager (run as root, or for `user`) or the
    /// invoking user's manager.
    pub scope: UnitScope,
    /// The command line that printed it, for the install comment.
    pub printed_by: String,
    /// Where its log goes under launchd (`<state>/agent/agent.log`); systemd keeps it
    /// in the journal.
    pub log_file: PathBuf,
    /// What it manages, for the description.
    pub what: String,
}

/// The directories a service's `PATH` holds (the Filesystem Hierarchy Standard's,
/// as systemd gives system services).
pub const SERVICE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Which systemd manager a unit is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnitScope {
    /// The system manager (`/etc/systemd/system`, `WantedBy=multi-user.target`),
    /// running the agent as root, or as `User=` when given.
    System {
        /// The user the agent runs as (`User=`); `None`: root.
        user: Option<String>,
    },
    /// The invoking user's manager (`~/.config/systemd/user`,
    /// `WantedBy=default.target`).
    User,
}

/// The arguments of `flotilla agent run` for a unit: the inventory (absolute) or
/// none (authority mode), the host, the base state directory and project when given.
pub fn run_args(
    inventory: Option<&Path>,
    host: &str,
    state_dir: Option<&Path>,
    project: Option<&str>,
) -> Vec<String> {
    let mut args: Vec<String> = vec!["agent".into(), "run".into()];
    if let Some(i) = inventory {
        args.push("--inventory".into());
        args.push(i.display().to_string());
    }
    if host != "local" {
        args.push("--host".into());
        args.push(host.into());
    }
    if let Some(d) = state_dir {
        args.push("--state-dir".into());
        args.push(d.display().to_string());
    }
    if let Some(p) = project {
        args.push("--project".into());
        args.push(p.into());
    }
    args
}

/// One `ExecStart=` word (systemd.syntax(7)): double-quoted with `\` and `"` escaped
/// when it holds anything but plain characters; `%` doubled (specifiers) and `$`
/// doubled (no variable expansion).
pub fn systemd_word(s: &str) -> String {
    let s = s.replace('%', "%%").replace('$', "$$");
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@".contains(c));
    if plain {
        return s;
    }
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The systemd unit: a system unit (install it as
/// `/etc/systemd/system/flotilla-agent.service`) or a user unit
/// (`~/.config/systemd/user/flotilla-agent.service`), as [`UnitSpec::scope`] says.
pub fn systemd_unit(spec: &UnitSpec) -> String {
    let exec: Vec<String> = std::iter::once(spec.executable.display().to_string())
        .chain(spec.args.iter().cloned())
        .map(|a| systemd_word(&a))
        .collect();
    let printed_by = spec.printed_by.replace('\n', " ");
    let install = match &spec.scope {
        UnitScope::System { .. } => format!(
            "# Install (a system unit):\n\
             #   {printed_by} > /etc/systemd/system/{SYSTEMD_UNIT}\n\
             #   systemctl daemon-reload && systemctl enable --now {SYSTEMD_UNIT}\n"
        ),
        UnitScope::User => format!(
            "# Install (a user unit; `loginctl enable-linger $USER` starts it at boot without a login):\n\
             #   mkdir -p ~/.config/systemd/user\n\
             #   {printed_by} > ~/.config/systemd/user/{SYSTEMD_UNIT}\n\
             #   systemctl --user daemon-reload && systemctl --user enable --now {SYSTEMD_UNIT}\n"
        ),
    };
    let mut u = String::new();
    u.push_str(&format!(
        "# flotilla agent: {what}\n\
         {install}\
         # Each component it starts runs in a transient scope of its own\n\
         # (flotilla-<component>-<ms>.scope: `systemctl list-units 'flotilla-*'`), not in\n\
         # this unit's cgroup; KillMode=process leaves what it started without one\n\
         # running too when the agent stops or restarts.\n\
         [Unit]\n\
         Description=Flotilla agent ({what})\n\
         \n\
         [Service]\n\
         Type=exec\n\
         ExecStart={exec}\n",
        what = spec.what.replace('\n', " "),
        exec = exec.join(" "),
    ));
    if let UnitScope::System { user: Some(user) } = &spec.scope {
        u.push_str(&format!("User={}\n", systemd_word(user)));
    }
    if let Some(p) = &spec.path_env {
        u.push_str(&format!(
            "Environment={}\n",
            systemd_word(&format!("PATH={p}"))
        ));
    }
    u.push_str(
        "Restart=always\n\
         RestartSec=5s\n\
         # Components run in their own sessions: stopping or restarting the agent leaves them running.\n\
         KillMode=process\n\
         \n\
         [Install]\n",
    );
    u.push_str(match spec.scope {
        UnitScope::System { .. } => "WantedBy=multi-user.target\n",
        UnitScope::User => "WantedBy=default.target\n",
    });
    u
}

/// The launchd LaunchAgent property list (install it as
/// `~/Library/LaunchAgents/dev.flotilla.agent.plist`), XML.
pub fn launchd_plist(spec: &UnitSpec) -> String {
    use plist::{Dictionary, Value};
    let s = |v: &str| Value::String(v.to_string());
    let mut d = Dictionary::new();
    d.insert("Label".into(), s(LAUNCHD_LABEL));
    d.insert(
        "ProgramArguments".into(),
        Value::Array(
            std::iter::once(spec.executable.display().to_string())
                .chain(spec.args.iter().cloned())
                .map(Value::String)
                .collect(),
        ),
    );
    if let Some(p) = &spec.path_env {
        let mut env = Dictionary::new();
        env.insert("PATH".into(), s(p));
        d.insert("EnvironmentVariables".into(), Value::Dictionary(env));
    }
    d.insert("RunAtLoad".into(), Value::Boolean(true));
    d.insert("KeepAlive".into(), Value::Boolean(true));
    d.insert("AbandonProcessGroup".into(), Value::Boolean(true));
    let log = spec.log_file.display().to_string();
    d.insert("StandardOutPath".into(), s(&log));
    d.insert("StandardErrorPath".into(), s(&log));
    let mut out = Vec::new();
    Value::Dictionary(d)
        .to_writer_xml(&mut out)
        .expect("writing a plist to memory");
    let mut text = String::from_utf8(out).expect("plist XML is UTF-8");
    if !text.ends_with('\n') {
        text.push('\n');
    }
    let install = format!(
        "<!-- flotilla agent: {what}\n     Install: {printed_by} > ~/Library/LaunchAgents/{LAUNCHD_LABEL}.plist\n              launchctl bootstrap gui/$(id -u) ~/Library/LaunchAgents/{LAUNCHD_LABEL}.plist -->\n",
        what = spec.what.replace("--", "- -"),
        printed_by = spec.printed_by.replace("--", "- -"),
    );
    // After the XML declaration and DOCTYPE, before the top-level element.
    match text.find("<plist") {
        Some(i) => text.insert_str(i, &install),
        None => text.push_str(&install),
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> UnitSpec {
        UnitSpec {
            executable: "/opt/flo tilla/bin/flotilla".into(),
            args: run_args(
                Some(Path::new("/srv/my app/flotilla.toml")),
                "local",
                Some(Path::new("/var/lib/flotilla")),
                None,
            ),
            path_env: Some("/usr/bin:/bin".into()),
            scope: UnitScope::User,
            printed_by: "flotilla agent unit".into(),
            log_file: "/var/lib/flotilla/agent/agent.log".into(),
            what: "desired state from /srv/my app/flotilla.toml".into(),
        }
    }

    #[test]
    fn systemd_unit_runs_this_binary_restarts_and_leaves_components_alone() {
        let u = systemd_unit(&spec());
        assert!(
            u.contains("ExecStart=\"/opt/flo tilla/bin/flotilla\" agent run --inventory \"/srv/my app/flotilla.toml\" --state-dir /var/lib/flotilla\n"),
            "{u}"
        );
        for line in [
            "Restart=always\n",
            "KillMode=process\n",
            "WantedBy=default.target\n",
            "Environment=PATH=/usr/bin:/bin\n",
        ] {
            assert!(u.contains(line), "{line}: {u}");
        }
    }

    #[test]
    fn a_system_unit_is_wanted_by_multi_user_and_runs_as_the_user_asked() {
        let mut s = spec();
        s.scope = UnitScope::System {
            user: Some("ops".into()),
        };
        s.printed_by = "flotilla agent unit --user ops".into();
        let u = systemd_unit(&s);
        for line in [
            "User=ops\n",
            "WantedBy=multi-user.target\n",
            "#   flotilla agent unit --user ops > /etc/systemd/system/flotilla-agent.service\n",
            "#   systemctl daemon-reload && systemctl enable --now flotilla-agent.service\n",
        ] {
            assert!(u.contains(line), "{line}: {u}");
        }
        assert!(!u.contains("default.target"), "{u}");
        assert!(!u.contains("--user daemon-reload"), "{u}");
    }

    #[test]
    fn systemd_words_escape_specifiers_variables_and_quotes() {
        assert_eq!(systemd_word("/usr/bin/x"), "/usr/bin/x");
        assert_eq!(systemd_word("50%"), "\"50%%\"");
        assert_eq!(systemd_word("$HOME"), "\"$$HOME\"");
        assert_eq!(systemd_word("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(systemd_word(""), "\"\"");
    }

    #[test]
    fn launchd_plist_is_a_keepalive_launch_agent() {
        let p = launchd_plist(&spec());
        let v = plist::Value::from_reader_xml(p.as_bytes()).expect("valid plist XML");
        let d = v.as_dictionary().unwrap();
        assert_eq!(d["Label"].as_string(), Some(LAUNCHD_LABEL));
        assert_eq!(d["RunAtLoad"].as_boolean(), Some(true));
        assert_eq!(d["KeepAlive"].as_boolean(), Some(true));
        assert_eq!(d["AbandonProcessGroup"].as_boolean(), Some(true));
        let args: Vec<&str> = d["ProgramArguments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_string().unwrap())
            .collect();
        assert_eq!(
            args,
            [
                "/opt/flo tilla/bin/flotilla",
                "agent",
                "run",
                "--inventory",
                "/srv/my app/flotilla.toml",
                "--state-dir",
                "/var/lib/flotilla"
            ]
        );
    }
}

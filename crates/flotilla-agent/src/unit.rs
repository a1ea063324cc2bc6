//! `flotilla agent unit`: the service definition that starts the agent at boot — a
//! systemd user unit (Linux) or a launchd LaunchAgent property list (macOS). Both run
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
    /// `PATH` for the agent and the components it starts (a service manager's own
    /// `PATH` is minimal): the one of whoever printed the unit.
    pub path_env: Option<String>,
    /// Where its log goes under launchd (`<state>/agent/agent.log`); systemd keeps it
    /// in the journal.
    pub log_file: PathBuf,
    /// What it manages, for the description.
    pub what: String,
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

/// The systemd user unit (install it as
/// `~/.config/systemd/user/flotilla-agent.service`).
pub fn systemd_unit(spec: &UnitSpec) -> String {
    let exec: Vec<String> = std::iter::once(spec.executable.display().to_string())
        .chain(spec.args.iter().cloned())
        .map(|a| systemd_word(&a))
        .collect();
    let mut u = String::new();
    u.push_str(&format!(
        "# flotilla agent: {what}\n\
         # Install (a user unit; `loginctl enable-linger $USER` starts it at boot without a login):\n\
         #   mkdir -p ~/.config/systemd/user\n\
         #   flotilla agent unit > ~/.config/systemd/user/{SYSTEMD_UNIT}\n\
         #   systemctl --user daemon-reload && systemctl --user enable --now {SYSTEMD_UNIT}\n\
         [Unit]\n\
         Description=Flotilla agent ({what})\n\
         \n\
         [Service]\n\
         Type=exec\n\
         ExecStart={exec}\n",
        what = spec.what.replace('\n', " "),
        exec = exec.join(" "),
    ));
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
         [Install]\n\
         WantedBy=default.target\n",
    );
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
        "<!-- flotilla agent: {what}\n     Install: flotilla agent unit --launchd > ~/Library/LaunchAgents/{LAUNCHD_LABEL}.plist\n              launchctl bootstrap gui/$(id -u) ~/Library/LaunchAgents/{LAUNCHD_LABEL}.plist -->\n",
        what = spec.what.replace("--", "- -")
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

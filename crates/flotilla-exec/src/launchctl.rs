//! Pure helpers for the `launchd` adapter (macOS): the job property list Flotilla
//! writes and reads ([`JobPlist`]), the parse of `launchctl print <service-target>`
//! ([`parse_print`] → [`ServiceInfo`]), and launchctl's target specifiers
//! ([`domain_target`], [`service_target`]). Nothing here spawns a process; the
//! adapter runs `launchctl` and hands the text to these functions.
//!
//! Sources:
//! - launchd.plist(5) and launchctl(1): Apple's launchd-842 man pages as imported in
//!   `freebsd/openlaunchd` (`man/launchd.plist.5`, `launchctl/launchctl.1`); the
//!   current launchctl(1) at <https://man.imzye.com/MacOS/launchctl/>.
//! - The shape of `launchctl print` output: captured output of real macOS versions in
//!   `Alkenso/sLaunchctl` (`Tests/sLaunchctlTests/ServiceParsingTests.swift`: a
//!   `system/...` daemon with `endpoints` blocks and a `gui/501/...` agent that has
//!   exited), and in issue threads such as
//!   <https://github.com/openbase-community/openbase/pull/15> (`state = not running`,
//!   `last exit code = (never exited)`). Apple documents that this output "is NOT API"
//!   (launchctl(1)), so [`parse_print`] ignores every line it does not know.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::PathBuf;

use plist::{Dictionary, Value};

/// The `ProcessType` Flotilla writes into every job plist it generates.
///
/// launchd.plist(5): when `ProcessType` is left unspecified (or is `Standard`) "the
/// system will apply light resource limits to the job, throttling its CPU usage and
/// I/O bandwidth"; `Background` is throttled harder; `Interactive` jobs "run with the
/// same resource limitations as apps, that is to say, none". The services Flotilla
/// manages (model servers, gateways, agents) answer requests from people and other
/// services, so they must not be throttled: field reports measured the difference,
/// e.g. Metal decode 11 → 87 tokens/s for an inference server
/// (<https://github.com/dryvist/nix-ai/pull/916>), and slow CPU/IO-bound work under
/// the default class (<https://github.com/actions/runner/pull/614>,
/// <https://github.com/traycerai/traycer/pull/705>). Hence `Interactive`, not
/// `Adaptive` (which needs XPC transactions these services do not use).
pub const PROCESS_TYPE: &str = "Interactive";

/// A launchd job definition: the subset of launchd.plist(5) keys Flotilla writes and
/// understands.
///
/// [`JobPlist::to_xml`] writes exactly the keys `Label`, `ProgramArguments`,
/// `EnvironmentVariables` (when not empty), `WorkingDirectory`, `StandardOutPath`,
/// `StandardErrorPath` (each when set), `RunAtLoad`, `KeepAlive`, `ThrottleInterval`
/// (when set) and `ProcessType` (always [`PROCESS_TYPE`]). [`JobPlist::from_xml`] reads a user-supplied plist (XML
/// or binary); keys it does not model are ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPlist {
    /// `Label`: the job's name, unique within its launchd domain.
    pub label: String,
    /// `ProgramArguments`: argv, the program first (launchd passes it to
    /// `posix_spawnp`, so a program without `/` is looked up in the job's `PATH`).
    pub program_arguments: Vec<String>,
    /// `EnvironmentVariables`: the job's environment on top of what launchd gives
    /// every job (launchd does not pass the environment of whoever ran `launchctl`).
    pub environment: BTreeMap<String, String>,
    /// `WorkingDirectory`: launchd `chdir`s there before running the job.
    pub working_directory: Option<PathBuf>,
    /// `StandardOutPath`: stdout is appended to this file (else `/dev/null`).
    pub standard_out_path: Option<PathBuf>,
    /// `StandardErrorPath`: stderr is appended to this file (else `/dev/null`).
    pub standard_error_path: Option<PathBuf>,
    /// `RunAtLoad`: start the job when it is loaded (bootstrapped).
    pub run_at_load: bool,
    /// `KeepAlive`: whether launchd restarts the job when it exits.
    pub keep_alive: KeepAlive,
    /// `ThrottleInterval`: the least time between two spawns of the job, in seconds
    /// (launchd's default is 10 s), which paces `KeepAlive` restarts.
    pub throttle_interval: Option<u32>,
}

/// A job's `KeepAlive` (launchd.plist(5)): a boolean, or a dictionary of conditions
/// under which launchd keeps the job running.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KeepAlive {
    /// `false` (or absent): launchd runs the job when asked and leaves it exited.
    #[default]
    Never,
    /// `true`: launchd restarts the job whenever it exits.
    Always,
    /// `{ SuccessfulExit = false }`: launchd restarts the job after it exits with a
    /// non-zero status (or is killed by a signal), not after it exits 0.
    OnFailure,
    /// Any other dictionary of conditions (read from a user's plist, never written:
    /// [`JobPlist::to_xml`] writes it as `true`): launchd may restart the job.
    Conditions,
}

impl KeepAlive {
    /// Whether launchd may restart the job on its own.
    pub fn may_restart(self) -> bool {
        self != KeepAlive::Never
    }
}

/// Why a property list could not be read as a [`JobPlist`].
#[derive(Debug, thiserror::Error)]
pub enum PlistError {
    /// The bytes are not a property list (neither XML nor binary).
    #[error("not a property list: {0}")]
    Parse(#[source] plist::Error),
    /// The property list's top-level value is not a dictionary.
    #[error("the property list's top level is not a dictionary")]
    NotADictionary,
    /// A key launchd requires is missing (`Label`).
    #[error("the property list has no `{0}` key")]
    MissingKey(&'static str),
    /// A key has a value of the wrong type.
    #[error("`{key}` should be {expected}")]
    WrongType {
        /// The key, e.g. `RunAtLoad` or `EnvironmentVariables.PATH`.
        key: String,
        /// What launchd.plist(5) expects, e.g. "a boolean".
        expected: &'static str,
    },
    /// Neither `Program` nor a non-empty `ProgramArguments` says what to run.
    #[error("the property list has neither `Program` nor a non-empty `ProgramArguments`")]
    NoProgram,
    /// `Program` names another executable than `ProgramArguments[0]`: launchd would
    /// run `Program` with that argv, which a [`JobPlist`] cannot represent.
    #[error(
        "`Program` ({program}) differs from `ProgramArguments[0]` ({argv0}); \
         Flotilla only handles jobs whose argv[0] is the program"
    )]
    ProgramMismatch {
        /// The `Program` value.
        program: String,
        /// `ProgramArguments[0]`.
        argv0: String,
    },
}

impl JobPlist {
    /// This job as an XML property list (UTF-8, Apple's `PropertyList-1.0` DOCTYPE),
    /// with the keys listed on [`JobPlist`] in that order. Paths that are not valid
    /// UTF-8 are written lossily (a plist string cannot hold arbitrary bytes).
    pub fn to_xml(&self) -> Vec<u8> {
        let mut dict = Dictionary::new();
        let string = |s: &str| Value::String(s.to_string());
        let path = |p: &PathBuf| Value::String(p.to_string_lossy().into_owned());
        dict.insert("Label".into(), string(&self.label));
        dict.insert(
            "ProgramArguments".into(),
            Value::Array(self.program_arguments.iter().map(|a| string(a)).collect()),
        );
        if !self.environment.is_empty() {
            let env: Dictionary = self
                .environment
                .iter()
                .map(|(k, v)| (k.clone(), string(v)))
                .collect();
            dict.insert("EnvironmentVariables".into(), Value::Dictionary(env));
        }
        for (key, value) in [
            ("WorkingDirectory", &self.working_directory),
            ("StandardOutPath", &self.standard_out_path),
            ("StandardErrorPath", &self.standard_error_path),
        ] {
            if let Some(p) = value {
                dict.insert(key.into(), path(p));
            }
        }
        dict.insert("RunAtLoad".into(), Value::Boolean(self.run_at_load));
        let keep_alive = match self.keep_alive {
            KeepAlive::Never => Value::Boolean(false),
            KeepAlive::Always | KeepAlive::Conditions => Value::Boolean(true),
            KeepAlive::OnFailure => {
                let mut conditions = Dictionary::new();
                conditions.insert("SuccessfulExit".into(), Value::Boolean(false));
                Value::Dictionary(conditions)
            }
        };
        dict.insert("KeepAlive".into(), keep_alive);
        if let Some(t) = self.throttle_interval {
            dict.insert("ThrottleInterval".into(), Value::Integer(t.into()));
        }
        dict.insert("ProcessType".into(), string(PROCESS_TYPE));
        let mut out = Vec::new();
        Value::Dictionary(dict)
            .to_writer_xml(&mut out)
            .expect("writing a plist of strings, arrays and booleans to memory cannot fail");
        out.push(b'\n');
        out
    }

    /// Reads a job definition from a property list in any encoding the `plist` crate
    /// reads (XML or binary, as `plutil -convert binary1` writes it).
    ///
    /// `Program` without `ProgramArguments` becomes a one-element argv (launchd.plist(5):
    /// the program is "the first argument of execvp(3)"); both together must agree on
    /// argv[0]. `KeepAlive` may be a boolean or a dictionary of conditions (exactly
    /// `{ SuccessfulExit = false }` is [`KeepAlive::OnFailure`], any other
    /// [`KeepAlive::Conditions`]); `RunAtLoad` and `KeepAlive` default to `false`.
    ///
    /// # Errors
    /// [`PlistError`]: not a plist, not a dictionary, no `Label`, no program, a
    /// `Program` that is not argv[0], or a known key of the wrong type.
    pub fn from_xml(bytes: &[u8]) -> Result<JobPlist, PlistError> {
        let value = Value::from_reader(Cursor::new(bytes)).map_err(PlistError::Parse)?;
        let dict = value.into_dictionary().ok_or(PlistError::NotADictionary)?;
        let wrong = |key: &str, expected: &'static str| PlistError::WrongType {
            key: key.to_string(),
            expected,
        };
        let string = |key: &'static str| -> Result<Option<String>, PlistError> {
            match dict.get(key) {
                None => Ok(None),
                Some(v) => v
                    .as_string()
                    .map(|s| Some(s.to_string()))
                    .ok_or_else(|| wrong(key, "a string")),
            }
        };
        let boolean = |key: &'static str| -> Result<bool, PlistError> {
            match dict.get(key) {
                None => Ok(false),
                Some(v) => v.as_boolean().ok_or_else(|| wrong(key, "a boolean")),
            }
        };

        let label = string("Label")?.ok_or(PlistError::MissingKey("Label"))?;
        let program = string("Program")?;
        let mut program_arguments = match dict.get("ProgramArguments") {
            None => Vec::new(),
            Some(v) => v
                .as_array()
                .ok_or_else(|| wrong("ProgramArguments", "an array of strings"))?
                .iter()
                .map(|a| a.as_string().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| wrong("ProgramArguments", "an array of strings"))?,
        };
        match (program, program_arguments.first()) {
            (None, None) => return Err(PlistError::NoProgram),
            (Some(p), None) => program_arguments.push(p),
            (Some(p), Some(argv0)) if &p != argv0 => {
                return Err(PlistError::ProgramMismatch {
                    program: p,
                    argv0: argv0.clone(),
                })
            }
            _ => {}
        }

        let mut environment = BTreeMap::new();
        if let Some(v) = dict.get("EnvironmentVariables") {
            let env = v
                .as_dictionary()
                .ok_or_else(|| wrong("EnvironmentVariables", "a dictionary of strings"))?;
            for (k, v) in env {
                let v = v
                    .as_string()
                    .ok_or_else(|| wrong(&format!("EnvironmentVariables.{k}"), "a string"))?;
                environment.insert(k.clone(), v.to_string());
            }
        }
        let keep_alive = match dict.get("KeepAlive") {
            None | Some(Value::Boolean(false)) => KeepAlive::Never,
            Some(Value::Boolean(true)) => KeepAlive::Always,
            Some(Value::Dictionary(d))
                if d.len() == 1
                    && d.get("SuccessfulExit").and_then(Value::as_boolean) == Some(false) =>
            {
                KeepAlive::OnFailure
            }
            Some(Value::Dictionary(_)) => KeepAlive::Conditions,
            Some(_) => return Err(wrong("KeepAlive", "a boolean or a dictionary")),
        };
        let throttle_interval = match dict.get("ThrottleInterval") {
            None => None,
            Some(v) => Some(
                v.as_unsigned_integer()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| wrong("ThrottleInterval", "a number of seconds"))?,
            ),
        };

        Ok(JobPlist {
            label,
            program_arguments,
            environment,
            working_directory: string("WorkingDirectory")?.map(PathBuf::from),
            standard_out_path: string("StandardOutPath")?.map(PathBuf::from),
            standard_error_path: string("StandardErrorPath")?.map(PathBuf::from),
            run_at_load: boolean("RunAtLoad")?,
            keep_alive,
            throttle_interval,
        })
    }
}

/// What `launchctl print <domain>/<label>` says about one loaded service.
///
/// Every field is `None`/empty when its line is absent. Values are as printed, minus
/// surrounding whitespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceInfo {
    /// `state = …`: `running`, `not running`, `spawn scheduled` (waiting out the
    /// throttle before a KeepAlive respawn), `xpcproxy` (being spawned), …; empty when
    /// the line is missing.
    pub state: String,
    /// `pid = N`: the job's current process, when it has one.
    pub pid: Option<u32>,
    /// `last exit code = …` as printed, e.g. `0`, `1`, `78: EX_CONFIG`; `None` when the
    /// job has never exited (`(never exited)`) or the line is absent (launchd prints
    /// `last terminating signal` instead when a signal ended the last run).
    pub last_exit_code: Option<String>,
    /// `last terminating signal = …`, e.g. `Terminated: 15`, `Killed: 9`: the signal
    /// that ended the last run.
    pub last_terminating_signal: Option<String>,
    /// `runs = N`: how many times launchd has started the job since it was loaded.
    pub runs: Option<u32>,
    /// `program = …`: the executable launchd runs.
    pub program: Option<String>,
    /// The lines of the `arguments = { … }` block: the argv launchd runs, which is the
    /// one it cached when the job was loaded (not the plist on disk now). An argument's
    /// leading and trailing whitespace cannot be recovered (launchctl prints no quotes).
    pub arguments: Vec<String>,
    /// `path = …`: the plist the job was loaded from (or e.g. `(submitted by smd.500)`).
    pub path: Option<String>,
}

impl ServiceInfo {
    /// The leading integer of [`ServiceInfo::last_exit_code`] (`78: EX_CONFIG` → 78).
    pub fn last_exit_status(&self) -> Option<i32> {
        let code = self.last_exit_code.as_deref()?;
        let digits = code.split(':').next()?.trim();
        digits.parse().ok()
    }
}

/// Parses the output of `launchctl print <domain>/<label>`.
///
/// The format (see the module docs for sources): a header `<service-target> = {`, then
/// one `key = value` per line, tab-indented, with nested blocks `key = {` … `}` (e.g.
/// `arguments`, `environment`, `endpoints` with `"name" = {` entries, coalitions). Only
/// the service's own top-level keys are read (a coalition's `state = active` is not the
/// job's state); the `arguments` block's lines become [`ServiceInfo::arguments`]. Lines
/// that are not understood are ignored, and an excerpt without the header line (top-level
/// keys at the start) is read the same way. Never fails: what is not there is `None`.
pub fn parse_print(text: &str) -> ServiceInfo {
    let mut info = ServiceInfo::default();
    // The service's own keys sit inside the header block; in a headerless excerpt they
    // are at the top level.
    let top = match text.lines().map(str::trim).find(|l| !l.is_empty()) {
        Some(first) if first.ends_with('{') => 1,
        _ => 0,
    };
    let mut open: Vec<String> = Vec::new();
    for raw in text.lines() {
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        if line == "}" || line == "};" {
            open.pop();
            continue;
        }
        let in_arguments = open.len() == top + 1 && open.last().is_some_and(|b| b == "arguments");
        if in_arguments {
            info.arguments.push(line.to_string());
            continue;
        }
        if let Some(head) = line.strip_suffix('{') {
            let name = head
                .trim_end()
                .trim_end_matches('=')
                .trim()
                .trim_matches('"');
            open.push(name.to_string());
            continue;
        }
        if open.len() != top {
            continue;
        }
        let Some((key, value)) = line.split_once(" = ") else {
            continue;
        };
        let value = value.trim();
        match key.trim() {
            "state" => info.state = value.to_string(),
            "pid" => info.pid = value.parse().ok(),
            "runs" => info.runs = value.parse().ok(),
            "last exit code" => {
                info.last_exit_code = (value != "(never exited)").then(|| value.to_string())
            }
            "last terminating signal" => info.last_terminating_signal = Some(value.to_string()),
            "program" => info.program = Some(value.to_string()),
            "path" => info.path = Some(value.to_string()),
            _ => {}
        }
    }
    info
}

/// launchctl's domain target for jobs of user `uid`: `gui/<uid>` (the user's login
/// session, where LaunchAgents run), or `system` for uid 0 (LaunchDaemons). See the
/// "specifier" forms in launchctl(1).
pub fn domain_target(uid: u32) -> String {
    if uid == 0 {
        "system".to_string()
    } else {
        format!("gui/{uid}")
    }
}

/// launchctl's service target: `<domain>/<label>`, e.g. `gui/501/com.example.x`.
pub fn service_target(domain: &str, label: &str) -> String {
    format!("{}/{label}", domain.trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A LaunchAgent that is running, as macOS 14/15 prints it: written for this test
    /// in the layout of the captures in `Alkenso/sLaunchctl`
    /// (`Tests/sLaunchctlTests/ServiceParsingTests.swift`): header block, `arguments`,
    /// the three environment blocks, coalition blocks with their own `state`, and an
    /// `endpoints` block with quoted nested entries.
    const RUNNING_AGENT: &str = "gui/501/dev.flotilla.llama = {
\tactive count = 1
\tpath = /Users/ana/Library/LaunchAgents/dev.flotilla.llama.plist
\ttype = LaunchAgent
\tstate = running

\tprogram = /opt/homebrew/bin/llama-server
\targuments = {
\t\t/opt/homebrew/bin/llama-server
\t\t--port
\t\t8080
\t\t--model
\t\t/Users/ana/models/qwen.gguf
\t}

\tworking directory = /Users/ana

\tstdout path = /Users/ana/Library/Logs/llama.log
\tstderr path = /Users/ana/Library/Logs/llama.log
\tinherited environment = {
\t\tSSH_AUTH_SOCK => /private/tmp/com.apple.launchd.x1/Listeners
\t}

\tdefault environment = {
\t\tPATH => /usr/bin:/bin:/usr/sbin:/sbin
\t}

\tenvironment = {
\t\tLLAMA_ARG_CTX => 8192
\t\tXPC_SERVICE_NAME => dev.flotilla.llama
\t}

\tdomain = gui/501 [100003]
\tasid = 100003
\tminimum runtime = 10
\texit timeout = 5
\truns = 3
\tpid = 4242
\timmediate reason = speculative
\tforks = 0
\texecs = 1
\tlast exit code = 1

\tresource coalition = {
\t\tID = 1114
\t\ttype = resource
\t\tstate = active
\t\tactive count = 1
\t\tname = dev.flotilla.llama
\t}

\tendpoints = {
\t\t\"dev.flotilla.llama.xpc\" = {
\t\t\tport = 0x3a777
\t\t\tactive = 1
\t\t}
\t}

\tspawn type = interactive (4)
\tjob state = running

\tproperties = keepalive | runatload | inferred program
}
";

    /// A system daemon that was bootstrapped and stopped by a signal: no `pid`, a
    /// `last terminating signal` line instead of `last exit code` (the shape seen after
    /// `kickstart -k` in captured output), written for this test.
    const STOPPED_DAEMON: &str = "system/dev.flotilla.gateway = {
\tactive count = 0
\tpath = /Library/LaunchDaemons/dev.flotilla.gateway.plist
\ttype = LaunchDaemon
\tstate = not running

\tprogram = /usr/local/bin/gateway
\targuments = {
\t\t/usr/local/bin/gateway
\t\t--listen=127.0.0.1:9000
\t}

\tdefault environment = {
\t\tPATH => /usr/bin:/bin:/usr/sbin:/sbin
\t}

\tdomain = system
\tminimum runtime = 10
\texit timeout = 5
\truns = 1
\tlast terminating signal = Terminated: 15

\tspawn type = daemon (3)
\tjob state = exited
}
";

    #[test]
    fn parses_a_running_agent() {
        let info = parse_print(RUNNING_AGENT);
        assert_eq!(info.state, "running", "not a coalition's `state = active`");
        assert_eq!(info.pid, Some(4242));
        assert_eq!(info.runs, Some(3));
        assert_eq!(info.last_exit_code.as_deref(), Some("1"));
        assert_eq!(info.last_exit_status(), Some(1));
        assert_eq!(info.last_terminating_signal, None);
        assert_eq!(
            info.program.as_deref(),
            Some("/opt/homebrew/bin/llama-server")
        );
        assert_eq!(
            info.arguments,
            [
                "/opt/homebrew/bin/llama-server",
                "--port",
                "8080",
                "--model",
                "/Users/ana/models/qwen.gguf"
            ]
        );
        assert_eq!(
            info.path.as_deref(),
            Some("/Users/ana/Library/LaunchAgents/dev.flotilla.llama.plist")
        );
    }

    #[test]
    fn parses_a_stopped_daemon() {
        let info = parse_print(STOPPED_DAEMON);
        assert_eq!(info.state, "not running");
        assert_eq!(info.pid, None);
        assert_eq!(info.runs, Some(1));
        assert_eq!(info.last_exit_code, None);
        assert_eq!(
            info.last_terminating_signal.as_deref(),
            Some("Terminated: 15")
        );
        assert_eq!(
            info.arguments,
            ["/usr/local/bin/gateway", "--listen=127.0.0.1:9000"]
        );
        assert_eq!(
            info.path.as_deref(),
            Some("/Library/LaunchDaemons/dev.flotilla.gateway.plist")
        );
    }

    #[test]
    fn never_exited_named_codes_and_headless_excerpts() {
        let info = parse_print("\tstate = not running\n\tlast exit code = (never exited)\n");
        assert_eq!(info.state, "not running");
        assert_eq!(info.last_exit_code, None);
        let info = parse_print("state = not running\nruns = 7\nlast exit code = 78: EX_CONFIG\n");
        assert_eq!(info.last_exit_code.as_deref(), Some("78: EX_CONFIG"));
        assert_eq!(info.last_exit_status(), Some(78));
        assert_eq!(info.runs, Some(7));
        assert_eq!(parse_print(""), ServiceInfo::default());
        assert_eq!(
            parse_print("Bad request.\nCould not find service"),
            ServiceInfo::default()
        );
    }

    fn sample() -> JobPlist {
        JobPlist {
            label: "dev.flotilla.llama".into(),
            program_arguments: vec!["/bin/llama".into(), "--port".into(), "8080".into()],
            environment: [("A".to_string(), "1 & <2>".to_string())].into(),
            working_directory: Some("/srv".into()),
            standard_out_path: Some("/srv/out.log".into()),
            standard_error_path: None,
            run_at_load: true,
            keep_alive: KeepAlive::Never,
            throttle_interval: None,
        }
    }

    #[test]
    fn xml_has_the_launchd_keys_and_round_trips() {
        let job = sample();
        let xml = String::from_utf8(job.to_xml()).unwrap();
        assert!(xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>"));
        assert!(xml.contains("<!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\""));
        for key in [
            "Label",
            "ProgramArguments",
            "EnvironmentVariables",
            "WorkingDirectory",
            "StandardOutPath",
            "RunAtLoad",
            "KeepAlive",
            "ProcessType",
        ] {
            assert!(xml.contains(&format!("<key>{key}</key>")), "{key} in {xml}");
        }
        assert!(!xml.contains("StandardErrorPath"), "unset keys are omitted");
        assert!(xml.contains("<string>Interactive</string>"));
        assert!(xml.contains("1 &amp; &lt;2&gt;"), "escaped: {xml}");
        assert!(!xml.contains("ThrottleInterval"), "unset keys are omitted");
        assert_eq!(JobPlist::from_xml(xml.as_bytes()).unwrap(), job);
        for (keep_alive, written) in [
            (KeepAlive::Always, "<key>KeepAlive</key>\n\t<true/>"),
            (
                KeepAlive::OnFailure,
                "<key>KeepAlive</key>\n\t<dict>\n\t\t<key>SuccessfulExit</key>\n\t\t<false/>\n\t</dict>",
            ),
        ] {
            let job = JobPlist {
                keep_alive,
                throttle_interval: Some(3),
                ..sample()
            };
            let xml = String::from_utf8(job.to_xml()).unwrap();
            assert!(xml.contains(written), "{xml}");
            assert!(
                xml.contains("<key>ThrottleInterval</key>\n\t<integer>3</integer>"),
                "{xml}"
            );
            assert_eq!(JobPlist::from_xml(xml.as_bytes()).unwrap(), job);
        }
    }

    #[test]
    fn reads_binary_plists_program_and_keepalive_dictionaries() {
        let mut dict = Dictionary::new();
        dict.insert("Label".into(), Value::String("x".into()));
        dict.insert("Program".into(), Value::String("/bin/true".into()));
        let mut conditions = Dictionary::new();
        conditions.insert("SuccessfulExit".into(), Value::Boolean(false));
        dict.insert("KeepAlive".into(), Value::Dictionary(conditions));
        let mut binary = Vec::new();
        Value::Dictionary(dict)
            .to_writer_binary(&mut binary)
            .unwrap();
        assert!(binary.starts_with(b"bplist00"));
        let job = JobPlist::from_xml(&binary).unwrap();
        assert_eq!(job.program_arguments, ["/bin/true"]);
        assert_eq!(job.keep_alive, KeepAlive::OnFailure);
        assert!(job.keep_alive.may_restart());
        assert!(!job.run_at_load);
    }

    #[test]
    fn typed_errors() {
        let plist = |body: &str| {
            format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<plist version=\"1.0\">{body}</plist>"
            )
        };
        let err = |body: &str| JobPlist::from_xml(plist(body).as_bytes()).unwrap_err();
        assert!(matches!(
            JobPlist::from_xml(b"not a plist"),
            Err(PlistError::Parse(_))
        ));
        assert!(matches!(err("<array/>"), PlistError::NotADictionary));
        assert!(matches!(
            err("<dict><key>Program</key><string>/bin/x</string></dict>"),
            PlistError::MissingKey("Label")
        ));
        assert!(matches!(
            err("<dict><key>Label</key><string>x</string></dict>"),
            PlistError::NoProgram
        ));
        assert!(matches!(
            err(
                "<dict><key>Label</key><string>x</string><key>Program</key><string>/a</string>\
                 <key>ProgramArguments</key><array><string>/b</string></array></dict>"
            ),
            PlistError::ProgramMismatch { .. }
        ));
        match err(
            "<dict><key>Label</key><string>x</string><key>Program</key><string>/a</string>\
                   <key>RunAtLoad</key><string>yes</string></dict>",
        ) {
            PlistError::WrongType { key, expected } => {
                assert_eq!(key, "RunAtLoad");
                assert_eq!(expected, "a boolean");
            }
            other => panic!("{other:?}"),
        }
        match err("<dict><key>Label</key><string>x</string><key>Program</key><string>/a</string>\
                   <key>EnvironmentVariables</key><dict><key>N</key><integer>1</integer></dict></dict>")
        {
            PlistError::WrongType { key, .. } => assert_eq!(key, "EnvironmentVariables.N"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn targets() {
        assert_eq!(domain_target(501), "gui/501");
        assert_eq!(domain_target(0), "system");
        assert_eq!(
            service_target("gui/501", "com.example.x"),
            "gui/501/com.example.x"
        );
        assert_eq!(
            service_target("system/", "com.example.x"),
            "system/com.example.x"
        );
    }
}

//! Claude Code's hook protocol, for the gate's two front doors (`flotilla gate hook`, a
//! command hook; and the authority's HTTP hook endpoint): the JSON a hook receives
//! (on stdin for a command hook, as the POST body for an HTTP hook), the JSON it
//! answers, and the settings that install the gate as the hook. Pure: no IO, no clock.
//!
//! The protocol is Claude Code's (<https://code.claude.com/docs/en/hooks>); the shapes
//! here were recorded from Claude Code 2.1.328 itself (fixtures in
//! `tests/fixtures/hooks/`, how they were made in `/work/cc-findings.md`):
//!
//! - **Input** ([`HookInput`]): `session_id`, `transcript_path`, `cwd`, `prompt_id`
//!   (absent when a resumed run replays a deferred call), `permission_mode` (`default`,
//!   `acceptEdits`, `plan`, `bypassPermissions`, `auto`, `dontAsk`: what the runtime
//!   really runs), `effort` (`{"level": "medium"}`), `hook_event_name`, `tool_name`,
//!   `tool_input`; `PreToolUse` adds `tool_use_id`, `PermissionRequest` adds
//!   `permission_suggestions` and has **no** `tool_use_id`. Unknown fields are kept in
//!   [`HookInput::extra`].
//! - **Answer** ([`render`]), printed on stdout with exit code 0 (or as the HTTP
//!   response body with status 200):
//!   `PreToolUse`: `{"hookSpecificOutput": {"hookEventName": "PreToolUse",
//!   "permissionDecision": "allow"|"deny"|"ask"|"defer", "permissionDecisionReason": …}}`;
//!   `PermissionRequest`: `{"hookSpecificOutput": {"hookEventName": "PermissionRequest",
//!   "decision": {"behavior": "allow"|"deny", "message": …}}}`.
//! - **Failing closed**: a command hook that cannot answer exits [`BLOCK_EXIT_CODE`]
//!   (2) with the reason on stderr, which blocks the call. Exit 1, a missing script, an
//!   unreachable or failing HTTP hook and a timeout all let the call **go ahead** unless
//!   the hook is configured with `"onFailure": "block"`, which [`gate_settings`] always
//!   sets.
//!
//! Under `claude -p` (how runtimes run the agent), `defer` ends the process with the
//! call pending in the transcript (result `stop_reason: "tool_deferred"`); `claude -p
//! --resume <session_id>` (no prompt) fires the hook again for the same `tool_use_id`
//! and `tool_input`. `ask` under `-p` denies the call (nobody can be asked).

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::{Decision, Mode, ToolCall};

/// The exit code with which a command hook blocks the call; its stderr is the reason
/// shown to the agent. Any other non-zero code lets the call go ahead (unless the hook
/// has `"onFailure": "block"`).
pub const BLOCK_EXIT_CODE: i32 = 2;

/// The hook events the gate answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HookEvent {
    /// Before every tool call, whatever the permission mode: the gate's main door.
    PreToolUse,
    /// When Claude Code's own permission check would ask a person (a `PreToolUse` hook
    /// gave no verdict and no rule allows the call).
    PermissionRequest,
}

impl HookEvent {
    /// Claude Code's spelling (`PreToolUse`, `PermissionRequest`).
    pub fn as_str(self) -> &'static str {
        match self {
            HookEvent::PreToolUse => "PreToolUse",
            HookEvent::PermissionRequest => "PermissionRequest",
        }
    }

    /// Parses Claude Code's spelling; `None` for any other event.
    pub fn parse(s: &str) -> Option<HookEvent> {
        [HookEvent::PreToolUse, HookEvent::PermissionRequest]
            .into_iter()
            .find(|e| e.as_str() == s)
    }
}

impl std::fmt::Display for HookEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a hook input was refused. The gate answers any of these by failing closed.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// The bytes are not JSON, or lack a field every tool hook carries
    /// (`session_id`, `transcript_path`, `cwd`, `hook_event_name`, `tool_name`,
    /// `tool_input`), or a field has the wrong type.
    #[error("the hook input is not the JSON of a Claude Code tool hook: {0}")]
    Json(#[from] serde_json::Error),
    /// An event the gate does not answer (`PostToolUse`, `UserPromptSubmit`, …).
    #[error("hook event `{0}` is not one the gate answers (PreToolUse, PermissionRequest)")]
    UnsupportedEvent(String),
    /// `cwd` is not an absolute path, so path rules could not be resolved against it.
    #[error("the hook input's cwd `{0}` is not an absolute path")]
    RelativeCwd(String),
    /// `tool_name` is empty.
    #[error("the hook input's tool_name is empty")]
    EmptyToolName,
}

/// The JSON a `PreToolUse` or `PermissionRequest` hook receives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HookInput {
    /// The conversation's id (a UUID): what `--session-id` / `--resume` take.
    pub session_id: String,
    /// The transcript file (`<config dir>/projects/<cwd with / as ->/<session_id>.jsonl`).
    pub transcript_path: String,
    /// The agent's working directory. Absolute ([`HookInput::parse`] checks it).
    pub cwd: String,
    /// The permission mode the runtime really runs (`default`, `acceptEdits`, `plan`,
    /// `bypassPermissions`, `auto`, `dontAsk`); see [`HookInput::mode`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<String>,
    /// Which event this is.
    pub hook_event_name: HookEvent,
    /// The tool's name (`Bash`, `Write`, `mcp__server__tool`…).
    pub tool_name: String,
    /// The tool's input, exactly as the model gave it.
    pub tool_input: Value,
    /// The tool call's id (`toolu_…`): present for `PreToolUse` (the same on a resumed
    /// run's replay of a deferred call), absent for `PermissionRequest`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_use_id: Option<String>,
    /// The id of the prompt that started the turn; absent on a resumed replay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_id: Option<String>,
    /// The reasoning effort (`{"level": "medium"}`), as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<Value>,
    /// `PermissionRequest` only: the rules Claude Code would offer to add (e.g.
    /// `{"type": "addRules", "rules": [{"toolName": "Bash", "ruleContent": "git push *"}],
    /// "behavior": "allow", "destination": "localSettings"}`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub permission_suggestions: Vec<Value>,
    /// Every other field, kept as sent (later Claude Code versions add fields).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Just the event name, read first so that another event is reported as such and
/// not as a missing field.
#[derive(Deserialize)]
struct EventProbe {
    hook_event_name: String,
}

impl HookInput {
    /// Parses a hook input (a command hook's stdin, an HTTP hook's request body).
    ///
    /// # Errors
    /// [`HookError::Json`] for bytes that are not a tool hook's JSON,
    /// [`HookError::UnsupportedEvent`] for an event other than `PreToolUse` and
    /// `PermissionRequest`, [`HookError::RelativeCwd`], [`HookError::EmptyToolName`].
    pub fn parse(json: &[u8]) -> Result<HookInput, HookError> {
        let probe: EventProbe = serde_json::from_slice(json)?;
        if HookEvent::parse(&probe.hook_event_name).is_none() {
            return Err(HookError::UnsupportedEvent(probe.hook_event_name));
        }
        let input: HookInput = serde_json::from_slice(json)?;
        if !input.cwd.starts_with('/') {
            return Err(HookError::RelativeCwd(input.cwd));
        }
        if input.tool_name.is_empty() {
            return Err(HookError::EmptyToolName);
        }
        Ok(input)
    }

    /// The tool call the gate decides on: `tool_name`, `tool_input` and `cwd`.
    pub fn tool_call(&self) -> ToolCall {
        ToolCall {
            tool_name: self.tool_name.clone(),
            tool_input: self.tool_input.clone(),
            cwd: self.cwd.clone(),
        }
    }

    /// The payload's `permission_mode` as a [`Mode`]; `None` when absent or one that
    /// Flotilla does not launch (`auto`, `dontAsk`): a mismatch with the session's
    /// launch mode either way.
    pub fn mode(&self) -> Option<Mode> {
        self.permission_mode.as_deref().and_then(Mode::parse)
    }
}

/// The gate's answer on one hook call; the `String` is the reason, shown to the agent
/// (and, for `Ask`/`Defer`, to the human who answers the question).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "answer", content = "reason", rename_all = "lowercase")]
pub enum HookAnswer {
    /// The call goes ahead, skipping Claude Code's own permission check.
    Allow(String),
    /// The call is refused; the reason is the tool result the model sees.
    Deny(String),
    /// Claude Code's own prompt decides; under `-p` nobody can be asked, so the call is
    /// refused (measured), which is why headless runtimes answer [`HookAnswer::Defer`].
    Ask(String),
    /// `PreToolUse` under `-p` only: the process ends with the call pending; `claude -p
    /// --resume <session_id>` fires the hook again for the same call.
    Defer(String),
}

impl HookAnswer {
    /// The answer for a gate decision in a headless (`-p`) runtime: `Ask` becomes
    /// [`HookAnswer::Defer`] (the call parks until a human answers the question).
    pub fn from_decision(decision: &Decision) -> HookAnswer {
        match decision {
            Decision::Allow { reason } => HookAnswer::Allow(reason.clone()),
            Decision::Deny { reason } => HookAnswer::Deny(reason.clone()),
            Decision::Ask { reason } => HookAnswer::Defer(reason.clone()),
        }
    }

    /// `allow`, `deny`, `ask` or `defer`: the `permissionDecision` value.
    pub fn as_str(&self) -> &'static str {
        match self {
            HookAnswer::Allow(_) => "allow",
            HookAnswer::Deny(_) => "deny",
            HookAnswer::Ask(_) => "ask",
            HookAnswer::Defer(_) => "defer",
        }
    }

    /// The reason.
    pub fn reason(&self) -> &str {
        match self {
            HookAnswer::Allow(r)
            | HookAnswer::Deny(r)
            | HookAnswer::Ask(r)
            | HookAnswer::Defer(r) => r,
        }
    }
}

/// The JSON answering a hook of this event (print it on stdout and exit 0, or send it
/// as the HTTP hook's 200 response body).
///
/// `PermissionRequest` knows only `allow` and `deny`: `Ask` and `Defer` render as
/// `deny` with their reason (the event cannot wait for a human; the gate's questions
/// are asked at `PreToolUse`). `allow` carries no message (Claude Code ignores one).
pub fn render(event: HookEvent, answer: &HookAnswer) -> Value {
    match event {
        HookEvent::PreToolUse => json!({"hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": answer.as_str(),
            "permissionDecisionReason": answer.reason(),
        }}),
        HookEvent::PermissionRequest => {
            let decision = match answer {
                HookAnswer::Allow(_) => json!({"behavior": "allow"}),
                HookAnswer::Deny(r) | HookAnswer::Ask(r) | HookAnswer::Defer(r) => {
                    json!({"behavior": "deny", "message": r})
                }
            };
            json!({"hookSpecificOutput": {
                "hookEventName": "PermissionRequest",
                "decision": decision,
            }})
        }
    }
}

/// How Claude Code reaches the gate, for [`gate_settings`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookHandler {
    /// A command hook run without a shell: `program` with `args` (e.g.
    /// `/usr/bin/flotilla` with `["gate", "hook"]`), the input on its stdin.
    Command {
        /// The executable, absolute (as seen inside the runtime's sandbox).
        program: String,
        /// Its arguments, passed as they are (no shell, no expansion).
        args: Vec<String>,
        /// How long Claude Code waits for it, in seconds.
        timeout_secs: u32,
    },
    /// An HTTP hook: Claude Code POSTs the input to `url` and reads the answer from the
    /// response body.
    Http {
        /// The gate endpoint on the authority.
        url: String,
        /// Extra headers; values may name environment variables (`Bearer
        /// $FLOTILLA_SESSION_TOKEN`) that are listed in `allowed_env_vars`.
        headers: Vec<(String, String)>,
        /// The environment variables Claude Code may interpolate into `headers`.
        allowed_env_vars: Vec<String>,
        /// How long Claude Code waits for the answer, in seconds.
        timeout_secs: u32,
    },
}

/// Claude Code settings (for `--settings <file>` or a managed-settings file) that send
/// every `PreToolUse` and `PermissionRequest` (matcher `*`: every tool) to the gate,
/// with `"onFailure": "block"` so that a hook that cannot start, times out, fails or
/// is unreachable blocks the call instead of letting it through.
pub fn gate_settings(handler: &HookHandler) -> Value {
    let hook = match handler {
        HookHandler::Command {
            program,
            args,
            timeout_secs,
        } => json!({
            "type": "command",
            "command": program,
            "args": args,
            "timeout": timeout_secs,
            "onFailure": "block",
        }),
        HookHandler::Http {
            url,
            headers,
            allowed_env_vars,
            timeout_secs,
        } => {
            let headers: Map<String, Value> = headers
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect();
            json!({
                "type": "http",
                "url": url,
                "headers": headers,
                "allowedEnvVars": allowed_env_vars,
                "timeout": timeout_secs,
                "onFailure": "block",
            })
        }
    };
    let entry = json!([{"matcher": "*", "hooks": [hook]}]);
    json!({"hooks": {"PreToolUse": entry.clone(), "PermissionRequest": entry}})
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The recorded payloads (tests/fixtures/hooks/), by file name.
    const FIXTURES: &[(&str, &str)] = &[
        (
            "pretooluse-bash-default.json",
            include_str!("../tests/fixtures/hooks/pretooluse-bash-default.json"),
        ),
        (
            "pretooluse-bash-resume.json",
            include_str!("../tests/fixtures/hooks/pretooluse-bash-resume.json"),
        ),
        (
            "pretooluse-bash-acceptedits.json",
            include_str!("../tests/fixtures/hooks/pretooluse-bash-acceptedits.json"),
        ),
        (
            "pretooluse-bash-plan.json",
            include_str!("../tests/fixtures/hooks/pretooluse-bash-plan.json"),
        ),
        (
            "pretooluse-bash-bypasspermissions.json",
            include_str!("../tests/fixtures/hooks/pretooluse-bash-bypasspermissions.json"),
        ),
        (
            "pretooluse-bash-auto.json",
            include_str!("../tests/fixtures/hooks/pretooluse-bash-auto.json"),
        ),
        (
            "pretooluse-bash-dontask.json",
            include_str!("../tests/fixtures/hooks/pretooluse-bash-dontask.json"),
        ),
        (
            "pretooluse-bash-bwrap-nobody.json",
            include_str!("../tests/fixtures/hooks/pretooluse-bash-bwrap-nobody.json"),
        ),
        (
            "pretooluse-write-acceptedits.json",
            include_str!("../tests/fixtures/hooks/pretooluse-write-acceptedits.json"),
        ),
        (
            "pretooluse-edit-acceptedits.json",
            include_str!("../tests/fixtures/hooks/pretooluse-edit-acceptedits.json"),
        ),
        (
            "pretooluse-read-acceptedits.json",
            include_str!("../tests/fixtures/hooks/pretooluse-read-acceptedits.json"),
        ),
        (
            "pretooluse-webfetch-acceptedits.json",
            include_str!("../tests/fixtures/hooks/pretooluse-webfetch-acceptedits.json"),
        ),
        (
            "http-pretooluse-bash-bypasspermissions.json",
            include_str!("../tests/fixtures/hooks/http-pretooluse-bash-bypasspermissions.json"),
        ),
        (
            "permissionrequest-bash-default.json",
            include_str!("../tests/fixtures/hooks/permissionrequest-bash-default.json"),
        ),
        (
            "permissionrequest-webfetch-acceptedits.json",
            include_str!("../tests/fixtures/hooks/permissionrequest-webfetch-acceptedits.json"),
        ),
    ];

    fn fixture(name: &str) -> HookInput {
        let (_, text) = FIXTURES.iter().find(|(n, _)| *n == name).unwrap();
        HookInput::parse(text.as_bytes()).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    fn answer_fixture(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn every_recorded_payload_parses_and_round_trips() {
        for (name, text) in FIXTURES {
            let input = HookInput::parse(text.as_bytes()).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(input.cwd.starts_with('/'), "{name}");
            assert!(!input.session_id.is_empty(), "{name}");
            assert!(input.transcript_path.ends_with(".jsonl"), "{name}");
            assert!(
                input.extra.is_empty(),
                "{name}: every field 2.1.328 sends is known: {:?}",
                input.extra
            );
            // Serializing gives back the payload, field for field.
            let original: Value = serde_json::from_str(text).unwrap();
            assert_eq!(serde_json::to_value(&input).unwrap(), original, "{name}");
        }
    }

    #[test]
    fn a_pretooluse_payload_gives_the_bash_call() {
        let input = fixture("pretooluse-bash-default.json");
        assert_eq!(input.hook_event_name, HookEvent::PreToolUse);
        assert_eq!(input.session_id, "181341e8-86a1-4044-bf52-9d9e19812736");
        assert_eq!(input.tool_use_id.as_deref(), Some("toolu_stub_11"));
        assert!(input.prompt_id.is_some());
        assert_eq!(input.mode(), Some(Mode::Default));
        assert_eq!(input.effort, Some(serde_json::json!({"level": "medium"})));
        let call = input.tool_call();
        assert_eq!(call.tool_name, "Bash");
        assert_eq!(call.tool_input["command"], "git push origin main");
        assert_eq!(call.cwd, "/tmp/ccx/work");
    }

    #[test]
    fn a_resumed_replay_has_the_same_call_and_no_prompt_id() {
        let first = fixture("pretooluse-bash-default.json");
        let replay = fixture("pretooluse-bash-resume.json");
        assert_eq!(replay.session_id, first.session_id);
        assert_eq!(replay.tool_use_id, first.tool_use_id);
        assert_eq!(replay.tool_call(), first.tool_call());
        assert!(first.prompt_id.is_some());
        assert_eq!(replay.prompt_id, None);
    }

    #[test]
    fn permission_modes_are_read_as_the_runtime_reports_them() {
        for (name, raw, mode) in [
            (
                "pretooluse-bash-default.json",
                "default",
                Some(Mode::Default),
            ),
            (
                "pretooluse-bash-acceptedits.json",
                "acceptEdits",
                Some(Mode::AcceptEdits),
            ),
            ("pretooluse-bash-plan.json", "plan", Some(Mode::Plan)),
            (
                "pretooluse-bash-bypasspermissions.json",
                "bypassPermissions",
                Some(Mode::BypassPermissions),
            ),
            (
                "pretooluse-bash-bwrap-nobody.json",
                "bypassPermissions",
                Some(Mode::BypassPermissions),
            ),
            ("pretooluse-bash-auto.json", "auto", None),
            ("pretooluse-bash-dontask.json", "dontAsk", None),
        ] {
            let input = fixture(name);
            assert_eq!(input.permission_mode.as_deref(), Some(raw), "{name}");
            assert_eq!(input.mode(), mode, "{name}");
        }
    }

    #[test]
    fn file_and_fetch_tools_give_their_inputs() {
        let write = fixture("pretooluse-write-acceptedits.json").tool_call();
        assert_eq!(write.tool_name, "Write");
        assert_eq!(write.tool_input["file_path"], "/tmp/ccx/work/notes.txt");
        let edit = fixture("pretooluse-edit-acceptedits.json").tool_call();
        assert_eq!(edit.tool_name, "Edit");
        assert_eq!(edit.tool_input["old_string"], "hi");
        let read = fixture("pretooluse-read-acceptedits.json").tool_call();
        assert_eq!(
            read.tool_input,
            serde_json::json!({"file_path": "/tmp/ccx/work/a"})
        );
        let fetch = fixture("pretooluse-webfetch-acceptedits.json").tool_call();
        assert_eq!(fetch.tool_name, "WebFetch");
        assert_eq!(fetch.tool_input["url"], "https://example.com/x");
    }

    #[test]
    fn the_http_hook_body_is_the_same_payload() {
        let input = fixture("http-pretooluse-bash-bypasspermissions.json");
        assert_eq!(input.hook_event_name, HookEvent::PreToolUse);
        assert_eq!(input.mode(), Some(Mode::BypassPermissions));
        assert_eq!(
            input.tool_call().tool_input["command"],
            "git push origin main"
        );
    }

    #[test]
    fn a_permission_request_has_suggestions_and_no_tool_use_id() {
        let input = fixture("permissionrequest-bash-default.json");
        assert_eq!(input.hook_event_name, HookEvent::PermissionRequest);
        assert_eq!(input.tool_use_id, None);
        assert_eq!(input.permission_suggestions.len(), 1);
        assert_eq!(
            input.permission_suggestions[0]["rules"][0]["ruleContent"],
            "git push *"
        );
        assert_eq!(
            input.tool_call().tool_input["command"],
            "git push origin main"
        );
        let fetch = fixture("permissionrequest-webfetch-acceptedits.json");
        assert_eq!(fetch.tool_name, "WebFetch");
        assert_eq!(fetch.mode(), Some(Mode::AcceptEdits));
    }

    #[test]
    fn unknown_fields_are_kept() {
        let mut v: Value = serde_json::from_str(include_str!(
            "../tests/fixtures/hooks/pretooluse-bash-default.json"
        ))
        .unwrap();
        v["agent_id"] = serde_json::json!("sub-1");
        v["future"] = serde_json::json!({"x": [1, 2]});
        let input = HookInput::parse(v.to_string().as_bytes()).unwrap();
        assert_eq!(
            input.extra.get("agent_id"),
            Some(&serde_json::json!("sub-1"))
        );
        assert_eq!(serde_json::to_value(&input).unwrap(), v);
    }

    #[test]
    fn other_events_and_bad_inputs_are_typed_errors() {
        for (text, what) in [
            (
                include_str!("../tests/fixtures/hooks/posttooluse-bash-default.json"),
                "PostToolUse",
            ),
            (
                include_str!("../tests/fixtures/hooks/userpromptsubmit-default.json"),
                "UserPromptSubmit",
            ),
        ] {
            match HookInput::parse(text.as_bytes()) {
                Err(HookError::UnsupportedEvent(e)) => assert_eq!(e, what),
                other => panic!("{what}: {other:?}"),
            }
        }
        assert!(matches!(HookInput::parse(b""), Err(HookError::Json(_))));
        assert!(matches!(
            HookInput::parse(b"not json"),
            Err(HookError::Json(_))
        ));
        assert!(matches!(HookInput::parse(b"{}"), Err(HookError::Json(_))));
        let base: Value = serde_json::from_str(include_str!(
            "../tests/fixtures/hooks/pretooluse-bash-default.json"
        ))
        .unwrap();
        let with = |k: &str, val: Value| {
            let mut v = base.clone();
            v[k] = val;
            HookInput::parse(v.to_string().as_bytes())
        };
        let without = |k: &str| {
            let mut v = base.clone();
            v.as_object_mut().unwrap().remove(k);
            HookInput::parse(v.to_string().as_bytes())
        };
        for field in [
            "session_id",
            "transcript_path",
            "cwd",
            "tool_name",
            "tool_input",
        ] {
            assert!(matches!(without(field), Err(HookError::Json(_))), "{field}");
        }
        assert!(matches!(
            without("hook_event_name"),
            Err(HookError::Json(_))
        ));
        assert!(without("tool_use_id").is_ok());
        assert!(matches!(without("permission_mode"), Ok(i) if i.mode().is_none()));
        assert!(
            matches!(with("cwd", "work".into()), Err(HookError::RelativeCwd(c)) if c == "work")
        );
        assert!(matches!(
            with("tool_name", "".into()),
            Err(HookError::EmptyToolName)
        ));
        assert!(matches!(
            with("tool_name", 3.into()),
            Err(HookError::Json(_))
        ));
        // Errors say what is wrong.
        let msg = with("cwd", "work".into()).unwrap_err().to_string();
        assert!(msg.contains("`work`"), "{msg}");
    }

    #[test]
    fn pretooluse_answers_render_as_recorded_answers_that_worked() {
        for (answer, text) in [
            (
                HookAnswer::Allow("flotilla says allow".into()),
                include_str!("../tests/fixtures/hooks/answers/pretooluse-allow.json"),
            ),
            (
                HookAnswer::Deny("flotilla says deny".into()),
                include_str!("../tests/fixtures/hooks/answers/pretooluse-deny.json"),
            ),
            (
                HookAnswer::Ask("flotilla says ask".into()),
                include_str!("../tests/fixtures/hooks/answers/pretooluse-ask.json"),
            ),
            (
                HookAnswer::Defer("flotilla says defer".into()),
                include_str!("../tests/fixtures/hooks/answers/pretooluse-defer.json"),
            ),
        ] {
            assert_eq!(
                render(HookEvent::PreToolUse, &answer),
                answer_fixture(text),
                "{answer:?}"
            );
        }
    }

    #[test]
    fn permission_request_answers_render_allow_or_deny() {
        assert_eq!(
            render(
                HookEvent::PermissionRequest,
                &HookAnswer::Allow("ok".into())
            ),
            answer_fixture(include_str!(
                "../tests/fixtures/hooks/answers/permissionrequest-allow.json"
            ))
        );
        let deny = HookAnswer::Deny("flotilla denies via PermissionRequest".into());
        assert_eq!(
            render(HookEvent::PermissionRequest, &deny),
            answer_fixture(include_str!(
                "../tests/fixtures/hooks/answers/permissionrequest-deny.json"
            ))
        );
        for answer in [
            HookAnswer::Ask("needs a human".into()),
            HookAnswer::Defer("needs a human".into()),
        ] {
            let v = render(HookEvent::PermissionRequest, &answer);
            assert_eq!(v["hookSpecificOutput"]["decision"]["behavior"], "deny");
            assert_eq!(
                v["hookSpecificOutput"]["decision"]["message"],
                "needs a human"
            );
        }
    }

    #[test]
    fn decisions_map_to_answers_with_ask_deferred() {
        let d = |s: &str| match s {
            "allow" => Decision::Allow { reason: "r".into() },
            "deny" => Decision::Deny { reason: "r".into() },
            _ => Decision::Ask { reason: "r".into() },
        };
        assert_eq!(
            HookAnswer::from_decision(&d("allow")),
            HookAnswer::Allow("r".into())
        );
        assert_eq!(
            HookAnswer::from_decision(&d("deny")),
            HookAnswer::Deny("r".into())
        );
        assert_eq!(
            HookAnswer::from_decision(&d("ask")),
            HookAnswer::Defer("r".into())
        );
        assert_eq!(HookAnswer::Defer("why".into()).reason(), "why");
        assert_eq!(
            HookEvent::parse("PermissionRequest"),
            Some(HookEvent::PermissionRequest)
        );
        assert_eq!(HookEvent::parse("PostToolUse"), None);
        assert_eq!(HookEvent::PreToolUse.to_string(), "PreToolUse");
    }

    #[test]
    fn gate_settings_are_the_shapes_that_worked() {
        // As measured with 2.1.328 (findings: exec-form command hook, onFailure block).
        let cmd = gate_settings(&HookHandler::Command {
            program: "/usr/bin/flotilla".into(),
            args: vec!["gate".into(), "hook".into()],
            timeout_secs: 30,
        });
        let hook = serde_json::json!({"type": "command", "command": "/usr/bin/flotilla",
            "args": ["gate", "hook"], "timeout": 30, "onFailure": "block"});
        let entry = serde_json::json!([{"matcher": "*", "hooks": [hook]}]);
        assert_eq!(
            cmd,
            serde_json::json!({"hooks": {"PreToolUse": entry, "PermissionRequest": entry}})
        );
        let http = gate_settings(&HookHandler::Http {
            url: "http://127.0.0.1:8080/v1/gate/hook".into(),
            headers: vec![(
                "Authorization".into(),
                "Bearer $FLOTILLA_SESSION_TOKEN".into(),
            )],
            allowed_env_vars: vec!["FLOTILLA_SESSION_TOKEN".into()],
            timeout_secs: 10,
        });
        assert_eq!(
            http["hooks"]["PreToolUse"][0]["hooks"][0],
            serde_json::json!({"type": "http", "url": "http://127.0.0.1:8080/v1/gate/hook",
                "headers": {"Authorization": "Bearer $FLOTILLA_SESSION_TOKEN"},
                "allowedEnvVars": ["FLOTILLA_SESSION_TOKEN"], "timeout": 10, "onFailure": "block"})
        );
        assert_eq!(
            http["hooks"]["PermissionRequest"],
            http["hooks"]["PreToolUse"]
        );
    }
}

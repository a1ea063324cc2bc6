//! A scripted stand-in for the Anthropic Messages API on loopback, for tests that run a
//! real agent client (Claude Code, `claude -p`) against it: std only (one thread per
//! connection, `std::net`), listening on `127.0.0.1:0`.
//!
//! ```no_run
//! use flotilla_testkit::anthropic_stub::{AnthropicStub, Reply, Script};
//! use serde_json::json;
//!
//! let script = Script::new(Reply::text("Nothing to do."))
//!     .when("please push", Reply::tool_use_with_id(
//!         "toolu_push", "Bash", json!({"command": "git push origin main"})))
//!     .when_tool_result("main -> main", Reply::text("Pushed."));
//! let stub = AnthropicStub::start(script).unwrap();
//! // Run `claude -p` with ANTHROPIC_BASE_URL=stub.base_url(), then:
//! assert_eq!(stub.tool_result_count("toolu_push"), 1);
//! ```
//!
//! What it answers:
//! - `POST /v1/messages` (any query string; Claude Code sends `?beta=true`): the reply
//!   the [`Script`] picks for the request's **last user turn** (the last message whose
//!   `role` is `user`). With `"stream": true` the reply is sent as Server-Sent Events
//!   exactly as the Messages API streams them (`message_start`, `ping`, for each block
//!   `content_block_start` / `content_block_delta` (`text_delta` or `input_json_delta`)
//!   / `content_block_stop`, then `message_delta` carrying `stop_reason`, then
//!   `message_stop`), following
//!   <https://docs.anthropic.com/en/docs/build-with-claude/streaming> (event shapes) and
//!   <https://docs.anthropic.com/en/api/messages> (the message object); without it, the
//!   same reply as one message object. `stop_reason` is `tool_use` when the reply holds
//!   a tool use, `end_turn` otherwise. The reply's `model` echoes the request's.
//! - `POST /v1/messages/count_tokens`: `{"input_tokens": N}` (N = body bytes / 4).
//! - `HEAD` on any path: `200` with no body (Claude Code probes `HEAD /api/hello` at
//!   start unless `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`).
//! - anything else: `404` with the API's error shape
//!   (`{"type":"error","error":{"type":"not_found_error","message":…}}`).
//!
//! Every request is recorded whole (method, path, headers, body) in arrival order:
//! [`AnthropicStub::requests`].

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{json, Value};

/// Longest request head (request line and headers) the stub reads, in bytes.
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Largest request body the stub reads, in bytes (Claude Code's first request carries
/// the whole system prompt and tool list: a few hundred KiB).
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;
/// How long an idle keep-alive connection is kept before its thread gives up on it.
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// One content block of a scripted reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    /// A `text` block.
    Text(String),
    /// A `tool_use` block: the agent is asked to call tool `name` with `input`.
    ToolUse {
        /// The block's `id`; `None` = a fresh `toolu_stub_<n>` each time it is sent.
        /// A fixed id lets a test find the call in later requests; a rule with a fixed
        /// id that fires twice sends the same id twice.
        id: Option<String>,
        /// The tool's name (`Bash`, `Write`, …).
        name: String,
        /// The tool's input (for `Bash`: `{"command": "…"}`).
        input: Value,
    },
}

/// A scripted assistant message: its content blocks, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The content blocks. `stop_reason` is `tool_use` when one is a
    /// [`Block::ToolUse`], `end_turn` otherwise.
    pub blocks: Vec<Block>,
}

impl Reply {
    /// A reply of one text block.
    pub fn text(text: impl Into<String>) -> Reply {
        Reply {
            blocks: vec![Block::Text(text.into())],
        }
    }

    /// A reply of one tool use with a fresh id (`toolu_stub_<n>`).
    pub fn tool_use(name: impl Into<String>, input: Value) -> Reply {
        Reply {
            blocks: vec![Block::ToolUse {
                id: None,
                name: name.into(),
                input,
            }],
        }
    }

    /// A reply of one tool use with a fixed id.
    pub fn tool_use_with_id(id: impl Into<String>, name: impl Into<String>, input: Value) -> Reply {
        Reply {
            blocks: vec![Block::ToolUse {
                id: Some(id.into()),
                name: name.into(),
                input,
            }],
        }
    }

    /// This reply with one more block at the end (e.g. text, then a tool use).
    pub fn then(mut self, block: Block) -> Reply {
        self.blocks.push(block);
        self
    }

    /// `tool_use` when a block is a tool use, `end_turn` otherwise.
    pub fn stop_reason(&self) -> &'static str {
        if self
            .blocks
            .iter()
            .any(|b| matches!(b, Block::ToolUse { .. }))
        {
            "tool_use"
        } else {
            "end_turn"
        }
    }
}

/// What a rule looks for in the last user turn (substring match, case-sensitive).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum When {
    /// In a `text` block or in a `tool_result` block's content.
    Contains(String),
    /// In a `text` block only (a plain string `content` counts as one text block).
    Text(String),
    /// In a `tool_result` block's content only (string content, or the `text` of its
    /// content blocks), whether or not it `is_error`.
    ToolResult(String),
}

/// One rule of a script: when the last user turn matches, answer with the reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// What the last user turn must contain.
    pub when: When,
    /// The answer.
    pub reply: Reply,
}

/// An ordered list of rules and a default reply. The first rule whose [`When`]
/// matches a request's last user turn gives the reply; none matching, the default.
#[derive(Debug, Clone, PartialEq)]
pub struct Script {
    /// The rules, tried in order.
    pub rules: Vec<Rule>,
    /// The reply when no rule matches (title generation, other small-model calls…).
    pub default: Reply,
}

impl Default for Script {
    /// No rules; the default reply is the text `ok`.
    fn default() -> Script {
        Script::new(Reply::text("ok"))
    }
}

impl Script {
    /// A script with no rules and this default reply.
    pub fn new(default: Reply) -> Script {
        Script {
            rules: Vec::new(),
            default,
        }
    }

    /// Adds a rule at the end.
    pub fn rule(mut self, when: When, reply: Reply) -> Script {
        self.rules.push(Rule { when, reply });
        self
    }

    /// Adds a rule: the last user turn contains `needle` in a text or a tool result.
    pub fn when(self, needle: impl Into<String>, reply: Reply) -> Script {
        self.rule(When::Contains(needle.into()), reply)
    }

    /// Adds a rule: the last user turn contains `needle` in a text block.
    pub fn when_text(self, needle: impl Into<String>, reply: Reply) -> Script {
        self.rule(When::Text(needle.into()), reply)
    }

    /// Adds a rule: the last user turn carries a tool result containing `needle`.
    pub fn when_tool_result(self, needle: impl Into<String>, reply: Reply) -> Script {
        self.rule(When::ToolResult(needle.into()), reply)
    }

    /// The reply for a Messages API request body.
    pub fn reply_for(&self, body: &Value) -> &Reply {
        let turn = last_user_turn(body).map(UserTurn::of).unwrap_or_default();
        self.rules
            .iter()
            .find(|r| turn.matches(&r.when))
            .map(|r| &r.reply)
            .unwrap_or(&self.default)
    }
}

/// The `content` of the last message whose `role` is `user` in a Messages API request
/// body (`messages[]`); `None` when there is none. Other roles (Claude Code also sends
/// `system` messages inside `messages`) are skipped.
pub fn last_user_turn(body: &Value) -> Option<&Value> {
    body.get("messages")?
        .as_array()?
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .and_then(|m| m.get("content"))
}

/// The tool results in a user turn's `content`: `(tool_use_id, text)` pairs, the text
/// being a string content or its content blocks' texts joined by newlines.
pub fn tool_results(content: &Value) -> Vec<(String, String)> {
    UserTurn::of(content).tool_results
}

/// A user turn's text blocks and tool results.
#[derive(Debug, Default)]
struct UserTurn {
    texts: Vec<String>,
    tool_results: Vec<(String, String)>,
}

impl UserTurn {
    fn of(content: &Value) -> UserTurn {
        let mut turn = UserTurn::default();
        match content {
            Value::String(s) => turn.texts.push(s.clone()),
            Value::Array(blocks) => {
                for b in blocks {
                    match b.get("type").and_then(Value::as_str) {
                        Some("text") => {
                            if let Some(t) = b.get("text").and_then(Value::as_str) {
                                turn.texts.push(t.to_string());
                            }
                        }
                        Some("tool_result") => {
                            let id = b
                                .get("tool_use_id")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_string();
                            let text = b.get("content").map(content_text).unwrap_or_default();
                            turn.tool_results.push((id, text));
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
        turn
    }

    fn matches(&self, when: &When) -> bool {
        let in_texts = |n: &str| self.texts.iter().any(|t| t.contains(n));
        let in_results = |n: &str| self.tool_results.iter().any(|(_, t)| t.contains(n));
        match when {
            When::Contains(n) => in_texts(n) || in_results(n),
            When::Text(n) => in_texts(n),
            When::ToolResult(n) => in_results(n),
        }
    }
}

/// A tool result's `content` as text: the string, or the `text` of its blocks joined
/// by newlines.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// One HTTP request the stub received, as it came.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// `POST`, `HEAD`, …
    pub method: String,
    /// The request target, query string included (`/v1/messages?beta=true`).
    pub path: String,
    /// The headers in arrival order, names as sent.
    pub headers: Vec<(String, String)>,
    /// The body (chunked bodies de-chunked).
    pub body: Vec<u8>,
}

impl RecordedRequest {
    /// The path without its query string.
    pub fn route(&self) -> &str {
        self.path.split('?').next().unwrap_or_default()
    }

    /// The first header with this name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body parsed as JSON, if it is JSON.
    pub fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// Whether this is a `POST /v1/messages` (a model call).
    pub fn is_messages(&self) -> bool {
        self.method == "POST" && self.route() == "/v1/messages"
    }
}

/// State shared by the accept thread and the connection threads.
struct Shared {
    script: Script,
    requests: Mutex<Vec<RecordedRequest>>,
    stopping: AtomicBool,
    next_id: AtomicU64,
}

/// A running stub: see the module docs. Stops (stops accepting; open connections end
/// when their client closes them or after two idle minutes) when dropped.
pub struct AnthropicStub {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl AnthropicStub {
    /// Starts the stub on `127.0.0.1:0` with this script.
    ///
    /// # Errors
    /// If the listener cannot be bound or the accept thread cannot be started.
    pub fn start(script: Script) -> io::Result<AnthropicStub> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            script,
            requests: Mutex::new(Vec::new()),
            stopping: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
        });
        let accept_shared = Arc::clone(&shared);
        let accept = std::thread::Builder::new()
            .name("anthropic-stub-accept".into())
            .spawn(move || accept_loop(listener, accept_shared))?;
        Ok(AnthropicStub {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    /// `http://127.0.0.1:<port>`: the value for `ANTHROPIC_BASE_URL`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

    /// The JSON bodies of the `POST /v1/messages` requests received so far, in order.
    pub fn messages_requests(&self) -> Vec<Value> {
        lock(&self.shared.requests)
            .iter()
            .filter(|r| r.is_messages())
            .filter_map(RecordedRequest::json)
            .collect()
    }

    /// How many `POST /v1/messages` requests carried, in their last user turn, a tool
    /// result for this tool use id: how often the tool's result came back to the model
    /// (each later request repeats the whole history, which is not counted).
    pub fn tool_result_count(&self, tool_use_id: &str) -> usize {
        self.messages_requests()
            .iter()
            .filter(|body| {
                last_user_turn(body)
                    .map(|c| tool_results(c).iter().any(|(id, _)| id == tool_use_id))
                    .unwrap_or(false)
            })
            .count()
    }
}

impl Drop for AnthropicStub {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Wake the accept loop with one connection of our own.
        let _ = TcpStream::connect(self.addr);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

/// Locks a mutex, taking the data of a poisoned one (a panicking connection thread must
/// not hide the requests from the test).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = stream else { continue };
        let conn_shared = Arc::clone(&shared);
        let _ = std::thread::Builder::new()
            .name("anthropic-stub-conn".into())
            .spawn(move || {
                let _ = serve_connection(stream, &conn_shared);
            });
    }
}

/// Serves the requests of one connection (HTTP/1.1 keep-alive) until the client closes
/// it, asks to close it, sends something unreadable, or stays idle too long.
fn serve_connection(stream: TcpStream, shared: &Shared) -> io::Result<()> {
    stream.set_read_timeout(Some(IDLE_TIMEOUT))?;
    stream.set_nodelay(true)?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    loop {
        let Some(request) = read_request(&mut reader)? else {
            return Ok(());
        };
        let close = request
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        lock(&shared.requests).push(request.clone());
        let response = respond(&request, shared);
        writer.write_all(&response)?;
        writer.flush()?;
        if close {
            return Ok(());
        }
    }
}

/// Reads one request; `None` at a clean end of stream before a request starts.
fn read_request(reader: &mut BufReader<TcpStream>) -> io::Result<Option<RecordedRequest>> {
    let mut head_bytes = 0usize;
    let mut line = String::new();
    // Request line (skipping stray empty lines between requests).
    loop {
        line.clear();
        let n = reader.read_line(&mut line)?;
        if n == 0 {
            return Ok(None);
        }
        head_bytes += n;
        if !line.trim().is_empty() {
            break;
        }
        if head_bytes > MAX_HEAD_BYTES {
            return Err(invalid("request head too long"));
        }
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts
        .next()
        .ok_or_else(|| invalid("request line without a target"))?
        .to_string();
    let mut headers = Vec::new();
    loop {
        line.clear();
        let n = reader.read_line(&mut line)?;
        if n == 0 {
            return Err(invalid("end of stream inside the request head"));
        }
        head_bytes += n;
        if head_bytes > MAX_HEAD_BYTES {
            return Err(invalid("request head too long"));
        }
        let l = line.trim_end_matches(['\r', '\n']);
        if l.is_empty() {
            break;
        }
        if let Some((name, value)) = l.split_once(':') {
            headers.push((name.trim().to_string(), value.trim().to_string()));
        }
    }
    let mut request = RecordedRequest {
        method,
        path,
        headers,
        body: Vec::new(),
    };
    let chunked = request
        .header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    if chunked {
        request.body = read_chunked(reader)?;
    } else if let Some(len) = request.header("content-length") {
        let len: usize = len
            .parse()
            .map_err(|_| invalid("content-length is not a number"))?;
        if len > MAX_BODY_BYTES {
            return Err(invalid("request body too large"));
        }
        let mut body = vec![0; len];
        reader.read_exact(&mut body)?;
        request.body = body;
    }
    Ok(Some(request))
}

fn read_chunked(reader: &mut BufReader<TcpStream>) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        reader.read_line(&mut line)?;
        let size_text = line.trim().split(';').next().unwrap_or_default();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| invalid("bad chunk size in a chunked body"))?;
        if size == 0 {
            // Trailers, up to the empty line.
            loop {
                line.clear();
                if reader.read_line(&mut line)? == 0 || line.trim().is_empty() {
                    return Ok(body);
                }
            }
        }
        if body.len() + size > MAX_BODY_BYTES {
            return Err(invalid("request body too large"));
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader.read_exact(&mut body[start..])?;
        line.clear();
        reader.read_line(&mut line)?; // the CRLF after the chunk
    }
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// The whole HTTP response (head and body) for one request.
fn respond(request: &RecordedRequest, shared: &Shared) -> Vec<u8> {
    if request.method == "HEAD" {
        return http_response(200, "OK", "text/plain", &[], false);
    }
    match (request.method.as_str(), request.route()) {
        ("POST", "/v1/messages") => match request.json() {
            Some(body) => {
                let reply = shared.script.reply_for(&body);
                let model = body
                    .get("model")
                    .and_then(Value::as_str)
                    .unwrap_or("claude-stub")
                    .to_string();
                let message_id =
                    format!("msg_stub_{}", shared.next_id.fetch_add(1, Ordering::SeqCst));
                let blocks = resolve_ids(reply, &shared.next_id);
                if body.get("stream").and_then(Value::as_bool) == Some(true) {
                    let sse = sse_events(&message_id, &model, &blocks, reply.stop_reason());
                    http_response(200, "OK", "text/event-stream", sse.as_bytes(), true)
                } else {
                    let message = message_object(&message_id, &model, &blocks, reply.stop_reason());
                    json_response(200, "OK", &message)
                }
            }
            None => api_error(
                400,
                "Bad Request",
                "invalid_request_error",
                "the body is not JSON",
            ),
        },
        ("POST", "/v1/messages/count_tokens") => json_response(
            200,
            "OK",
            &json!({"input_tokens": (request.body.len() / 4).max(1)}),
        ),
        _ => api_error(
            404,
            "Not Found",
            "not_found_error",
            &format!(
                "the stub has no route {} {}",
                request.method,
                request.route()
            ),
        ),
    }
}

/// The reply's blocks with every tool-use id decided (fixed ids kept, fresh ones made).
fn resolve_ids(reply: &Reply, next_id: &AtomicU64) -> Vec<Block> {
    reply
        .blocks
        .iter()
        .map(|b| match b {
            Block::ToolUse {
                id: None,
                name,
                input,
            } => Block::ToolUse {
                id: Some(format!(
                    "toolu_stub_{}",
                    next_id.fetch_add(1, Ordering::SeqCst)
                )),
                name: name.clone(),
                input: input.clone(),
            },
            other => other.clone(),
        })
        .collect()
}

fn block_json(block: &Block) -> Value {
    match block {
        Block::Text(text) => json!({"type": "text", "text": text}),
        Block::ToolUse { id, name, input } => {
            json!({"type": "tool_use", "id": id, "name": name, "input": input})
        }
    }
}

fn usage(input_tokens: u64, output_tokens: u64) -> Value {
    json!({
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output_tokens,
    })
}

/// A non-streamed message object (<https://docs.anthropic.com/en/api/messages>).
fn message_object(id: &str, model: &str, blocks: &[Block], stop_reason: &str) -> Value {
    json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks.iter().map(block_json).collect::<Vec<_>>(),
        "stop_reason": stop_reason,
        "stop_sequence": null,
        "usage": usage(10, 5),
    })
}

/// The stream of Server-Sent Events for one reply
/// (<https://docs.anthropic.com/en/docs/build-with-claude/streaming>): each event is
/// `event: NAME\ndata: JSON\n\n`. Texts and tool inputs are sent in two deltas each,
/// as the API sends them in several.
fn sse_events(id: &str, model: &str, blocks: &[Block], stop_reason: &str) -> String {
    let mut events: Vec<(&str, Value)> = Vec::new();
    events.push((
        "message_start",
        json!({"type": "message_start", "message": {
            "id": id, "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": null, "stop_sequence": null, "usage": usage(10, 1),
        }}),
    ));
    events.push(("ping", json!({"type": "ping"})));
    for (index, block) in blocks.iter().enumerate() {
        match block {
            Block::Text(text) => {
                events.push((
                    "content_block_start",
                    json!({"type": "content_block_start", "index": index,
                           "content_block": {"type": "text", "text": ""}}),
                ));
                for part in halves(text) {
                    events.push((
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": index,
                               "delta": {"type": "text_delta", "text": part}}),
                    ));
                }
            }
            Block::ToolUse { id, name, input } => {
                events.push((
                    "content_block_start",
                    json!({"type": "content_block_start", "index": index,
                           "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
                ));
                let input_json = input.to_string();
                for part in halves(&input_json) {
                    events.push((
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": index,
                               "delta": {"type": "input_json_delta", "partial_json": part}}),
                    ));
                }
            }
        }
        events.push((
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
    }
    events.push((
        "message_delta",
        json!({"type": "message_delta",
               "delta": {"stop_reason": stop_reason, "stop_sequence": null},
               "usage": {"output_tokens": 5}}),
    ));
    events.push(("message_stop", json!({"type": "message_stop"})));
    events
        .iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect()
}

/// A string cut in two at a char boundary near its middle (one part when it is short).
fn halves(s: &str) -> Vec<&str> {
    if s.len() < 2 {
        return vec![s];
    }
    let mut mid = s.len() / 2;
    while !s.is_char_boundary(mid) {
        mid += 1;
    }
    vec![&s[..mid], &s[mid..]]
}

fn json_response(status: u16, reason: &str, body: &Value) -> Vec<u8> {
    http_response(
        status,
        reason,
        "application/json",
        body.to_string().as_bytes(),
        true,
    )
}

/// An error in the API's shape (<https://docs.anthropic.com/en/api/errors>).
fn api_error(status: u16, reason: &str, kind: &str, message: &str) -> Vec<u8> {
    json_response(
        status,
        reason,
        &json!({"type": "error", "error": {"type": kind, "message": message}}),
    )
}

fn http_response(
    status: u16,
    reason: &str,
    content_type: &str,
    body: &[u8],
    with_body: bool,
) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nrequest-id: req_stub\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if with_body {
        out.extend_from_slice(body);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};
    use std::process::{Command, Stdio};
    use std::time::Instant;

    /// Sends one request on a fresh connection and reads the whole response
    /// (`connection: close`).
    fn send(stub: &AnthropicStub, method: &str, path: &str, body: &str) -> (u16, String) {
        let mut s = TcpStream::connect(stub.addr()).unwrap();
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        let status = out[9..12].parse().unwrap();
        let body = out.split_once("\r\n\r\n").unwrap().1.to_string();
        (status, body)
    }

    /// The `(event, data)` pairs of an SSE body.
    fn events(sse: &str) -> Vec<(String, Value)> {
        sse.split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let (ev, data) = e.split_once('\n').unwrap();
                (
                    ev.strip_prefix("event: ").unwrap().to_string(),
                    serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap(),
                )
            })
            .collect()
    }

    /// The text a streamed reply's `text_delta`s add up to.
    fn streamed_text(sse: &str) -> String {
        events(sse)
            .iter()
            .filter(|(n, d)| n == "content_block_delta" && d["delta"]["type"] == "text_delta")
            .map(|(_, d)| d["delta"]["text"].as_str().unwrap().to_string())
            .collect()
    }

    fn body(messages: Value, stream: bool) -> String {
        json!({"model": "claude-test", "max_tokens": 100, "stream": stream, "messages": messages})
            .to_string()
    }

    fn push_script() -> Script {
        Script::new(Reply::text("default"))
            .when_tool_result("main -> main", Reply::text("Pushed."))
            .when(
                "please push",
                Reply::tool_use_with_id(
                    "toolu_push",
                    "Bash",
                    json!({"command": "git push origin main"}),
                ),
            )
    }

    #[test]
    fn streams_a_tool_use_as_the_messages_api_does() {
        let stub = AnthropicStub::start(push_script()).unwrap();
        let (status, sse) = send(
            &stub,
            "POST",
            "/v1/messages?beta=true",
            &body(
                json!([{"role": "user", "content": [{"type": "text", "text": "please push"}]}]),
                true,
            ),
        );
        assert_eq!(status, 200);
        let evs = events(&sse);
        let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "message_start",
                "ping",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        for (name, data) in &evs {
            assert_eq!(
                data["type"],
                name.as_str(),
                "event name and data type agree"
            );
        }
        assert_eq!(evs[0].1["message"]["model"], "claude-test");
        assert_eq!(evs[2].1["content_block"]["type"], "tool_use");
        assert_eq!(evs[2].1["content_block"]["id"], "toolu_push");
        assert_eq!(evs[2].1["content_block"]["name"], "Bash");
        let partial: String = evs[3..5]
            .iter()
            .map(|(_, d)| {
                assert_eq!(d["delta"]["type"], "input_json_delta");
                d["delta"]["partial_json"].as_str().unwrap().to_string()
            })
            .collect();
        let input: Value = serde_json::from_str(&partial).unwrap();
        assert_eq!(input, json!({"command": "git push origin main"}));
        assert_eq!(evs[6].1["delta"]["stop_reason"], "tool_use");
    }

    #[test]
    fn streams_text_and_answers_without_stream() {
        let stub = AnthropicStub::start(push_script()).unwrap();
        let msgs = json!([{"role": "user", "content": "hello é"}]);
        let (_, sse) = send(&stub, "POST", "/v1/messages", &body(msgs.clone(), true));
        let evs = events(&sse);
        assert_eq!(streamed_text(&sse), "default");
        assert_eq!(evs[evs.len() - 2].1["delta"]["stop_reason"], "end_turn");

        let (status, plain) = send(&stub, "POST", "/v1/messages", &body(msgs, false));
        assert_eq!(status, 200);
        let m: Value = serde_json::from_str(&plain).unwrap();
        assert_eq!(m["type"], "message");
        assert_eq!(m["content"], json!([{"type": "text", "text": "default"}]));
        assert_eq!(m["stop_reason"], "end_turn");
    }

    #[test]
    fn matches_the_last_user_turn_only_and_records_requests() {
        let stub = AnthropicStub::start(push_script()).unwrap();
        // The history holds "please push", but the last user turn is the tool result.
        let msgs = json!([
            {"role": "user", "content": [{"type": "text", "text": "please push"}]},
            {"role": "system", "content": "an environment note"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_push", "name": "Bash", "input": {}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_push", "content": "To /r.git\n * [new branch]      main -> main", "is_error": false},
                {"type": "text", "text": "Continue from where you left off."}
            ]},
        ]);
        let (_, sse) = send(&stub, "POST", "/v1/messages?beta=true", &body(msgs, true));
        assert_eq!(streamed_text(&sse), "Pushed.");
        assert_eq!(stub.tool_result_count("toolu_push"), 1);
        assert_eq!(stub.tool_result_count("toolu_other"), 0);

        let reqs = stub.requests();
        assert_eq!(reqs.len(), 1);
        assert!(reqs[0].is_messages());
        assert_eq!(reqs[0].path, "/v1/messages?beta=true");
        assert_eq!(reqs[0].header("Content-Type"), Some("application/json"));
        assert_eq!(stub.messages_requests()[0]["model"], "claude-test");
    }

    #[test]
    fn rule_kinds_tell_texts_from_tool_results() {
        let script = Script::new(Reply::text("none"))
            .when_text("needle", Reply::text("in text"))
            .when_tool_result("needle", Reply::text("in result"));
        let text_turn = json!({"messages": [{"role": "user", "content": "a needle"}]});
        let result_turn = json!({"messages": [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "needle!"}], "is_error": true}]}]});
        let neither = json!({"messages": [{"role": "assistant", "content": "needle"}]});
        assert_eq!(script.reply_for(&text_turn), &Reply::text("in text"));
        assert_eq!(script.reply_for(&result_turn), &Reply::text("in result"));
        assert_eq!(script.reply_for(&neither), &Reply::text("none"));
        assert_eq!(script.reply_for(&json!({})), &Reply::text("none"));
    }

    #[test]
    fn keeps_connections_alive_and_answers_other_routes() {
        let stub = AnthropicStub::start(Script::default()).unwrap();
        let mut s = TcpStream::connect(stub.addr()).unwrap();
        let b = body(json!([{"role": "user", "content": "hi"}]), false);
        let mut reader = BufReader::new(s.try_clone().unwrap());
        for _ in 0..2 {
            write!(
                s,
                "POST /v1/messages HTTP/1.1\r\ncontent-length: {}\r\n\r\n{b}",
                b.len()
            )
            .unwrap();
            let mut status = String::new();
            reader.read_line(&mut status).unwrap();
            assert!(status.starts_with("HTTP/1.1 200"), "{status}");
            let mut len = 0;
            loop {
                let mut h = String::new();
                reader.read_line(&mut h).unwrap();
                if h == "\r\n" {
                    break;
                }
                if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap();
                }
            }
            let mut resp = vec![0; len];
            reader.read_exact(&mut resp).unwrap();
        }
        // A chunked body is de-chunked.
        write!(s, "POST /v1/messages/count_tokens HTTP/1.1\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n4\r\n{{\"a\"\r\n3\r\n:1}}\r\n0\r\n\r\n").unwrap();
        let mut rest = String::new();
        reader.read_to_string(&mut rest).unwrap();
        assert!(rest.contains("\"input_tokens\""), "{rest}");
        assert_eq!(stub.requests()[2].body, b"{\"a\":1}");

        let (status, err) = send(&stub, "GET", "/v1/models", "");
        assert_eq!(status, 404);
        assert_eq!(
            serde_json::from_str::<Value>(&err).unwrap()["error"]["type"],
            "not_found_error"
        );
        let (status, empty) = send(&stub, "HEAD", "/api/hello", "");
        assert_eq!((status, empty.as_str()), (200, ""));
        assert_eq!(stub.requests().len(), 5);
    }

    /// Runs a command to its end within `deadline`, killing it past that.
    fn run(cmd: &mut Command, deadline: Duration) -> std::process::Output {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let start = Instant::now();
        let mut done = false;
        crate::wait_until(deadline, || {
            done = matches!(child.try_wait(), Ok(Some(_)));
            done
        });
        if !done {
            let _ = child.kill();
        }
        let out = child.wait_with_output().unwrap();
        assert!(done, "{cmd:?} still ran after {:?}", start.elapsed());
        out
    }

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// The real Claude Code against the stub: the model asks for `git push`, a
    /// PreToolUse command hook defers it, the process ends; the hook is switched to
    /// allow and `claude -p --resume <id>` runs the push, whose result reaches the
    /// model exactly once. Needs FLOTILLA_CLAUDE_CODE naming a `claude` executable
    /// (`FLOTILLA_CLAUDE_CODE=$(scripts/claude-code)`, which scripts/test sets), and
    /// fails without it.
    #[test]
    fn real_claude_code_defers_then_resumes_the_push_once() {
        let claude = std::env::var_os("FLOTILLA_CLAUDE_CODE").unwrap_or_else(|| {
            panic!(
                "FLOTILLA_CLAUDE_CODE is not set: this test runs the real Claude Code; \
                 run scripts/test, or export FLOTILLA_CLAUDE_CODE=\"$(scripts/claude-code)\""
            )
        });
        let root: PathBuf =
            std::env::temp_dir().join(format!("anthropic-stub-e2e-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let (home, work, remote) = (
            root.join("home"),
            root.join("work"),
            root.join("remote.git"),
        );
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&work).unwrap();
        git(
            &root,
            &[
                "init",
                "-q",
                "--bare",
                "-b",
                "main",
                remote.to_str().unwrap(),
            ],
        );
        git(&work, &["init", "-q", "-b", "main"]);
        git(
            &work,
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "-q",
                "--allow-empty",
                "-m",
                "init",
            ],
        );
        git(
            &work,
            &["remote", "add", "origin", remote.to_str().unwrap()],
        );

        // The hook records its input and answers what the answer file says.
        let answer = root.join("answer");
        let hook = root.join("hook.sh");
        std::fs::write(
            &hook,
            format!(
                "#!/bin/sh\ncat >> {log}\necho >> {log}\n\
                 printf '{{\"hookSpecificOutput\":{{\"hookEventName\":\"PreToolUse\",\"permissionDecision\":\"%s\",\"permissionDecisionReason\":\"test\"}}}}\\n' \"$(cat {answer})\"\n",
                log = root.join("hook-inputs.jsonl").display(),
                answer = answer.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let settings = json!({"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [
            {"type": "command", "command": hook, "timeout": 30, "onFailure": "block"}]}]}});
        let settings_path = root.join("settings.json");
        std::fs::write(&settings_path, settings.to_string()).unwrap();

        let stub = AnthropicStub::start(push_script()).unwrap();
        let claude_cmd = |extra: &[&str]| {
            let mut c = Command::new(&claude);
            c.current_dir(&work)
                .env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                .env("HOME", &home)
                .env("ANTHROPIC_BASE_URL", stub.base_url())
                .env("ANTHROPIC_API_KEY", "sk-ant-stub")
                .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
                .env("CLAUDE_CODE_MAX_RETRIES", "0")
                .args([
                    "-p",
                    "--output-format",
                    "stream-json",
                    "--verbose",
                    "--setting-sources",
                    "",
                ])
                .arg("--settings")
                .arg(&settings_path)
                .args(extra);
            c
        };
        // The stream-json line of type `result` (a resumed run prints more after it).
        let result_line = |out: &std::process::Output| -> Value {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .find(|v| v["type"] == "result")
                .unwrap_or(Value::Null)
        };

        std::fs::write(&answer, "defer").unwrap();
        let first = run(&mut claude_cmd(&["please push"]), Duration::from_secs(120));
        assert_eq!(
            first.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&first.stderr)
        );
        let result = result_line(&first);
        assert_eq!(result["stop_reason"], "tool_deferred", "{result}");
        assert_eq!(result["deferred_tool_use"]["id"], "toolu_push");
        let session = result["session_id"].as_str().unwrap().to_string();
        assert!(
            git(
                &remote,
                &["for-each-ref", "--format=%(refname)", "refs/heads/main"]
            )
            .is_empty(),
            "not pushed yet"
        );

        std::fs::write(&answer, "allow").unwrap();
        let second = run(
            &mut claude_cmd(&["--resume", &session]),
            Duration::from_secs(120),
        );
        assert_eq!(
            second.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&second.stderr)
        );
        assert_eq!(result_line(&second)["result"], "Pushed.");
        assert_eq!(
            git(
                &remote,
                &["for-each-ref", "--format=%(refname)", "refs/heads/main"]
            )
            .trim(),
            "refs/heads/main"
        );
        assert_eq!(stub.tool_result_count("toolu_push"), 1);

        // The hook saw the same call twice: deferred, then allowed.
        let inputs = std::fs::read_to_string(root.join("hook-inputs.jsonl")).unwrap();
        let calls: Vec<Value> = inputs
            .lines()
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(calls.len(), 2);
        for c in &calls {
            assert_eq!(c["tool_use_id"], "toolu_push");
            assert_eq!(c["tool_input"]["command"], "git push origin main");
            assert_eq!(c["session_id"], session.as_str());
        }
        drop(stub);
        let _ = std::fs::remove_dir_all(&root);
    }
}

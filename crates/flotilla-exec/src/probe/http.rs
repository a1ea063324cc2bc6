//! The `http` and `request` checks: a request is answered with a status in range, a
//! body holding `body_contains`, and a JSON value at `json_pointer` (equal to
//! `json_equals` when set); headers may name secrets, redacted from the outcome.

use super::outcome::{ellipsize, excerpt, human, ms, ProbeOutcome, Recorder};
use super::tcp::io_reason;
use super::ProbeContext;
use flotilla_model::values::{EnvValue, StatusRange};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

/// Most of a response body read for `body_contains` / `json_pointer` (1 MiB).
pub const BODY_READ_LIMIT: usize = 1 << 20;

/// The request a check sends.
pub(super) struct HttpReq<'c> {
    pub(super) kind: &'static str,
    pub(super) method: &'c str,
    pub(super) url: &'c str,
    pub(super) headers: Option<&'c BTreeMap<String, EnvValue>>,
    pub(super) body: Option<&'c str>,
    pub(super) json: Option<&'c Value>,
}

/// What the answer must show.
pub(super) struct Expect<'c> {
    pub(super) status: StatusRange,
    pub(super) body_contains: Option<&'c str>,
    pub(super) json_pointer: Option<&'c str>,
    pub(super) json_equals: Option<&'c Value>,
}

/// A reqwest error as a short reason: "connection refused", "no answer within 1 s"…
fn reqwest_reason(e: &reqwest::Error, timeout: Duration) -> String {
    if e.is_timeout() {
        return format!("no answer within {}", human(timeout));
    }
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = src {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return io_reason(io);
        }
        src = s.source();
    }
    // No IO error: describe the innermost cause (e.g. "connection closed before
    // message completed").
    let mut last = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        last = s.to_string();
        src = s.source();
    }
    last
}

/// A JSON value shortened for evidence.
fn short_json(v: &Value) -> String {
    ellipsize(v.to_string())
}

/// `http` and `request`: sends `req`, checks the answer against `expect`.
pub(super) async fn check_http(
    req: HttpReq<'_>,
    expect: Expect<'_>,
    ctx: &ProbeContext<'_>,
    timeout: Duration,
) -> ProbeOutcome {
    let mut rec = Recorder::new();
    let method_name = req.method.to_ascii_uppercase();
    let what = format!("{method_name} {}", req.url);
    let base = json!({"kind": req.kind, "method": method_name, "url": req.url});
    let method = match reqwest::Method::from_bytes(method_name.as_bytes()) {
        Ok(m) => m,
        Err(_) => {
            return rec.misconfigured(
                format!("{what}: `{}` is not an HTTP method", req.method),
                base,
            )
        }
    };
    ensure_tls_provider();
    let client = match reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .pool_max_idle_per_host(0)
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            return rec.misconfigured(format!("{what}: cannot build an HTTP client: {e}"), base)
        }
    };
    let mut builder = client.request(method, req.url);
    if let Some(headers) = req.headers {
        for (name, value) in headers {
            let value = match value {
                // `${secret.NAME}` inside a literal (e.g. "Bearer ${secret.KEY}").
                EnvValue::Literal(v) if v.contains("${secret.") => {
                    let mut missing = None;
                    let text = flotilla_model::interp::substitute(v, |r| {
                        let name = r.strip_prefix("secret.")?;
                        match (ctx.secrets)(name) {
                            Some(val) => {
                                rec.secrets.push((name.to_string(), val.clone()));
                                Some(val)
                            }
                            None => {
                                missing = Some(name.to_string());
                                Some(String::new())
                            }
                        }
                    });
                    match (text, missing) {
                        (Ok(t), None) => t,
                        (_, Some(secret)) => {
                            return rec.misconfigured(
                                format!("{what}: secret `{secret}` for header `{name}` is not set"),
                                base,
                            )
                        }
                        (Err(e), None) => {
                            return rec.misconfigured(format!("{what}: header `{name}`: {e}"), base)
                        }
                    }
                }
                EnvValue::Literal(v) => v.clone(),
                EnvValue::Secret(secret) => match (ctx.secrets)(secret) {
                    Some(v) => {
                        rec.secrets.push((secret.clone(), v.clone()));
                        v
                    }
                    None => {
                        return rec.misconfigured(
                            format!("{what}: secret `{secret}` for header `{name}` is not set"),
                            base,
                        )
                    }
                },
            };
            builder = builder.header(name.as_str(), value);
        }
    }
    if let Some(j) = req.json {
        builder = builder.json(j);
    } else if let Some(b) = req.body {
        builder = builder.body(b.to_string());
    }
    let request = match builder.build() {
        Ok(r) => r,
        Err(e) => {
            return rec.misconfigured(
                format!("{what}: invalid request: {}", reqwest_reason(&e, timeout)),
                base,
            )
        }
    };
    let mut resp = match client.execute(request).await {
        Ok(r) => r,
        Err(e) => {
            let reason = reqwest_reason(&e, timeout);
            let mut detail = base;
            detail["error"] = json!(reason);
            return rec.done(
                false,
                format!("{what}: {reason} ({})", ms(rec.t0.elapsed())),
                detail,
            );
        }
    };
    let status = resp.status();
    let mut body = Vec::new();
    let mut truncated = false;
    let read_err = loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                let room = BODY_READ_LIMIT - body.len();
                if chunk.len() > room {
                    body.extend_from_slice(&chunk[..room]);
                    truncated = true;
                    break None;
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => break None,
            Err(e) => break Some(reqwest_reason(&e, timeout)),
        }
    };
    let elapsed = rec.t0.elapsed();
    let status_text = match status.canonical_reason() {
        Some(r) => format!("{} {r}", status.as_u16()),
        None => status.as_u16().to_string(),
    };
    let head = format!("{what} → {status_text} ({})", ms(elapsed));
    let mut detail = base;
    detail["status"] = json!(status.as_u16());
    detail["body_excerpt"] = json!(excerpt(&body));
    if truncated {
        detail["body_truncated_at"] = json!(BODY_READ_LIMIT);
    }
    if let Some(err) = read_err {
        detail["error"] = json!(err);
        return rec.done(false, format!("{head}; reading the body: {err}"), detail);
    }
    if !expect.status.contains(status.as_u16()) {
        return rec.done(false, format!("{head}; expected {}", expect.status), detail);
    }
    if let Some(needle) = expect.body_contains {
        if !String::from_utf8_lossy(&body).contains(needle) {
            return rec.done(false, format!("{head}; body lacks {needle:?}"), detail);
        }
    }
    if let Some(pointer) = expect.json_pointer {
        let parsed: Value = match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => {
                return rec.done(false, format!("{head}; body is not JSON ({e})"), detail);
            }
        };
        let Some(found) = parsed.pointer(pointer) else {
            return rec.done(false, format!("{head}; json {pointer} missing"), detail);
        };
        detail["json_value"] = found.clone();
        if let Some(want) = expect.json_equals {
            if found != want {
                return rec.done(
                    false,
                    format!(
                        "{head}; json {pointer} = {}, expected {}",
                        short_json(found),
                        short_json(want)
                    ),
                    detail,
                );
            }
        }
        return rec.done(
            true,
            format!("{head}; json {pointer} = {}", short_json(found)),
            detail,
        );
    }
    rec.done(true, head, detail)
}

/// Makes *ring* the process's rustls crypto provider (once). The HTTP client's
/// TLS (for `https://` probes, verified against the system's roots) takes the
/// process default; the authority's client configures its own.
fn ensure_tls_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Err means another provider was installed first: that one is used.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

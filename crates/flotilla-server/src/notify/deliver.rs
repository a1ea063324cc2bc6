//! One webhook's delivery of one message: POST, retried with exponential backoff
//! and full jitter on connection errors, timeouts, 5xx and 429 (whose
//! `Retry-After` in seconds is honoured, RFC 9110 §10.2.3), up to the webhook's
//! `max_attempts`. Other answers (2xx: delivered; other 4xx: refused) end it.

use super::config::Webhook;
use super::shapes::Rendered;
use std::time::Duration;

/// Each attempt's time limit (connect, send, answer).
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// The first retry's delay before jitter; it doubles per attempt.
pub const BACKOFF_BASE: Duration = Duration::from_millis(250);
/// The most a retry waits (a longer `Retry-After` is cut to it).
pub const BACKOFF_CAP: Duration = Duration::from_secs(300);

/// How a delivery ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Whether the receiver took it (2xx).
    pub delivered: bool,
    /// Attempts made.
    pub attempts: u32,
    /// The last HTTP status, if one came.
    pub status: Option<u16>,
    /// Why the last attempt failed, if it did.
    pub error: Option<String>,
}

/// The HTTP client for webhooks (this host's TLS roots; no proxy).
///
/// # Errors
/// When no TLS configuration can be had.
pub fn client() -> Result<reqwest::Client, String> {
    let tls = crate::tls::native_roots_config().map_err(|e| e.to_string())?;
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .timeout(ATTEMPT_TIMEOUT)
        .no_proxy()
        .build()
        .map_err(|e| e.to_string())
}

/// The delay before attempt `attempt + 1` (`attempt` ≥ 1): `Retry-After` when the
/// receiver gave one, else a uniformly random part of `BACKOFF_BASE · 2^(attempt-1)`
/// (full jitter), at most [`BACKOFF_CAP`].
pub fn delay(attempt: u32, retry_after: Option<Duration>) -> Duration {
    if let Some(d) = retry_after {
        return d.min(BACKOFF_CAP);
    }
    let ceiling = BACKOFF_BASE
        .saturating_mul(1u32 << (attempt - 1).min(16))
        .min(BACKOFF_CAP);
    let mut r = [0u8; 4];
    getrandom::fill(&mut r).ok();
    // Half fixed, half random: never a zero wait, still spread.
    let f = 0.5 + 0.5 * (u32::from_le_bytes(r) as f64 / u32::MAX as f64);
    ceiling.mul_f64(f)
}

/// `Retry-After` (RFC 9110 §10.2.3): delay-seconds, or an HTTP-date (then the time
/// from now until it, zero when it is past). Unparsable: `None` (the backoff
/// applies).
fn retry_after(resp: &reqwest::Response) -> Option<Duration> {
    retry_after_value(
        resp.headers()
            .get(reqwest::header::RETRY_AFTER)?
            .to_str()
            .ok()?,
        std::time::SystemTime::now(),
    )
}

fn retry_after_value(v: &str, now: std::time::SystemTime) -> Option<Duration> {
    let v = v.trim();
    match v.parse::<u64>() {
        Ok(secs) => Some(Duration::from_secs(secs)),
        Err(_) => httpdate::parse_http_date(v)
            .ok()
            .map(|at| at.duration_since(now).unwrap_or(Duration::ZERO)),
    }
}

/// POSTs `message` to `hook` until delivered, refused or out of attempts.
pub async fn deliver(client: &reqwest::Client, hook: &Webhook, message: &Rendered) -> Outcome {
    let mut out = Outcome {
        delivered: false,
        attempts: 0,
        status: None,
        error: None,
    };
    loop {
        out.attempts += 1;
        let mut req = client.post(hook.url.clone()).body(message.body.clone());
        for (n, v) in message.headers.iter().chain(&hook.headers) {
            req = req.header(n, v);
        }
        let (retry, wait) = match req.send().await {
            Ok(resp) => {
                let status = resp.status();
                out.status = Some(status.as_u16());
                if status.is_success() {
                    out.delivered = true;
                    out.error = None;
                    return out;
                }
                out.error = Some(format!("answered {status}"));
                let again = status.is_server_error() || status.as_u16() == 429;
                (again, retry_after(&resp))
            }
            Err(e) => {
                out.status = None;
                out.error = Some(flotilla_exec::error::chain(&e));
                (true, None)
            }
        };
        if !retry || out.attempts >= hook.max_attempts {
            return out;
        }
        tokio::time::sleep(delay(out.attempts, wait)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_seconds_or_an_http_date() {
        let now = std::time::UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
        assert_eq!(
            retry_after_value(" 120 ", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            retry_after_value("Sun, 06 Nov 1994 08:50:07 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            retry_after_value("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(Duration::ZERO),
            "a date already past: at once"
        );
        assert_eq!(retry_after_value("soon", now), None);
        assert_eq!(retry_after_value("-1", now), None);
    }

    #[test]
    fn delays_grow_with_jitter_and_honour_retry_after() {
        for attempt in 1..=5u32 {
            let ceiling = BACKOFF_BASE * (1 << (attempt - 1));
            let d = delay(attempt, None);
            assert!(d >= ceiling / 2 && d <= ceiling, "{attempt}: {d:?}");
        }
        assert_eq!(
            delay(1, Some(Duration::from_secs(7))),
            Duration::from_secs(7)
        );
        assert_eq!(delay(1, Some(Duration::from_secs(9999))), BACKOFF_CAP);
        assert!(delay(40, None) <= BACKOFF_CAP);
    }
}

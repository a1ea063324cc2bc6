//! The `tcp` check: a connection is accepted (and, with `stays_open`, not closed by
//! the other end at once).

use super::outcome::{human, ms, ProbeOutcome, Recorder};
use serde_json::json;
use std::time::Duration;

/// A connection error as a short reason: "connection refused", "timed out"…
pub(super) fn io_reason(e: &std::io::Error) -> String {
    use std::io::ErrorKind::*;
    match e.kind() {
        ConnectionRefused => "connection refused".into(),
        ConnectionReset => "connection reset".into(),
        ConnectionAborted => "connection aborted".into(),
        TimedOut => "timed out".into(),
        AddrNotAvailable => "address not available".into(),
        _ => e.to_string(),
    }
}

/// `tcp`: a TCP connect to `address` is accepted.
pub(super) async fn check_tcp(
    address: &str,
    stays_open: Option<Duration>,
    timeout: Duration,
) -> ProbeOutcome {
    let rec = Recorder::new();
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(address)).await {
        Ok(Ok(mut stream)) => {
            let peer = stream.peer_addr().map(|a| a.to_string()).ok();
            if let Some(hold) = stays_open {
                // Closed by the peer (EOF or reset) within `hold`: accepted, then dropped.
                use tokio::io::AsyncReadExt;
                let mut byte = [0u8; 1];
                if let Ok(r) = tokio::time::timeout(hold, stream.read(&mut byte)).await {
                    if matches!(r, Ok(0) | Err(_)) {
                        return rec.done(
                            false,
                            format!(
                                "connect {address}: accepted, then closed by the other end after {} (a forward whose far end is unreachable)",
                                ms(rec.t0.elapsed())
                            ),
                            json!({"kind": "tcp", "address": address, "peer": peer, "error": "closed"}),
                        );
                    }
                }
            }
            drop(stream);
            rec.done(
                true,
                format!("connect {address}: accepted ({})", ms(rec.t0.elapsed())),
                json!({"kind": "tcp", "address": address, "peer": peer}),
            )
        }
        Ok(Err(e)) => rec.done(
            false,
            format!(
                "connect {address}: {} ({})",
                io_reason(&e),
                ms(rec.t0.elapsed())
            ),
            json!({"kind": "tcp", "address": address, "error": io_reason(&e)}),
        ),
        Err(_) => rec.done(
            false,
            format!("connect {address}: no answer within {}", human(timeout)),
            json!({"kind": "tcp", "address": address, "error": "timeout"}),
        ),
    }
}

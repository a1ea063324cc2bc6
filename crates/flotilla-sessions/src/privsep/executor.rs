//! The executor process (see [`super`]): runs the argv lists the API decided to
//! run, as `[privileges] executor_user`, with that user's access and nothing of
//! the API's. One request per connection.

use super::{read_line, recv, send};
use serde::{Deserialize, Serialize};
use std::io;
use std::path::Path;
use std::time::Duration;

/// Runs `argv` (no shell) for at most `timeout_ms`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecRequest {
    /// The program and its arguments.
    pub argv: Vec<String>,
    /// The deadline, ms.
    pub timeout_ms: u64,
}

/// What a run gave, or why it did not run.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "kebab-case")]
pub enum ExecReply {
    /// It ran.
    Ran {
        /// Its exit code (`None`: a signal).
        code: Option<i32>,
        /// Whether the deadline ended it.
        timed_out: bool,
        /// Its standard output, whole.
        stdout: Vec<u8>,
        /// Its standard error, whole.
        stderr: Vec<u8>,
    },
    /// It could not run: why.
    Error {
        /// Why.
        message: String,
    },
}

/// Serves the executor on `listener` until the process ends (`flotilla serve
/// executor`).
///
/// # Errors
/// None today (a failed connection is skipped).
pub fn serve(listener: std::os::unix::net::UnixListener) -> io::Result<()> {
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        std::thread::spawn(move || {
            let reply = match recv::<ExecRequest>(&conn) {
                Ok((req, _)) => run(&req),
                Err(e) => ExecReply::Error {
                    message: format!("a request that does not parse: {e}"),
                },
            };
            let _ = send(&conn, &reply, &[]);
        });
    }
    Ok(())
}

fn run(req: &ExecRequest) -> ExecReply {
    match crate::executor::run(&req.argv, None, Duration::from_millis(req.timeout_ms)) {
        Ok(out) => ExecReply::Ran {
            code: match out.status {
                crate::executor::ExecStatus::Exited { code } => Some(code),
                crate::executor::ExecStatus::Signaled { .. } => None,
            },
            timed_out: out.timed_out,
            stdout: out.stdout,
            stderr: out.stderr,
        },
        Err(e) => ExecReply::Error {
            message: e.to_string(),
        },
    }
}

/// The API's side: runs `argv` through the executor at `socket`.
///
/// # Errors
/// The socket's (the executor is not running).
pub fn call(socket: &Path, argv: &[String], timeout: Duration) -> io::Result<ExecReply> {
    let conn = super::connect(socket)?;
    send(
        &conn,
        &ExecRequest {
            argv: argv.to_vec(),
            timeout_ms: timeout.as_millis() as u64,
        },
        &[],
    )?;
    read_line(&conn)
}

//! Just enough HTTP/1.1 for probes and proxies: each connection carries one request
//! (request line, headers, a `Content-Length` body), gets one answer, and is closed.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The most a request line plus headers may take.
const MAX_HEAD_BYTES: u64 = 64 * 1024;
/// The largest request body accepted (and, for `/echo`, sent back).
const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
/// How long a connection may stall while reading or writing before it is dropped.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
const JSON: &str = "application/json";

/// What every connection is answered with.
#[derive(Debug)]
pub struct Settings {
    /// Status once ready (`--http-status`).
    pub status: u16,
    /// Status to answer until the instant, when `--status-before-ready` was given.
    pub before_ready: Option<(u16, Instant)>,
    /// Body for every path but `/echo` (`--body`), instead of the JSON default.
    pub body: Option<String>,
    /// This process's pid, for the default body.
    pub pid: u32,
    /// Statuses for requests to these paths, once ready (`--path-status`).
    pub path_status: Vec<(String, u16)>,
}

/// A request as far as this server cares.
struct Request {
    /// The target without its query string.
    path: String,
    content_type: Option<String>,
    body: Vec<u8>,
}

/// Why no request could be read.
enum Failure {
    /// The peer closed the connection before sending anything (a TCP probe).
    Closed,
    /// Reading failed or timed out; nothing sensible can be sent back.
    Io,
    /// The request is malformed or unsupported: answer with this status and message.
    Refused(u16, String),
}

impl From<io::Error> for Failure {
    fn from(_: io::Error) -> Self {
        Failure::Io
    }
}

/// Reads one request from `stream`, answers it as `settings` say, and closes it.
pub fn serve_connection(stream: TcpStream, settings: &Settings) {
    // Without timeouts a client that connects and never sends would pin a thread forever.
    let _ = stream.set_read_timeout(Some(IO_TIMEOUT));
    let _ = stream.set_write_timeout(Some(IO_TIMEOUT));
    let (status, content_type, body) = match read_request(&stream) {
        Ok(request) => answer(request, settings),
        Err(Failure::Closed | Failure::Io) => return,
        Err(Failure::Refused(status, message)) => (
            status,
            JSON.to_owned(),
            format!(r#"{{"status":"error","error":{}}}"#, json_string(&message)).into_bytes(),
        ),
    };
    // The peer may already be gone; there is nobody to tell.
    let _ = write_response(&stream, status, &content_type, &body);
}

/// Chooses status, Content-Type and body for a well-formed request.
fn answer(request: Request, settings: &Settings) -> (u16, String, Vec<u8>) {
    let (status, phase) = match settings.before_ready {
        Some((status, ready_at)) if Instant::now() < ready_at => (status, "loading"),
        _ => (
            settings
                .path_status
                .iter()
                .find(|(p, _)| *p == request.path)
                .map_or(settings.status, |(_, s)| *s),
            "ok",
        ),
    };
    if request.path == "/echo" {
        let content_type = request.content_type.unwrap_or_else(|| JSON.to_owned());
        return (status, content_type, request.body);
    }
    let body = match &settings.body {
        Some(body) => body.clone(),
        None => format!(
            r#"{{"status":"{phase}","path":{},"pid":{}}}"#,
            json_string(&request.path),
            settings.pid
        ),
    };
    (status, JSON.to_owned(), body.into_bytes())
}

fn read_request(stream: &TcpStream) -> Result<Request, Failure> {
    let mut reader = BufReader::new(stream);
    let mut head_budget = MAX_HEAD_BYTES;
    let request_line = match read_line(&mut reader, &mut head_budget)? {
        Some(line) => line,
        None => return Err(Failure::Closed),
    };
    let parts: Vec<&str> = request_line.split_whitespace().collect();
    let &[_method, target, version] = parts.as_slice() else {
        return Err(refused(400, "malformed request line"));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(refused(505, "only HTTP/1.x is spoken here"));
    }
    let path = target.split('?').next().unwrap_or_default().to_owned();

    let mut content_length = 0;
    let mut content_type = None;
    let mut expects_continue = false;
    loop {
        let line = read_line(&mut reader, &mut head_budget)?
            .ok_or_else(|| refused(400, "connection closed inside the request head"))?;
        if line.is_empty() {
            break;
        }
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| refused(400, "malformed header line"))?;
        let (name, value) = (name.trim(), value.trim());
        if name.eq_ignore_ascii_case("content-length") {
            content_length = value
                .parse::<usize>()
                .map_err(|_| refused(400, "bad Content-Length"))?;
            if content_length > MAX_BODY_BYTES {
                return Err(refused(413, "request body too large"));
            }
        } else if name.eq_ignore_ascii_case("content-type") {
            content_type = Some(value.to_owned());
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(refused(
                501,
                "Transfer-Encoding is not supported; send Content-Length",
            ));
        } else if name.eq_ignore_ascii_case("expect") {
            expects_continue = value.eq_ignore_ascii_case("100-continue");
        }
    }
    if expects_continue && content_length > 0 {
        // curl sends bodies over 1 KiB only after this (or after waiting a second).
        let mut writer = stream;
        writer.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
    }
    let mut body = vec![0; content_length];
    reader.read_exact(&mut body)?;
    Ok(Request {
        path,
        content_type,
        body,
    })
}

/// Reads one CRLF- or LF-terminated line of the request head, without its terminator.
/// `Ok(None)` means end of stream before any byte.
fn read_line(reader: &mut impl BufRead, budget: &mut u64) -> Result<Option<String>, Failure> {
    let mut line = Vec::new();
    let read = reader.take(*budget).read_until(b'\n', &mut line)?;
    *budget -= read as u64;
    if read == 0 && *budget > 0 {
        return Ok(None);
    }
    if line.pop() != Some(b'\n') {
        return Err(if *budget == 0 {
            refused(431, "request head too large")
        } else {
            refused(400, "connection closed inside the request head")
        });
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    Ok(Some(String::from_utf8_lossy(&line).into_owned()))
}

fn refused(status: u16, message: &str) -> Failure {
    Failure::Refused(status, message.to_owned())
}

fn write_response(
    mut stream: &TcpStream,
    status: u16,
    content_type: &str,
    body: &[u8],
) -> io::Result<()> {
    let mut response = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        reason_phrase(status),
        body.len()
    )
    .into_bytes();
    response.extend_from_slice(body);
    stream.write_all(&response)?;
    stream.flush()
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        400 => "Bad Request",
        404 => "Not Found",
        413 => "Content Too Large",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        // The reason phrase is optional in HTTP/1.1; clients go by the number.
        _ => "",
    }
}

/// `text` as a JSON string literal, quotes included.
fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_string(r#"/a"b\c"#), r#""/a\"b\\c""#);
        assert_eq!(json_string("x\u{1}y\n"), r#""x\u0001y\n""#);
    }

    #[test]
    fn reads_a_line_and_stops_at_the_budget() {
        let mut budget = 100;
        let mut input: &[u8] = b"GET / HTTP/1.1\r\nHost: x\n";
        assert_eq!(
            read_line(&mut input, &mut budget).ok().flatten().as_deref(),
            Some("GET / HTTP/1.1")
        );
        assert_eq!(
            read_line(&mut input, &mut budget).ok().flatten().as_deref(),
            Some("Host: x")
        );
        assert!(matches!(read_line(&mut input, &mut budget), Ok(None)));

        let mut budget = 4;
        let mut input: &[u8] = b"GET / HTTP/1.1\r\n";
        assert!(matches!(
            read_line(&mut input, &mut budget),
            Err(Failure::Refused(431, _))
        ));
    }
}

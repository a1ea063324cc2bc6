//! The sandbox's side of its network: loopback ports bridged to Unix sockets.
//!
//! A runtime with `network = "proxy"` has no network of its own (bubblewrap's
//! `--unshare-net`: a namespace with loopback only). What it may reach, it reaches
//! through the authority, over Unix sockets bound into the sandbox: the model API
//! (the authority injects the credential), an HTTP `CONNECT` proxy with a domain
//! allowlist, and the authority's own API (the gate's hook, the executor). Clients
//! inside speak TCP (`ANTHROPIC_BASE_URL=http://127.0.0.1:…`, `HTTPS_PROXY=…`), so
//! [`run`] — the program bubblewrap starts — listens on loopback ports inside the
//! namespace, relays each connection to its socket byte for byte, and runs the agent
//! as its child; it exits with the agent's status. Claude Code's own sandbox works
//! the same way (a relay inside, the proxy outside).
//!
//! IO only (threads and blocking sockets: a handful of connections at a time).

use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Command, ExitStatus};

/// One bridged port: connections to `127.0.0.1:port` inside the sandbox are relayed
/// to the Unix socket `socket`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forward {
    /// The loopback port inside the sandbox.
    pub port: u16,
    /// The socket outside (bound into the sandbox at the same path).
    pub socket: PathBuf,
}

impl Forward {
    /// Parses `PORT=SOCKET` (`4000=/srv/flotilla/sessions/3/run/model.sock`).
    ///
    /// # Errors
    /// What is wrong, as a sentence.
    pub fn parse(text: &str) -> Result<Forward, String> {
        let (port, socket) = text
            .split_once('=')
            .ok_or_else(|| format!("`{text}` is not PORT=SOCKET"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| format!("`{text}`: `{port}` is not a port"))?;
        if port == 0 {
            return Err(format!("`{text}`: port 0"));
        }
        let socket = PathBuf::from(socket);
        if !socket.is_absolute() {
            return Err(format!("`{text}`: the socket path is not absolute"));
        }
        Ok(Forward { port, socket })
    }

    /// `PORT=SOCKET`, as [`Forward::parse`] reads it.
    pub fn to_arg(&self) -> String {
        format!("{}={}", self.port, self.socket.display())
    }
}

/// Binds every forward's port on 127.0.0.1, relays connections in threads, runs
/// `program` with `args` (inheriting standard input, output and error) and returns
/// its exit status once it ends.
///
/// # Errors
/// A port that cannot be bound, or the program that cannot be started.
pub fn run(forwards: &[Forward], program: &str, args: &[String]) -> io::Result<ExitStatus> {
    for f in forwards {
        let listener = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, f.port)))?;
        let socket = f.socket.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let socket = socket.clone();
                std::thread::spawn(move || relay(conn, &socket));
            }
        });
    }
    Command::new(program).args(args).status()
}

/// Copies bytes both ways between `tcp` and a new connection to `socket` until
/// either side closes.
fn relay(tcp: TcpStream, socket: &std::path::Path) {
    let Ok(unix) = UnixStream::connect(socket) else {
        return;
    };
    let (Ok(mut tcp_in), Ok(mut unix_in)) = (tcp.try_clone(), unix.try_clone()) else {
        return;
    };
    let (mut tcp_out, mut unix_out) = (tcp, unix);
    let up = std::thread::spawn(move || {
        let _ = io::copy(&mut tcp_in, &mut unix_out);
        let _ = unix_out.shutdown(std::net::Shutdown::Write);
    });
    let _ = io::copy(&mut unix_in, &mut tcp_out);
    let _ = tcp_out.shutdown(std::net::Shutdown::Write);
    let _ = up.join();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn forwards_parse_and_print() {
        let f = Forward::parse("4000=/run/x/model.sock").unwrap();
        assert_eq!(f.port, 4000);
        assert_eq!(f.to_arg(), "4000=/run/x/model.sock");
        assert!(Forward::parse("4000").is_err());
        assert!(Forward::parse("0=/x").is_err());
        assert!(Forward::parse("x=/x").is_err());
        assert!(Forward::parse("1=relative").is_err());
    }

    #[test]
    fn a_connection_is_relayed_both_ways() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("s.sock");
        let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let echo = std::thread::spawn(move || {
            let (mut c, _) = listener.accept().unwrap();
            let mut buf = Vec::new();
            c.read_to_end(&mut buf).unwrap();
            c.write_all(&buf).unwrap();
            c.write_all(b"!").unwrap();
        });
        let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = tcp.local_addr().unwrap().port();
        let s2 = sock.clone();
        std::thread::spawn(move || {
            let (conn, _) = tcp.accept().unwrap();
            relay(conn, &s2);
        });
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.write_all(b"hello").unwrap();
        c.shutdown(std::net::Shutdown::Write).unwrap();
        let mut got = String::new();
        c.read_to_string(&mut got).unwrap();
        assert_eq!(got, "hello!");
        echo.join().unwrap();
    }
}

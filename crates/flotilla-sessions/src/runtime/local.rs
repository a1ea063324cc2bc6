//! The local runtime: the agent's process in a bubblewrap sandbox on the authority's
//! host, started, stopped and cleaned up by the root launcher
//! ([`crate::privsep::launcher`], the only piece that may), one request per call
//! over its Unix socket.

use super::{HomeReset, Removed, Running, Runtime, RuntimeKind, StartSpec, Started};
use crate::privsep::launcher::{self, Reply, Request};
use std::io;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

/// The bubblewrap runtime, reached through the launcher listening on `socket`.
#[derive(Debug, Clone)]
pub struct Local {
    /// The launcher's socket.
    pub socket: PathBuf,
}

impl Local {
    fn call(&self, req: Request) -> io::Result<Reply> {
        launcher::call(&self.socket, &req, &[])
    }

    fn done(&self, req: Request) -> io::Result<()> {
        match self.call(req)? {
            Reply::Ok => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    fn reset(&self, req: Request) -> io::Result<HomeReset> {
        match self.call(req)? {
            Reply::Reset {
                removed,
                transcript,
            } => Ok(HomeReset {
                removed,
                transcript,
            }),
            other => Err(unexpected(&other)),
        }
    }
}

fn unexpected(reply: &Reply) -> io::Error {
    io::Error::other(format!("the launcher answered {reply:?}"))
}

impl Runtime for Local {
    fn kind(&self) -> RuntimeKind {
        RuntimeKind::Local
    }

    fn own(&self, id: u64, uid: u32) -> io::Result<()> {
        self.done(Request::Own { id, uid })
    }

    fn reset_home(&self, id: u64, agent_session: &str) -> io::Result<HomeReset> {
        self.reset(Request::ResetHome {
            id,
            agent_session: agent_session.to_string(),
        })
    }

    fn has_transcript(&self, id: u64, agent_session: &str) -> io::Result<bool> {
        self.reset(Request::HasTranscript {
            id,
            agent_session: agent_session.to_string(),
        })
        .map(|r| r.transcript)
    }

    fn give_credential(&self, id: u64, uid: u32, token: &str) -> io::Result<()> {
        self.done(Request::Token {
            id,
            uid,
            token: token.to_string(),
        })
    }

    fn give_sockets(&self, id: u64, uid: u32) -> io::Result<()> {
        self.done(Request::Sockets { id, uid })
    }

    fn start(&self, spec: StartSpec) -> io::Result<Started> {
        let StartSpec {
            id,
            boot: _,
            uid,
            repo,
            program,
            args,
            env,
            stdio,
        } = spec;
        let request = Request::Spawn {
            id,
            uid,
            repo,
            program,
            args,
            env,
        };
        let fds = stdio.each_ref().map(|f| f.as_raw_fd());
        let (pid, start_ticks, conn) = launcher::spawn(&self.socket, &request, &fds)?;
        Ok(Started {
            pid,
            start_ticks,
            pod: None,
            exit: Box::new(move || launcher::wait_exit(conn)),
        })
    }

    fn running(&self, r: &Running) -> bool {
        flotilla_exec::process_start_ticks(r.pid) == Some(r.start_ticks)
    }

    fn stop(&self, r: &Running) -> io::Result<()> {
        self.done(Request::Kill { pid: r.pid })
    }

    fn remove(&self, id: u64) -> io::Result<Removed> {
        match self.call(Request::Remove { id })? {
            Reply::Removed {
                bytes,
                files,
                left_bytes,
                left_files,
                problem,
            } => Ok(Removed {
                elsewhere: Vec::new(),
                bytes,
                files,
                left_bytes,
                left_files,
                problem,
            }),
            other => Err(unexpected(&other)),
        }
    }
}

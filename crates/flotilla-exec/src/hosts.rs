//! Host management over SSH: installing this flotilla on a host ([`install`]),
//! removing it ([`uninstall`]) and checking what a host offers ([`check`]).
//!
//! Layout on a host (under [`REMOTE_ROOT`](crate::ssh::REMOTE_ROOT),
//! `$HOME/.local/lib/flotilla`), the install root an agent's self-update uses too
//! (`flotilla_release::install`): `versions/<version>-<first 12 hex digits of the
//! binary's SHA-256>/flotilla`; `current`, a symbolic link to the version in use;
//! `previous`, one to the version `current` named before (for a rollback). A
//! version directory is written under a temporary name, checked against the digest,
//! then renamed into place; each link is replaced by renaming a new link over it.
//! Older versions, and leftovers of interrupted copies, are removed. A binary is
//! never overwritten in place, so a running `flotilla host serve` keeps its file. An
//! install of the older layout (`releases/<version>-<sha>` and `current`) is
//! converted by the next install: the release `current` named moves to `versions/`
//! and becomes `previous`, and `releases/` goes.

pub use crate::preflight::Finding;
use crate::remote::{self, Call, HostFacts, Reply};
use crate::ssh::{Pool, TransportError, REMOTE_ROOT};
use flotilla_model::Topology;
use serde::Serialize;
use std::path::Path;
use std::time::{Duration, Instant};

/// Time allowed for a host management command.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// Why an install failed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The host could not be used.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The local binary could not be read.
    #[error("cannot read {path}")]
    Binary {
        /// The binary.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The host's platform is not this binary's.
    #[error("host `{host}` is {remote}, this binary is built for {local}: install a {remote} build of flotilla there (`flotilla host install {host} --binary PATH`)")]
    Platform {
        /// Host.
        host: String,
        /// Its platform.
        remote: String,
        /// This binary's platform.
        local: String,
    },
    /// A remote command failed.
    #[error("host `{host}`: {what} failed (exit {code}): {stderr}")]
    Remote {
        /// Host.
        host: String,
        /// Which step.
        what: &'static str,
        /// Exit code, or `signal`.
        code: String,
        /// What it printed.
        stderr: String,
    },
}

/// What [`install`] did.
#[derive(Debug, Clone, Serialize)]
pub struct InstallReport {
    /// Host.
    pub host: String,
    /// The version directory, relative to the install root (`versions/<v>-<sha12>`).
    pub release: String,
    /// `sha256:` of the installed binary.
    pub sha256: String,
    /// Bytes copied (0 when that release was already there, intact).
    pub copied_bytes: u64,
    /// What `current` pointed at before (`None`: nothing), now `previous` (when it
    /// is another version).
    pub previous: Option<String>,
    /// What the installed binary says when asked `hello`, measured on the host.
    pub facts: HostFacts,
}

fn remote_err(host: &str, what: &'static str, out: &crate::ssh::Output) -> InstallError {
    InstallError::Remote {
        host: host.to_string(),
        what,
        code: out
            .code
            .map(|c| c.to_string())
            .unwrap_or_else(|| "signal".into()),
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    }
}

/// `uname -sm` output → `<os>-<arch>` in the inventory's spelling.
pub fn platform_from_uname(uname: &str) -> String {
    let mut w = uname.split_whitespace();
    let os = w.next().unwrap_or("").to_ascii_lowercase();
    let arch = match w.next().unwrap_or("") {
        "arm64" | "aarch64" => "aarch64",
        "amd64" | "x86_64" => "x86_64",
        other => other,
    };
    format!("{os}-{arch}")
}

/// What a user on `platform` (`<os>-<arch>`, as [`platform_from_uname`] names it)
/// should know of how far Flotilla was tested there: `None` on Linux, where its CI
/// builds and runs every test; else a sentence saying what was not run.
pub fn platform_caveat(platform: &str) -> Option<&'static str> {
    match platform.split('-').next().unwrap_or("") {
        "linux" => None,
        "darwin" => Some(
            "macOS: built on crates that support it (libproc); not compiled or run in Flotilla's CI",
        ),
        _ => Some(
            "not a platform Flotilla is built for: what it measures of processes there is \"not implemented\"",
        ),
    }
}

/// The platform of `host` (`<os>-<arch>`), measured there with `uname -sm`.
///
/// # Errors
/// [`InstallError`]: transport, or `uname` failing there.
pub async fn platform(fleet: &Pool, host: &str) -> Result<String, InstallError> {
    let out = fleet.run(host, "uname -sm", b"", COMMAND_TIMEOUT).await?;
    if out.code != Some(0) {
        return Err(remote_err(host, "uname -sm", &out));
    }
    Ok(platform_from_uname(&String::from_utf8_lossy(&out.stdout)))
}

const SHA_FN: &str = "digest() { if command -v sha256sum >/dev/null 2>&1; then sha256sum \"$1\" | cut -d' ' -f1; else shasum -a 256 \"$1\" | cut -d' ' -f1; fi; }";

/// Installs `binary` (this flotilla, or a build for the host's platform) on `host`:
/// see the module docs for the layout. Idempotent: an intact release already there
/// is not copied again.
///
/// # Errors
/// [`InstallError`]: transport, platform mismatch, a failed remote step, or a
/// checksum mismatch after the copy (the partial copy is removed).
pub async fn install(
    fleet: &Pool,
    host: &str,
    binary: &Path,
    check_platform: bool,
) -> Result<InstallReport, InstallError> {
    let bytes = tokio::fs::read(binary)
        .await
        .map_err(|source| InstallError::Binary {
            path: binary.display().to_string(),
            source,
        })?;
    let sha = flotilla_model::digest::sha256_hex(&bytes);
    let hex = sha.trim_start_matches("sha256:").to_string();
    if check_platform {
        let out = fleet.run(host, "uname -sm", b"", COMMAND_TIMEOUT).await?;
        let remote = platform_from_uname(&String::from_utf8_lossy(&out.stdout));
        let local = remote::this_platform();
        if remote != local {
            return Err(InstallError::Platform {
                host: host.into(),
                remote,
                local,
            });
        }
    }
    // An intact copy already there (any version label), else a fresh one in an
    // incoming directory, checked by digest.
    let present = format!(
        "{SHA_FN}; for r in \"{REMOTE_ROOT}\"/versions/*-{short}; do \
         [ -x \"$r/flotilla\" ] && [ \"$(digest \"$r/flotilla\")\" = {hex} ] && {{ printf 'versions/%s' \"${{r##*/}}\"; exit 0; }}; done; exit 1",
        short = &hex[..12]
    );
    let out = fleet.run(host, &present, b"", COMMAND_TIMEOUT).await?;
    let mut copied_bytes = 0;
    let staged = if out.code == Some(0) {
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    } else {
        let copy = format!(
            "set -eu; {SHA_FN}; root=\"{REMOTE_ROOT}\"; mkdir -p \"$root/versions\"; \
             tmp=$(mktemp -d \"$root/versions/.incoming.XXXXXX\"); \
             cat > \"$tmp/flotilla\"; chmod 755 \"$tmp/flotilla\"; got=$(digest \"$tmp/flotilla\"); \
             if [ \"$got\" != {hex} ]; then rm -rf \"$tmp\"; echo \"checksum mismatch after copy: sha256:$got\" >&2; exit 3; fi; \
             printf 'versions/%s' \"${{tmp##*/}}\""
        );
        let out = fleet
            .run(
                host,
                &copy,
                &bytes,
                COMMAND_TIMEOUT.max(Duration::from_secs(300)),
            )
            .await?;
        if out.code != Some(0) {
            return Err(remote_err(host, "copying the binary", &out));
        }
        copied_bytes = bytes.len() as u64;
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    // Before anything points at it: it must run there and speak our protocol.
    let binary_there = format!("{REMOTE_ROOT}/{staged}/flotilla");
    let facts = match remote::call_binary(fleet, host, &binary_there, Call::Hello, COMMAND_TIMEOUT)
        .await
    {
        Ok(Reply::Hello { facts }) => facts,
        Ok(other) => {
            discard(fleet, host, &staged).await;
            return Err(InstallError::Transport(TransportError::Failed {
                host: host.into(),
                detail: format!(
                    "the new binary answered hello with {other:?}; nothing was switched"
                ),
            }));
        }
        Err(e) => {
            discard(fleet, host, &staged).await;
            return Err(InstallError::Transport(TransportError::Failed {
                host: host.into(),
                detail: format!("the new binary does not work there ({e}); nothing was switched"),
            }));
        }
    };
    let release = format!("versions/{}-{}", facts.version, &hex[..12]);
    // A link replaced by renaming a new one over it (GNU `mv -T`, BSD `mv -h`).
    let relink = |link: &str, to: &str| {
        format!(
            "ln -sfn \"{to}\" \"$root/.{link}.$$\"; \
             mv -T \"$root/.{link}.$$\" \"$root/{link}\" 2>/dev/null || mv -fh \"$root/.{link}.$$\" \"$root/{link}\""
        )
    };
    let switch = format!(
        "set -eu; root=\"{REMOTE_ROOT}\"; prev=$(readlink \"$root/current\" 2>/dev/null || true); \
         case \"$prev\" in releases/*) n=\"${{prev#releases/}}\"; mkdir -p \"$root/versions\"; \
           if [ -d \"$root/$prev\" ] && [ ! -e \"$root/versions/$n\" ]; then mv \"$root/$prev\" \"$root/versions/$n\"; fi; \
           prev=\"versions/$n\";; esac; \
         if [ \"{staged}\" != \"{release}\" ]; then \
           if [ -e \"$root/{release}\" ]; then mv \"$root/{release}\" \"$root/{release}.broken.$$\"; fi; \
           mv \"$root/{staged}\" \"$root/{release}\"; fi; \
         {current}; \
         if [ -n \"$prev\" ] && [ \"$prev\" != \"{release}\" ] && [ -d \"$root/$prev\" ]; then {previous}; fi; \
         keep=$(readlink \"$root/previous\" 2>/dev/null || true); \
         for d in \"$root\"/versions/* \"$root\"/versions/.incoming.*; do [ -e \"$d\" ] || continue; case \"versions/${{d##*/}}\" in \"{release}\"|\"$keep\") ;; *) rm -rf \"$d\" ;; esac; done; \
         rm -rf \"$root/releases\"; \
         printf '%s' \"$prev\"",
        current = relink("current", &release),
        previous = relink("previous", "$prev"),
    );
    let out = fleet.run(host, &switch, b"", COMMAND_TIMEOUT).await?;
    if out.code != Some(0) {
        return Err(remote_err(host, "switching `current`", &out));
    }
    let previous =
        Some(String::from_utf8_lossy(&out.stdout).trim().to_string()).filter(|p| !p.is_empty());
    let facts = HostFacts {
        executable: facts.executable.replace(&staged, &release),
        ..facts
    };
    Ok(InstallReport {
        host: host.into(),
        release,
        sha256: sha,
        copied_bytes,
        previous,
        facts,
    })
}

/// Why [`uninstall`] did not remove anything.
#[derive(Debug, thiserror::Error)]
pub enum UninstallError {
    /// The host could not be used.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// Processes run from the install: components' log writers, `host serve`, an
    /// agent.
    #[error("host `{host}`: flotilla still runs there from {root} ({}): stop what it runs first (`flotilla down` of its components, its agent), or uninstall with --force", processes.iter().map(|(pid, cmd)| format!("pid {pid}: {cmd}")).collect::<Vec<_>>().join("; "))]
    Running {
        /// Host.
        host: String,
        /// The install root, resolved there.
        root: String,
        /// The processes whose executable is under it: pid and command line (its
        /// first 120 bytes, arguments joined by spaces).
        processes: Vec<(u32, String)>,
    },
    /// The remote command failed.
    #[error("host `{host}`: removing the install failed (exit {code}): {stderr}")]
    Remote {
        /// Host.
        host: String,
        /// Exit code, or `signal`.
        code: String,
        /// What it printed.
        stderr: String,
    },
}

/// What [`uninstall`] removed.
#[derive(Debug, Clone, Serialize)]
pub struct UninstallReport {
    /// Host.
    pub host: String,
    /// The install root, resolved there (`None`: there was none).
    pub removed: Option<String>,
    /// The state directory there: removed with `purge`, else kept.
    pub state_dir: String,
    /// Whether Flotilla's files in the state directory were removed (`purge`).
    pub purged: bool,
    /// With `purge`: the entries of the state directory Flotilla did not write, kept
    /// (the directory itself is removed only when nothing is left in it).
    pub kept: Vec<String>,
}

/// The entries of a host's state directory that Flotilla writes (DESIGN.md, "Where
/// state lives"): projects' state, the agent's own files, backups, and a layout from
/// before projects. `--purge` removes these and nothing else: a user's file there
/// (and `secrets.env`, which the user writes) is kept.
pub const STATE_ENTRIES: &[&str] = &[
    "projects",
    "agent",
    flotilla_store::backup::BACKUPS_DIR,
    "state.db",
    "state.db-wal",
    "state.db-shm",
    "logs",
];

fn removal_failed(host: &str, out: &crate::ssh::Output) -> UninstallError {
    UninstallError::Remote {
        host: host.into(),
        code: out.code.map_or("signal".into(), |c| c.to_string()),
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    }
}

/// Removes what [`install`] put on `host` (the install root, [`REMOTE_ROOT`]), and
/// with `purge` Flotilla's entries of its state directory too ([`STATE_ENTRIES`] of
/// the host's `state_dir`, else `$XDG_STATE_HOME/flotilla`, else
/// `~/.local/state/flotilla` there), then the directory when nothing else is left in
/// it (what is left is listed in [`UninstallReport::kept`]). Refused while
/// a process runs from the install (its executable under the root: components' log
/// writers, an agent), unless `force`. Idempotent: no install is not an error.
///
/// # Errors
/// [`UninstallError`]: transport, something still running, or the removal failing.
pub async fn uninstall(
    fleet: &Pool,
    host: &str,
    purge: bool,
    force: bool,
) -> Result<UninstallReport, UninstallError> {
    let state = match &fleet.host(host)?.state_dir {
        Some(d) => crate::remote::shell_path(d),
        None => "\"${XDG_STATE_HOME:-$HOME/.local/state}/flotilla\"".to_string(),
    };
    // Which processes run an executable under the root: /proc where there is one,
    // else `ps` (whose `comm` is the executable's path on macOS).
    let script = format!(
        "set -eu; root=\"{REMOTE_ROOT}\"; state={state}; printf 'state %s\\n' \"$state\"; \
         real=$(cd \"$root\" 2>/dev/null && pwd -P) || {{ echo absent; exit 0; }}; \
         printf 'root %s\\n' \"$real\"; \
         if [ -d /proc/self ]; then for p in /proc/[0-9]*; do e=$(readlink \"$p/exe\" 2>/dev/null) || continue; \
           case \"$e\" in \"$real\"/*) printf 'pid %s %s\\n' \"${{p#/proc/}}\" \"$(tr '\\0' ' ' < \"$p/cmdline\" 2>/dev/null | cut -c1-120)\";; esac; done; \
         else ps -axo pid=,comm= | while read -r pid comm; do case \"$comm\" in \"$real\"/*) echo \"pid $pid $comm\";; esac; done; fi"
    );
    let out = fleet.run(host, &script, b"", COMMAND_TIMEOUT).await?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    if out.code != Some(0) {
        return Err(removal_failed(host, &out));
    }
    let field = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k).map(str::to_string))
    };
    let state_dir = field("state ").unwrap_or_default();
    let root = field("root ");
    let processes: Vec<(u32, String)> = text
        .lines()
        .filter_map(|l| {
            let (pid, cmd) = l.strip_prefix("pid ")?.split_once(' ').unwrap_or((l, ""));
            Some((pid.parse().ok()?, cmd.trim().to_string()))
        })
        .collect();
    if let Some(root) = &root {
        if !processes.is_empty() && !force {
            return Err(UninstallError::Running {
                host: host.into(),
                root: root.clone(),
                processes,
            });
        }
    }
    let mut remove = String::from("set -eu; ");
    if root.is_some() {
        remove.push_str(&format!("rm -rf \"{REMOTE_ROOT}\"; "));
    }
    if purge {
        // Only Flotilla's entries; then the directory if that emptied it; then what
        // is left, one `kept NAME` line each.
        let entries = STATE_ENTRIES.join(" ");
        remove.push_str(&format!(
            "if [ -d {state} ]; then (cd {state} && rm -rf {entries} && for e in * .[!.]* ..?*; do \
             [ -e \"$e\" ] || [ -L \"$e\" ] || continue; printf 'kept %s\\n' \"$e\"; done); \
             rmdir {state} 2>/dev/null || true; fi; "
        ));
    }
    remove.push_str("true");
    let out = fleet.run(host, &remove, b"", COMMAND_TIMEOUT).await?;
    if out.code != Some(0) {
        return Err(removal_failed(host, &out));
    }
    let kept = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("kept ").map(str::to_string))
        .collect();
    Ok(UninstallReport {
        host: host.into(),
        removed: root,
        state_dir,
        purged: purge,
        kept,
    })
}

/// What [`check`] found on a host.
#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    /// Host.
    pub host: String,
    /// Every finding, in order.
    pub findings: Vec<Finding>,
}

impl CheckReport {
    /// Whether every finding is fine.
    pub fn ok(&self) -> bool {
        self.findings.iter().all(|f| f.ok)
    }
}

/// The programs `host`'s components need there, with the directory a relative one
/// is found from (the component's `cwd`, relative to the host's home): each managed
/// component's program, `ssh` for tunnels, sorted, without repeats.
pub fn tools_needed(topology: &Topology, host: &str) -> Vec<(String, Option<String>)> {
    let mut tools: Vec<(String, Option<String>)> = topology
        .components
        .iter()
        .filter(|c| c.host == host && c.is_managed())
        .filter_map(|c| {
            if c.tunnel.is_some() {
                Some(("ssh".to_string(), None))
            } else {
                let program = c.command.first()?.clone();
                let cwd = (program.contains('/') && !program.starts_with('/'))
                    .then(|| c.cwd.clone())
                    .flatten();
                Some((program, cwd))
            }
        })
        .collect();
    tools.sort();
    tools.dedup();
    tools
}

/// Checks `host`: reachable (and how long the handshake took), its platform against
/// the inventory's, the installed flotilla (version and protocol against this one),
/// free disk space in its home, and the tools its components need. Problems are
/// findings, not errors, except that an unreachable host ends the check there.
pub async fn check(fleet: &Pool, topology: &Topology, host: &str) -> CheckReport {
    let mut findings = Vec::new();
    let mut push = |check: &str, ok: bool, saw: String| {
        findings.push(Finding {
            check: check.into(),
            ok,
            saw,
        })
    };
    let began = Instant::now();
    if let Err(e) = fleet.connect(host).await {
        push("reachable", false, e.to_string());
        return CheckReport {
            host: host.into(),
            findings,
        };
    }
    push(
        "reachable",
        true,
        format!("SSH connection in {} ms", began.elapsed().as_millis()),
    );
    let tools = tools_needed(topology, host);
    // Relative paths on a host are relative to its home directory.
    let mut script =
        String::from("cd \"$HOME\" 2>/dev/null; uname -sm; df -Pk \"$HOME\" | tail -n 1; ");
    // One line per tool: `tool<TAB>ok|missing<TAB>index<TAB>where`.
    for (i, (t, cwd)) in tools.iter().enumerate() {
        let q = remote::shell_quote(t);
        let cd = cwd
            .as_ref()
            .map(|d| format!("cd {} 2>/dev/null; ", remote::shell_quote(d)))
            .unwrap_or_default();
        if t.contains('/') {
            script.push_str(&format!(
                "({cd}if [ -x {q} ]; then printf 'tool\\tok\\t{i}\\t%s\\n' \"$(pwd)\"; else printf 'tool\\tmissing\\t{i}\\t\\n'; fi); "
            ));
        } else {
            script.push_str(&format!(
                "if p=$(command -v {q} 2>/dev/null); then printf 'tool\\tok\\t{i}\\t%s\\n' \"$p\"; else printf 'tool\\tmissing\\t{i}\\t\\n'; fi; "
            ));
        }
    }
    match fleet.run(host, &script, b"", COMMAND_TIMEOUT).await {
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            let mut lines = text.lines();
            let platform = platform_from_uname(lines.next().unwrap_or(""));
            let declared = topology.hosts.get(host).and_then(|h| h.platform.clone());
            let caveat = platform_caveat(&platform)
                .map(|c| format!("; {c}"))
                .unwrap_or_default();
            match declared {
                Some(d) if d != platform => push(
                    "platform",
                    false,
                    format!("{platform}, but the inventory says {d}{caveat}"),
                ),
                Some(_) => push("platform", true, format!("{platform}{caveat}")),
                None => push(
                    "platform",
                    true,
                    format!("{platform} (not declared){caveat}"),
                ),
            }
            let df: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
            match df.get(3).and_then(|k| k.parse::<u64>().ok()) {
                Some(kib) => push(
                    "disk",
                    kib > 1024 * 1024,
                    format!("{} MiB free in the home directory", kib / 1024),
                ),
                None => push("disk", false, "df gave no answer".into()),
            }
            for line in lines {
                let w: Vec<&str> = line.splitn(4, '\t').collect();
                let [_, status, index, at] = w[..] else {
                    continue;
                };
                let Some((tool, cwd)) = index.parse::<usize>().ok().and_then(|i| tools.get(i))
                else {
                    continue;
                };
                let ok = status == "ok";
                let from = cwd
                    .as_ref()
                    .map(|d| format!(" (from cwd {d})"))
                    .unwrap_or_default();
                push(
                    &format!("tool {tool}"),
                    ok,
                    if !ok {
                        format!("not found there{from}")
                    } else if tool.contains('/') {
                        format!("executable{from}, in {at}")
                    } else {
                        format!("found at {at}")
                    },
                );
            }
        }
        Err(e) => push("platform", false, e.to_string()),
    }
    match remote::call(fleet, host, Call::Hello, COMMAND_TIMEOUT).await {
        Ok(Reply::Hello { facts: f }) => push(
            "flotilla",
            true,
            format!(
                "{} (protocol {}) at {}, {}; state directory {}",
                f.version,
                remote::PROTOCOL,
                f.executable,
                f.executable_sha256,
                f.state_dir
            ),
        ),
        Ok(other) => push("flotilla", false, format!("unexpected answer {other:?}")),
        Err(e) => push("flotilla", false, e.to_string()),
    }
    CheckReport {
        host: host.into(),
        findings,
    }
}

/// Removes a staged copy that must not be used (an incoming directory only: an
/// installed release is left alone).
async fn discard(fleet: &Pool, host: &str, staged: &str) {
    if staged.starts_with("versions/.incoming.") {
        let _ = fleet
            .run(
                host,
                &format!("rm -rf \"{REMOTE_ROOT}/{staged}\""),
                b"",
                COMMAND_TIMEOUT,
            )
            .await;
    }
}

/// `flotilla discover` on the remote `host`, through `fleet` (over SSH to its `host
/// serve`, or through the authority to its agent, which answers with the same host
/// mode): [`crate::discover::discover`] runs there with the host's snapshot of
/// `topology`, within `timeout`. The snapshot holds that host's components only: the
/// other hosts' names go in [`crate::discover::Options::taken_names`] (added here).
///
/// # Errors
/// [`TransportError`]: unreachable, not installed, version skew, or a host whose
/// flotilla predates `discover` (it says to run `flotilla host install`).
pub async fn discover(
    fleet: &dyn crate::transport::Transport,
    topology: &Topology,
    host: &str,
    mut options: crate::discover::Options,
    timeout: Duration,
) -> Result<crate::discover::Discovery, TransportError> {
    let others = topology
        .components
        .iter()
        .map(|c| &c.name)
        .filter(|n| !options.taken_names.contains(n))
        .cloned()
        .collect::<Vec<_>>();
    options.taken_names.extend(others);
    let call = Call::Discover {
        snapshot: topology.snapshot(host),
        options,
    };
    match fleet.call(host, call, timeout, None).await {
        Ok(Reply::Discovered { report }) => Ok(report),
        Ok(other) => Err(TransportError::Failed {
            host: host.to_string(),
            detail: format!("unexpected answer to discover: {other:?}"),
        }),
        Err(TransportError::Failed { host, detail })
            if detail.contains("unknown variant `discover`") =>
        {
            Err(TransportError::Failed {
                detail: format!(
                    "the flotilla installed there predates `discover`: run `flotilla host install {host}`"
                ),
                host,
            })
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mac_is_named_and_told_it_is_not_run_in_ci_while_linux_is_not() {
        let mac = platform_from_uname("Darwin arm64\n");
        assert_eq!(mac, "darwin-aarch64");
        assert!(platform_caveat(&mac).is_some_and(|c| c.contains("not compiled or run")));
        assert_eq!(platform_caveat(&platform_from_uname("Linux x86_64")), None);
        assert!(platform_caveat("freebsd-x86_64").is_some_and(|c| c.contains("not implemented")));
    }
}

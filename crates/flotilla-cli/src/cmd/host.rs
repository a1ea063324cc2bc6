//! `flotilla host list|check|install|serve`: the inventory's hosts, what a host
//! offers, installing this flotilla on a host, and the host mode the controller
//! talks to over SSH (`serve`, not for humans).

use crate::{render, Cli, EXIT_OK, EXIT_REFUSED};
use flotilla_exec::hosts;
use std::path::PathBuf;

/// Arguments of `flotilla host`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub command: HostCommand,
}

/// `flotilla host` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum HostCommand {
    /// List the inventory's hosts (no network).
    List {
        /// Print JSON: [{name, transport, address, user, port, platform, components}].
        #[arg(long)]
        json: bool,
    },
    /// Check a host: reachable, platform, installed flotilla, disk, the tools its
    /// components need. Exit 0 when all is fine, 1 otherwise.
    Check {
        /// Host name in the inventory.
        host: String,
        /// Print JSON: {host, findings: [{check, ok, saw}]}.
        #[arg(long)]
        json: bool,
    },
    /// Copy this flotilla to a host (versions/<version>-<sha12>/flotilla, then the
    /// `current` link; `previous` names the one before), checked by SHA-256;
    /// idempotent.
    Install {
        /// Host name in the inventory.
        host: String,
        /// Install this binary instead of the running one (e.g. a build for the
        /// host's platform); the platform check is skipped.
        #[arg(long, value_name = "PATH", conflicts_with = "release")]
        binary: Option<PathBuf>,
        /// Install a signed release instead (its manifest or `.minisig`): the
        /// signature is checked against --trusted-key, then the artifact for the
        /// host's platform (measured there with `uname -sm`) is taken from --artifact
        /// and checked by size and SHA-256 before it is copied. Refused with the reason
        /// otherwise, and nothing is copied.
        #[arg(long, value_name = "MANIFEST", requires = "trusted_key")]
        release: Option<PathBuf>,
        /// A minisign public key the release must be signed with (once or twice).
        #[arg(long = "trusted-key", value_name = "FILE")]
        trusted_key: Vec<PathBuf>,
        /// The release's artifact files (the one for the host's platform is used).
        #[arg(long = "artifact", value_name = "FILE")]
        artifacts: Vec<PathBuf>,
        /// Print JSON: {host, release, sha256, copied_bytes, previous, facts}.
        #[arg(long)]
        json: bool,
    },
    /// Remove what `host install` put on a host, keeping its state unless --purge;
    /// refused while flotilla runs from it, unless --force.
    Uninstall(super::host_uninstall::Options),
    /// Host mode: read one JSON request on stdin, answer one JSON response on
    /// stdout (run by the controller over SSH).
    #[command(hide = true)]
    Serve,
}

/// Runs the subcommand; returns the exit status.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    if let HostCommand::Serve = args.command {
        return serve(cli);
    }
    let (loaded, validated) = match super::topology_or_exit(cli)? {
        Ok(v) => v,
        Err(code) => return Ok(code),
    };
    let topology = validated.topology;
    let ssh_host = |name: &str| -> anyhow::Result<()> {
        match topology.hosts.get(name) {
            Some(h) if h.is_remote() => Ok(()),
            Some(_) => Err(crate::usage(format!(
                "host `{name}` is this machine (transport local): nothing to reach over SSH"
            ))),
            None => Err(crate::usage(format!(
                "no host `{name}` in the inventory (hosts: {})",
                super::host_names(&topology)
            ))),
        }
    };
    let rt = super::runtime;
    match &args.command {
        HostCommand::List { json } => {
            let rows: Vec<serde_json::Value> = topology
                .hosts
                .values()
                .map(|h| {
                    serde_json::json!({
                        "name": h.name,
                        "transport": h.transport,
                        "address": h.address,
                        "user": h.user,
                        "port": h.port,
                        "platform": h.platform,
                        "components": topology.components.iter().filter(|c| c.host == h.name).count(),
                    })
                })
                .collect();
            if *json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                let mut table = vec![vec![
                    "HOST".to_string(),
                    "TRANSPORT".into(),
                    "ADDRESS".into(),
                    "USER".into(),
                    "PORT".into(),
                    "PLATFORM".into(),
                    "COMPONENTS".into(),
                ]];
                for r in &rows {
                    let s = |k: &str| match &r[k] {
                        serde_json::Value::Null => "-".to_string(),
                        serde_json::Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    table.push(vec![
                        s("name"),
                        s("transport"),
                        s("address"),
                        s("user"),
                        s("port"),
                        s("platform"),
                        s("components"),
                    ]);
                }
                print!("{}", render::table(&table));
            }
            Ok(EXIT_OK)
        }
        HostCommand::Check { host, json } => {
            // This machine: the pre-flight checks of its components (nothing to reach).
            if topology.hosts.get(host).is_some_and(|h| !h.is_remote()) {
                let reports = super::check::reports(
                    cli,
                    topology.clone(),
                    &[host.as_str()],
                    &[],
                    &loaded.base_dir,
                )?;
                super::check::print(&reports, *json)?;
                return Ok(if reports.iter().all(hosts::CheckReport::ok) {
                    EXIT_OK
                } else {
                    EXIT_REFUSED
                });
            }
            ssh_host(host)?;
            let fleet = super::ssh_pool(cli, &topology);
            let report = rt()?.block_on(hosts::check(&fleet, &topology, host));
            if *json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                super::check::print(std::slice::from_ref(&report), false)?;
            }
            Ok(if report.ok() { EXIT_OK } else { EXIT_REFUSED })
        }
        HostCommand::Uninstall(o) => {
            ssh_host(&o.host)?;
            super::host_uninstall::run(&super::ssh_pool(cli, &topology), o)
        }
        HostCommand::Install {
            host,
            binary,
            release,
            trusted_key,
            artifacts,
            json,
        } => {
            ssh_host(host)?;
            let fleet = super::ssh_pool(cli, &topology);
            let path = match (binary, release) {
                (Some(p), _) => p.clone(),
                (None, Some(manifest)) => {
                    let platform = rt()?.block_on(hosts::platform(&fleet, host))?;
                    let (os, arch) = platform.split_once('-').unwrap_or((&platform, ""));
                    match signed_artifact(manifest, trusted_key, artifacts, os, arch)? {
                        Ok((path, what)) => {
                            if !*json {
                                println!("{what}");
                            }
                            path
                        }
                        Err(refusal) => {
                            eprintln!("refused: {refusal}; nothing was copied to `{host}`");
                            return Ok(EXIT_REFUSED);
                        }
                    }
                }
                (None, None) => std::env::current_exe()?,
            };
            let check_platform = binary.is_none() && release.is_none();
            let result = rt()?.block_on(hosts::install(&fleet, host, &path, check_platform));
            match result {
                Ok(r) => {
                    if *json {
                        println!("{}", serde_json::to_string_pretty(&r)?);
                    } else {
                        println!(
                            "installed flotilla {} on `{}`: {} ({}; {}), current → {}{}",
                            r.facts.version,
                            r.host,
                            r.release,
                            r.sha256,
                            if r.copied_bytes == 0 {
                                "already there, intact".to_string()
                            } else {
                                format!("{} bytes copied", r.copied_bytes)
                            },
                            r.release,
                            r.previous
                                .as_ref()
                                .map(|p| format!(" (was {p})"))
                                .unwrap_or_default()
                        );
                        println!(
                            "it answers: {} on {}, state directory {}",
                            r.facts.executable_sha256, r.facts.platform, r.facts.state_dir
                        );
                    }
                    Ok(EXIT_OK)
                }
                Err(e) => {
                    crate::print_error(&e);
                    Ok(EXIT_REFUSED)
                }
            }
        }
        HostCommand::Serve => unreachable!("handled above"),
    }
}

/// The artifact file of a signed release for `os`-`arch`, verified: the manifest's
/// signature by a trusted key, its expiry, and the file among `artifacts` whose size
/// and SHA-256 are the manifest's. With a line saying what was verified.
fn signed_artifact(
    manifest: &std::path::Path,
    trusted_keys: &[PathBuf],
    artifacts: &[PathBuf],
    os: &str,
    arch: &str,
) -> anyhow::Result<Result<(PathBuf, String), flotilla_release::Refusal>> {
    let (key_id, m, a) = match super::release::verify_offline(manifest, trusted_keys, os, arch)? {
        Ok(v) => v,
        Err(refusal) => return Ok(Err(refusal)),
    };
    let mut last = None;
    for f in artifacts {
        match flotilla_release::artifact::verify_file(f, &a.sha256, a.size) {
            Ok(_) => {
                return Ok(Ok((
                    f.clone(),
                    format!(
                        "verified {} {} (serial {}, signed by key {key_id}): {} is its {os}-{arch} artifact, sha256:{}",
                        m.name,
                        m.version,
                        m.serial,
                        f.display(),
                        a.sha256
                    ),
                )))
            }
            Err(refusal) => last = Some(format!("{}: {refusal}", f.display())),
        }
    }
    Ok(Err(flotilla_release::Refusal::new(
        flotilla_release::Reason::DigestMismatch,
        match last {
            Some(l) => format!(
                "no --artifact file is the {os}-{arch} artifact (sha256:{}, {} bytes); last: {l}",
                a.sha256, a.size
            ),
            None => format!(
                "give the {os}-{arch} artifact file with --artifact (sha256:{}, {} bytes)",
                a.sha256, a.size
            ),
        },
    )))
}

fn serve(cli: &Cli) -> anyhow::Result<u8> {
    flotilla_exec::host_mode::serve_stdio(cli.state_dir.as_deref())?;
    Ok(EXIT_OK)
}

//! `flotilla release`: signed releases and their rollouts.
//!
//! Offline (no authority): `keygen` (a minisign key pair), `manifest` (describe
//! artifacts), `sign` (a `.minisig` for a manifest), `verify` (check a manifest and an
//! artifact as an agent would). Through the authority (`--server`): `publish`,
//! `list`, `rollout`, `approve`, `pause`, `resume`, `abort`, `rollback`, `status`,
//! `unskip`.

use crate::{Cli, EXIT_OK, EXIT_REFUSED};
use flotilla_api::wire::{CreateRollbackRequest, CreateRolloutRequest, PublishReleaseRequest};
use flotilla_release::rollout::{Phase, Rollout};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Arguments of `flotilla release`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub command: ReleaseCommand,
}

/// `flotilla release` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum ReleaseCommand {
    /// Make a minisign key pair for signing releases: NAME.pub (give it to agents:
    /// `agent run --trusted-key`) and NAME.key (keep it offline; mode 0600).
    Keygen {
        /// Where to write the two files.
        #[arg(long, default_value = ".")]
        dir: PathBuf,
        /// The files' base name.
        #[arg(long, default_value = "flotilla-release")]
        name: String,
        /// Overwrite existing files.
        #[arg(long)]
        force: bool,
    },
    /// Print a release manifest (JSON) describing local artifact files.
    Manifest {
        /// The release's name: `flotilla-agent`, or a component binary's (`llama-server`).
        name: String,
        /// Its version.
        #[arg(value_name = "VERSION")]
        release_version: String,
        /// Its serial: higher than every release signed before with the same key
        /// (agents refuse a lower one).
        #[arg(long)]
        serial: u64,
        /// When agents stop accepting it: a duration from now (`30d`) or an RFC 3339 time.
        #[arg(long, default_value = "30d")]
        expires: String,
        /// An artifact: `PLATFORM=FILE` (`linux-x86_64=target/release/flotilla`);
        /// kept in the authority's blob store (publish uploads it).
        #[arg(long = "artifact", value_name = "PLATFORM=FILE")]
        artifacts: Vec<String>,
        /// An artifact fetched from a URL instead: `PLATFORM=FILE=URL` (FILE gives
        /// the digest and size).
        #[arg(long = "url-artifact", value_name = "PLATFORM=FILE=URL")]
        url_artifacts: Vec<String>,
        /// Write it here instead of standard output.
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Sign a manifest with a secret key: writes MANIFEST.minisig.
    Sign {
        /// The manifest file.
        manifest: PathBuf,
        /// The minisign secret key file.
        #[arg(long)]
        key: PathBuf,
        /// The signature file (default MANIFEST.minisig).
        #[arg(long)]
        output: Option<PathBuf>,
    },
    /// Check a signed manifest (and an artifact) as an agent would; exit 1 with the
    /// reason when an agent would refuse it.
    Verify {
        /// The manifest, or its `.minisig`.
        manifest: PathBuf,
        /// A trusted public key file (one or two: current and next).
        #[arg(long = "trusted-key", required = true)]
        trusted_keys: Vec<PathBuf>,
        /// The platform to pick the artifact for (default: this machine's).
        #[arg(long)]
        platform: Option<String>,
        /// An artifact file to check against the manifest's digest and size.
        #[arg(long)]
        artifact: Option<PathBuf>,
    },
    /// Upload a signed release's artifacts and relay it to the authority.
    Publish {
        /// The manifest's signature (`MANIFEST.minisig`), or the manifest.
        signature: PathBuf,
        /// Artifact files to upload (matched to the manifest by digest); every
        /// artifact the manifest keeps in the blob store must be given once.
        #[arg(long = "artifact", value_name = "FILE")]
        artifacts: Vec<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// The releases the authority holds, newest first.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Create a rollout of a release to the agent hosts matching the selector; it
    /// waits for `release approve`.
    Rollout {
        /// The release's name.
        name: String,
        /// The release's version.
        #[arg(value_name = "VERSION")]
        release_version: String,
        /// Host labels that must match: `key=value[,key=value]` (default: every agent host).
        #[arg(long, value_name = "LABELS")]
        selector: Option<String>,
        /// Hosts updating at once after the canaries.
        #[arg(long, default_value_t = 1)]
        max_in_flight: u32,
        /// Hosts updated first, alone.
        #[arg(long, default_value_t = 1)]
        canary: u32,
        /// How long a host must run the new release, measured, to count as updated.
        #[arg(long, default_value = "60s")]
        min_healthy: humantime::Duration,
        /// How long a host may take, from the step being sent, to be updated.
        #[arg(long, default_value = "10m")]
        timeout: humantime::Duration,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Approve a rollout: its canaries start.
    Approve {
        /// The rollout's id.
        id: u64,
    },
    /// Pause a rollout: no further host starts (hosts updating go on).
    Pause {
        /// The rollout's id.
        id: u64,
    },
    /// Resume a paused rollout. A halted rollout (`Failed`) stays ended: roll the
    /// corrected release out again (a new rollout starts every host afresh).
    Resume {
        /// The rollout's id.
        id: u64,
    },
    /// Abort a rollout: it ends `Failed`, halted `Aborted`; no further host starts.
    Abort {
        /// The rollout's id.
        id: u64,
    },
    /// Roll back a halted or finished rollout: a new rollout (awaiting `release
    /// approve`, with the same canaries, concurrency and health gate) takes every host
    /// it changed back to the release that host ran before; hosts it never changed are
    /// untouched. Refused while the rollout still runs (abort it first), when it
    /// changed no host, or when a previous release is no longer published.
    Rollback {
        /// The rollout to roll back.
        id: u64,
        /// Hosts updating at once after the canaries (default: the rollout's).
        #[arg(long)]
        max_in_flight: Option<u32>,
        /// Hosts going back first, alone (default: the rollout's).
        #[arg(long)]
        canary: Option<u32>,
        /// How long a host must run its previous release, measured (default: the rollout's).
        #[arg(long)]
        min_healthy: Option<humantime::Duration>,
        /// How long a host may take (default: the rollout's).
        #[arg(long)]
        timeout: Option<humantime::Duration>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// A rollout's phase and every host's, with reasons (default: the newest).
    Status {
        /// The rollout's id.
        id: Option<u64>,
        /// Every rollout, newest first, one line each (rollbacks marked).
        #[arg(long, conflicts_with = "id")]
        all: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Allow a release version again on one agent host: its agent removes it from the
    /// host's skip list (where a version that rolled back there is kept and refused
    /// `Skipped` from then on). Waits until the agent confirms, and prints what it
    /// cleared.
    Unskip {
        /// The release's version.
        #[arg(value_name = "VERSION")]
        release_version: String,
        /// The agent host.
        #[arg(long)]
        host: String,
        /// The release's name: `flotilla-agent` (the agent's own binary), or a
        /// component release's (cleared in the install roots of the host's components
        /// that declare it).
        #[arg(long, default_value = flotilla_release::AGENT_RELEASE)]
        name: String,
        /// How long to wait for the host's agent to confirm.
        #[arg(long, default_value = "60s", conflicts_with = "no_wait")]
        timeout: humantime::Duration,
        /// Return once the authority recorded the request (the agent clears the entry
        /// when it next hears from the authority).
        #[arg(long)]
        no_wait: bool,
        /// Print JSON (the request: `state`, `found`, `cleared`, `error`).
        #[arg(long)]
        json: bool,
    },
}

fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

fn read_text(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// `PLATFORM` of an artifact being described: Flotilla's words only, so that a typo
/// (`linux-amd64`) is caught here and not as `NoMatchingArtifact` on every host.
fn selector(s: &Option<String>) -> anyhow::Result<BTreeMap<String, String>> {
    let s = s.as_deref().unwrap_or_default();
    flotilla_release::rollout::parse_selector(s).map_err(|e| crate::usage!("--selector `{s}`: {e}"))
}

fn expires_at(s: &str) -> anyhow::Result<String> {
    use flotilla_release::manifest::ExpiryError;
    flotilla_release::manifest::expiry(s, std::time::SystemTime::now()).map_err(|e| match e {
        ExpiryError::Past => crate::usage!("--expires `{s}` {e}"),
        e => crate::usage!("--expires `{s}`: {e}"),
    })
}

/// [`flotilla_release::verify_offline`] now.
pub(crate) fn verify_offline(
    manifest: &Path,
    trusted_keys: &[PathBuf],
    os: &str,
    arch: &str,
) -> anyhow::Result<
    Result<
        (
            String,
            flotilla_release::Manifest,
            flotilla_release::Artifact,
        ),
        flotilla_release::Refusal,
    >,
> {
    Ok(flotilla_release::verify_offline(
        manifest,
        trusted_keys,
        os,
        arch,
        now_ms(),
    )?)
}

fn known_platform(p: &str) -> anyhow::Result<(String, String)> {
    let (os, arch) = platform_parts(p)?;
    if !["linux", "darwin"].contains(&os.as_str())
        || !["x86_64", "aarch64"].contains(&arch.as_str())
    {
        return Err(crate::usage!(
            "`{p}` is not a platform agents report: use linux-x86_64, linux-aarch64, darwin-x86_64 or darwin-aarch64"
        ));
    }
    Ok((os, arch))
}

fn platform_parts(p: &str) -> anyhow::Result<(String, String)> {
    p.split_once('-')
        .map(|(o, a)| (o.to_string(), a.to_string()))
        .ok_or_else(|| crate::usage!("`{p}` is not a platform: `<os>-<arch>`, e.g. linux-x86_64"))
}

/// The authority's refusals (409: a conflict with what it holds; 400: a request it
/// will not take) are exit 1 with its message; other errors bubble up.
fn refused(e: flotilla_api::ClientError) -> anyhow::Result<u8> {
    match &e {
        flotilla_api::ClientError::Api {
            status: 400 | 409,
            error,
            ..
        } => {
            eprintln!("refused: {}", error.message);
            Ok(EXIT_REFUSED)
        }
        _ => Err(e.into()),
    }
}

/// An unskip request: done (what was cleared) or pending (recorded, `--no-wait`).
fn print_unskip(u: &flotilla_api::wire::UnskipDto, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(u)?);
        return Ok(());
    }
    if u.state == flotilla_api::wire::UnskipState::Pending {
        println!(
            "unskip {}: {} {} on {} requested; its agent clears it when it next hears from the authority (`flotilla release unskip {} --host {}{}` waits for it)",
            u.id,
            u.name,
            u.version,
            u.host,
            u.version,
            u.host,
            if u.name == flotilla_release::AGENT_RELEASE {
                String::new()
            } else {
                format!(" --name {}", u.name)
            }
        );
        return Ok(());
    }
    if u.cleared.is_empty() {
        println!(
            "{} {} is not on {}'s skip lists: nothing to clear (unskip {})",
            u.name, u.version, u.host, u.id
        );
        return Ok(());
    }
    println!(
        "cleared {} {} on {} (unskip {}): a rollout may apply it there again",
        u.name, u.version, u.host, u.id
    );
    for e in &u.cleared {
        println!(
            "  {} rolled back {} ({} ago)",
            crate::render::short_digest(&e.sha256),
            e.reason,
            flotilla_exec::observe::age(now_ms() - e.at_ms)
        );
    }
    Ok(())
}

use flotilla_exec::this_process::now_ms;

fn print_rollout(r: &Rollout, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(r)?);
        return Ok(());
    }
    let now = now_ms();
    println!(
        "rollout {}: {}{} {} (serial {}) — {:?}{}",
        r.id,
        r.rollback_of
            .map(|of| format!("rollback of rollout {of}: "))
            .unwrap_or_default(),
        r.spec.name,
        r.spec.version,
        r.spec.serial,
        r.phase,
        r.halted
            .as_ref()
            .map(|h| format!(", halted: {h}"))
            .unwrap_or_default()
    );
    println!(
        "  canary {}, max in flight {}, min healthy {}, timeout {}; created {} ago{}",
        r.spec.canary,
        r.spec.max_in_flight,
        humantime::format_duration(Duration::from_millis(r.spec.min_healthy_ms)),
        humantime::format_duration(Duration::from_millis(r.spec.timeout_ms)),
        flotilla_exec::observe::age(now - r.created_ms),
        match (r.approved_ms, r.phase) {
            (Some(t), _) => format!(", approved {} ago", flotilla_exec::observe::age(now - t)),
            (None, Phase::AwaitingApproval) =>
                ", awaiting approval (`flotilla release approve`)".into(),
            (None, _) => ", never approved".into(),
        },
    );
    let mut rows = vec![vec![
        "HOST".to_string(),
        "PHASE".into(),
        "REASON".into(),
        "RUNNING (MEASURED)".into(),
        "RELEASE".into(),
        "DETAIL".into(),
    ]];
    for h in &r.hosts {
        let target = match r.target_of(h) {
            Some((v, s)) if h.target.is_some() => {
                format!("{v} {}", crate::render::short_digest(&s))
            }
            Some((_, s)) => crate::render::short_digest(&s),
            // The authority knew no platform for the host when the rollout was made
            // (its agent had not reported one, the inventory declares none).
            None if h.platform == "unknown" => "none (platform not reported)".into(),
            None => format!("none for {}", h.platform),
        };
        let running = h
            .running_sha256
            .as_deref()
            .map(crate::render::short_digest)
            .unwrap_or_else(|| "-".into());
        rows.push(vec![
            format!("{}{}", h.host, if h.canary { " (canary)" } else { "" }),
            format!("{:?}", h.phase),
            h.reason.map(|r| r.as_str().to_string()).unwrap_or_default(),
            running,
            target,
            detail(h, now),
        ]);
    }
    print!("{}", crate::render::table(&rows));
    for h in &r.hosts {
        if h.reason == Some(flotilla_release::Reason::Skipped) {
            println!(
                "  {} refuses {} {}: it rolled back there before; once the cause is fixed, `flotilla release unskip {} --host {}{}` allows it again",
                h.host,
                r.spec.name,
                r.spec.version,
                r.spec.version,
                h.host,
                if r.spec.name == flotilla_release::AGENT_RELEASE {
                    String::new()
                } else {
                    format!(" --name {}", r.spec.name)
                }
            );
        }
    }
    Ok(())
}

/// A host's detail; for one still Updating, when it was last heard from (a host that
/// says nothing is waited for, never failed for its silence).
fn detail(h: &flotilla_release::rollout::HostRollout, now: i64) -> String {
    if h.phase != flotilla_release::rollout::HostPhase::Updating {
        return h.detail.clone();
    }
    let heard = match (h.heard_ms, h.sent_ms) {
        (Some(t), _) => format!("last heard {} ago", flotilla_exec::observe::age(now - t)),
        (None, Some(t)) => format!(
            "not heard from since the step ({} ago)",
            flotilla_exec::observe::age(now - t)
        ),
        (None, None) => String::new(),
    };
    [h.detail.as_str(), heard.as_str()]
        .iter()
        .filter(|s| !s.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join("; ")
}

/// Every rollout, newest first, one row each: a rollback names the rollout it reverses.
fn print_rollouts(all: &[Rollout]) {
    if all.is_empty() {
        println!("no rollouts (`flotilla release rollout NAME VERSION`)");
        return;
    }
    let now = now_ms();
    let mut rows = vec![vec![
        "ID".to_string(),
        "KIND".into(),
        "RELEASE".into(),
        "PHASE".into(),
        "HOSTS".into(),
        "CREATED".into(),
    ]];
    for r in all {
        let updated = r
            .hosts
            .iter()
            .filter(|h| h.phase == flotilla_release::HostPhase::Updated)
            .count();
        rows.push(vec![
            r.id.to_string(),
            r.rollback_of
                .map(|of| format!("rollback of {of}"))
                .unwrap_or_else(|| "rollout".into()),
            format!("{} {}", r.spec.name, r.spec.version),
            match &r.halted {
                Some(h) => format!("{:?} ({h})", r.phase),
                None => format!("{:?}", r.phase),
            },
            format!("{updated}/{} updated", r.hosts.len()),
            format!("{} ago", flotilla_exec::observe::age(now - r.created_ms)),
        ]);
    }
    print!("{}", crate::render::table(&rows));
}

fn rollout_of(dto: flotilla_api::wire::RolloutDto) -> anyhow::Result<Rollout> {
    Ok(serde_json::from_value(dto.rollout)?)
}

/// Runs the subcommand; returns the exit status.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    match &args.command {
        ReleaseCommand::Keygen { dir, name, force } => {
            let k = flotilla_release::sign::keygen(dir, name, *force)?;
            println!(
                "key {}: public {} (give it to agents: `flotilla agent run --trusted-key`), secret {} (keep it offline)",
                k.key_id,
                k.public_path.display(),
                k.secret_path.display()
            );
            Ok(EXIT_OK)
        }
        ReleaseCommand::Manifest {
            name,
            release_version: version,
            serial,
            expires,
            artifacts,
            url_artifacts,
            output,
        } => {
            let mut list = Vec::new();
            for a in artifacts {
                let (platform, file) = a
                    .split_once('=')
                    .ok_or_else(|| crate::usage!("--artifact `{a}`: expected PLATFORM=FILE"))?;
                let (os, arch) = known_platform(platform)?;
                list.push(flotilla_release::manifest::Artifact::of_file(
                    Path::new(file),
                    &os,
                    &arch,
                    None,
                )?);
            }
            for a in url_artifacts {
                let mut parts = a.splitn(3, '=');
                let (Some(platform), Some(file), Some(url)) =
                    (parts.next(), parts.next(), parts.next())
                else {
                    return Err(crate::usage!(
                        "--url-artifact `{a}`: expected PLATFORM=FILE=URL"
                    ));
                };
                let (os, arch) = known_platform(platform)?;
                list.push(flotilla_release::manifest::Artifact::of_file(
                    Path::new(file),
                    &os,
                    &arch,
                    Some(url.to_string()),
                )?);
            }
            let m = flotilla_release::Manifest {
                name: name.clone(),
                version: version.clone(),
                serial: *serial,
                expires: expires_at(expires)?,
                artifacts: list,
            };
            let mut text = serde_json::to_string_pretty(&m)?;
            text.push('\n');
            // What agents will parse must parse here first.
            flotilla_release::Manifest::parse(text.as_bytes())?;
            match output {
                Some(p) => {
                    std::fs::write(p, &text).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?
                }
                None => print!("{text}"),
            }
            Ok(EXIT_OK)
        }
        ReleaseCommand::Sign {
            manifest,
            key,
            output,
        } => {
            let bytes = read(manifest)?;
            let m = flotilla_release::Manifest::parse(&bytes)
                .map_err(|e| anyhow::anyhow!("{}: {e}", manifest.display()))?;
            let secret = read_text(key)?;
            let sig = flotilla_release::sign::sign(
                &secret,
                &bytes,
                &format!("{} {} serial {}", m.name, m.version, m.serial),
            )?;
            let out = output
                .clone()
                .unwrap_or_else(|| flotilla_release::manifest_and_signature(manifest).1);
            std::fs::write(&out, sig).map_err(|e| anyhow::anyhow!("{}: {e}", out.display()))?;
            println!("signed {} {}: {}", m.name, m.version, out.display());
            Ok(EXIT_OK)
        }
        ReleaseCommand::Verify {
            manifest,
            trusted_keys,
            platform,
            artifact,
        } => {
            let (os, arch) = match platform {
                Some(p) => platform_parts(p)?,
                None => {
                    let (o, a) = flotilla_release::manifest::Platform::current();
                    (o.to_string(), a.to_string())
                }
            };
            let (key_id, m, a) = match verify_offline(manifest, trusted_keys, &os, &arch)? {
                Ok(v) => v,
                Err(refusal) => {
                    eprintln!("refused: {refusal}");
                    return Ok(EXIT_REFUSED);
                }
            };
            if let Some(file) = artifact {
                if let Err(refusal) =
                    flotilla_release::artifact::verify_file(file, &a.sha256, a.size)
                {
                    eprintln!("refused: {}: {refusal}", file.display());
                    return Ok(EXIT_REFUSED);
                }
            }
            println!(
                "ok: {} {} serial {} signed by key {key_id}; {os}-{arch}: sha256:{} ({} bytes){}",
                m.name,
                m.version,
                m.serial,
                a.sha256,
                a.size,
                if artifact.is_some() {
                    ", artifact verified"
                } else {
                    ""
                }
            );
            Ok(EXIT_OK)
        }
        ReleaseCommand::Publish {
            signature,
            artifacts,
            json,
        } => {
            let (mpath, spath) = flotilla_release::manifest_and_signature(signature);
            let manifest_text = read_text(&mpath)?;
            let signature_text = read_text(&spath)?;
            let m = flotilla_release::Manifest::parse(manifest_text.as_bytes())
                .map_err(|e| anyhow::anyhow!("{}: {e}", mpath.display()))?;
            let rt = super::runtime()?;
            let client = super::authority::client(cli)?;
            // Match the files given to the manifest's blob artifacts by digest.
            let mut files = BTreeMap::new();
            for f in artifacts {
                let sha = flotilla_release::artifact::sha256_file(f)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?;
                files.insert(sha, f.clone());
            }
            for a in m.artifacts.iter().filter(|a| a.blob.is_some()) {
                let Some(f) = files.get(&a.sha256) else {
                    let given: Vec<String> = files
                        .iter()
                        .map(|(sha, f)| format!("{} is sha256:{sha}", f.display()))
                        .collect();
                    return Err(crate::usage!(
                        "artifact {}-{} (sha256:{}) is kept in the authority's blob store: give its file with --artifact{}",
                        a.os,
                        a.arch,
                        a.sha256,
                        if given.is_empty() {
                            String::new()
                        } else {
                            format!(" (none of those given is it: {})", given.join(", "))
                        }
                    ));
                };
                let created = rt.block_on(client.put_blob(&a.sha256, read(f)?))?;
                if !*json {
                    println!(
                        "{} {}-{}: {} ({} bytes)",
                        if created { "uploaded" } else { "already held" },
                        a.os,
                        a.arch,
                        f.display(),
                        a.size
                    );
                }
            }
            let r = match rt.block_on(client.publish_release(&PublishReleaseRequest {
                manifest: manifest_text,
                signature: signature_text,
            })) {
                Ok(r) => r,
                Err(e) => return refused(e),
            };
            if *json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!(
                    "published {} {} (serial {}, key {}), {} artifact(s)",
                    r.name,
                    r.version,
                    r.serial,
                    r.key_id,
                    r.artifacts.len()
                );
            }
            Ok(EXIT_OK)
        }
        ReleaseCommand::List { json } => {
            let rt = super::runtime()?;
            let client = super::authority::client(cli)?;
            let list = rt.block_on(client.releases())?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&list)?);
                return Ok(EXIT_OK);
            }
            let mut rows = vec![vec![
                "NAME".to_string(),
                "VERSION".into(),
                "SERIAL".into(),
                "KEY".into(),
                "EXPIRES".into(),
                "ARTIFACTS".into(),
            ]];
            for r in &list {
                rows.push(vec![
                    r.name.clone(),
                    r.version.clone(),
                    r.serial.to_string(),
                    r.key_id.clone(),
                    r.expires.clone(),
                    r.artifacts
                        .iter()
                        .map(|a| {
                            format!("{} {}", a.platform, crate::render::short_digest(&a.sha256))
                        })
                        .collect::<Vec<_>>()
                        .join(", "),
                ]);
            }
            print!("{}", crate::render::table(&rows));
            Ok(EXIT_OK)
        }
        ReleaseCommand::Rollout {
            name,
            release_version: version,
            selector: sel,
            max_in_flight,
            canary,
            min_healthy,
            timeout,
            json,
        } => {
            let rt = super::runtime()?;
            let client = super::authority::client(cli)?;
            let dto = match rt.block_on(client.create_rollout(&CreateRolloutRequest {
                name: name.clone(),
                version: version.clone(),
                selector: selector(sel)?,
                max_in_flight: *max_in_flight,
                canary: *canary,
                min_healthy_ms: Duration::from(*min_healthy).as_millis() as u64,
                timeout_ms: Duration::from(*timeout).as_millis() as u64,
            })) {
                Ok(dto) => dto,
                Err(e) => return refused(e),
            };
            print_rollout(&rollout_of(dto)?, *json)?;
            Ok(EXIT_OK)
        }
        ReleaseCommand::Approve { id }
        | ReleaseCommand::Pause { id }
        | ReleaseCommand::Resume { id }
        | ReleaseCommand::Abort { id } => {
            let action = match &args.command {
                ReleaseCommand::Approve { .. } => "approve",
                ReleaseCommand::Pause { .. } => "pause",
                ReleaseCommand::Resume { .. } => "resume",
                _ => "abort",
            };
            let rt = super::runtime()?;
            let client = super::authority::client(cli)?;
            match rt.block_on(client.rollout_action(*id, action)) {
                Ok(dto) => {
                    print_rollout(&rollout_of(dto)?, false)?;
                    Ok(EXIT_OK)
                }
                Err(e) => refused(e),
            }
        }
        ReleaseCommand::Unskip {
            release_version,
            host,
            name,
            timeout,
            no_wait,
            json,
        } => {
            let rt = super::runtime()?;
            let client = super::authority::client(cli)?;
            let deadline = (!*no_wait).then(|| Duration::from(*timeout));
            match rt.block_on(client.unskip_and_wait(host, name, release_version, deadline)) {
                Ok(u) => {
                    print_unskip(&u, *json)?;
                    Ok(EXIT_OK)
                }
                Err(flotilla_api::UnskipError::Client(e)) => refused(e),
                Err(
                    e @ (flotilla_api::UnskipError::Failed(_)
                    | flotilla_api::UnskipError::NotConfirmed { .. }),
                ) => {
                    if *json {
                        if let flotilla_api::UnskipError::Failed(u)
                        | flotilla_api::UnskipError::NotConfirmed { unskip: u, .. } = &e
                        {
                            println!("{}", serde_json::to_string_pretty(u)?);
                        }
                    }
                    eprintln!("refused: {e}");
                    Ok(EXIT_REFUSED)
                }
            }
        }
        ReleaseCommand::Rollback {
            id,
            max_in_flight,
            canary,
            min_healthy,
            timeout,
            json,
        } => {
            let rt = super::runtime()?;
            let client = super::authority::client(cli)?;
            let ms =
                |d: &Option<humantime::Duration>| d.map(|d| Duration::from(d).as_millis() as u64);
            let dto = match rt.block_on(client.create_rollback(&CreateRollbackRequest {
                rollout: *id,
                max_in_flight: *max_in_flight,
                canary: *canary,
                min_healthy_ms: ms(min_healthy),
                timeout_ms: ms(timeout),
            })) {
                Ok(dto) => dto,
                Err(e) => return refused(e),
            };
            let r = rollout_of(dto)?;
            print_rollout(&r, *json)?;
            if !*json {
                println!("  approve it to start: `flotilla release approve {}`", r.id);
            }
            Ok(EXIT_OK)
        }
        ReleaseCommand::Status { id, all, json } => {
            let rt = super::runtime()?;
            let client = super::authority::client(cli)?;
            if *all {
                let all = rt.block_on(client.rollouts())?;
                if *json {
                    println!("{}", serde_json::to_string_pretty(&all.rollouts)?);
                    return Ok(EXIT_OK);
                }
                let list: Vec<Rollout> = all
                    .rollouts
                    .into_iter()
                    .map(serde_json::from_value)
                    .collect::<Result<_, _>>()?;
                print_rollouts(&list);
                return Ok(EXIT_OK);
            }
            let r = match id {
                Some(id) => rollout_of(rt.block_on(client.rollout(*id))?)?,
                None => {
                    let all = rt.block_on(client.rollouts())?;
                    let Some(first) = all.rollouts.into_iter().next() else {
                        println!("no rollouts (`flotilla release rollout NAME VERSION`)");
                        return Ok(EXIT_OK);
                    };
                    serde_json::from_value(first)?
                }
            };
            print_rollout(&r, *json)?;
            Ok(EXIT_OK)
        }
    }
}

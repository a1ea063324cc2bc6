//! `flotilla serve ui-link [--viewer] [--ttl D] | --list | --revoke ID`: a one-time
//! sign-in URL for the web dashboard (printed like Jupyter prints its token URL),
//! the links made so far, or revoking one (its dashboard sessions end).

use crate::EXIT_OK;
use flotilla_api::ui_links::{UiLinkCreated, UiLinkList, UiLinkRequest, UiLinkRevoked};
use std::time::Duration;

/// A duration (`15m`, `2h`) of at least one second: a link valid for less would be
/// dead when printed.
fn at_least_a_second(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if d < Duration::from_secs(1) {
        return Err("a link must be valid for at least 1s".into());
    }
    Ok(d)
}

/// Arguments of `flotilla serve ui-link`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Read-only: the session may look at every page but act on nothing.
    #[arg(long, conflicts_with_all = ["list", "revoke"])]
    pub viewer: bool,
    /// How long the link can be used (once); its session then lasts 12 h.
    #[arg(long, default_value = "15m", value_parser = at_least_a_second, value_name = "DURATION")]
    pub ttl: Duration,
    /// List the links made so far (never their secrets).
    #[arg(long, conflicts_with = "revoke")]
    pub list: bool,
    /// Revoke link ID: it can no longer sign in and its dashboard sessions end.
    #[arg(long, value_name = "ID")]
    pub revoke: Option<u64>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs it against the authority (`--server`, the operator credential).
pub fn run(cli: &crate::Cli, args: &Args) -> anyhow::Result<u8> {
    let rt = super::runtime()?;
    let client = super::authority::client(cli)?;
    if let Some(id) = args.revoke {
        let r: UiLinkRevoked = rt.block_on(client.delete(&format!("/v1/ui-links/{id}")))?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&r)?);
        } else {
            println!(
                "sign-in link {} revoked ({} dashboard session(s) ended)",
                r.id, r.sessions_ended
            );
        }
        return Ok(EXIT_OK);
    }
    if args.list {
        let r: UiLinkList = rt.block_on(client.get("/v1/ui-links"))?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&r)?);
        } else if r.links.is_empty() {
            println!("no sign-in links");
        } else {
            println!("{:>4}  {:<8}  {:<8}  created by", "id", "role", "state");
            for l in &r.links {
                println!(
                    "{:>4}  {:<8}  {:<8}  {}",
                    l.id, l.role, l.state, l.created_by
                );
            }
        }
        return Ok(EXIT_OK);
    }
    let req = UiLinkRequest {
        role: if args.viewer { "viewer" } else { "operator" }.into(),
        ttl_secs: Some(args.ttl.as_secs().max(1)),
    };
    let r: UiLinkCreated = rt.block_on(client.post("/v1/ui-links", &req))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!(
            "Dashboard sign-in link {} ({}; one use, valid {}):",
            r.id,
            r.role,
            humantime::format_duration(args.ttl)
        );
        println!("    {}", r.url);
        println!("Revoke it with: flotilla serve ui-link --revoke {}", r.id);
    }
    Ok(EXIT_OK)
}

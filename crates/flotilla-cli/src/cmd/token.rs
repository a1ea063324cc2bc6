//! `flotilla serve token create --host H [--keep-credentials] | list | revoke ID`:
//! one-time join tokens for agents: make one bound to a host (joining with it
//! revokes the host's older agent credentials unless `--keep-credentials`), list
//! them (host, created, expires, used, revoked; never a token) or revoke one by a
//! unique prefix of its id so that it can no longer be redeemed. Through the API
//! with the operator credential (`--server`).

use crate::render::when;
use crate::EXIT_OK;
use flotilla_api::credentials::{JoinTokenDto, JoinTokenList};
use std::time::Duration;

/// Arguments of `flotilla serve token`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

/// `flotilla serve token` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Make a one-time join token bound to one host, and print the join command.
    /// Joining with it revokes the host's older agent credentials.
    Create {
        /// The host the agent will act for.
        #[arg(long)]
        host: String,
        /// How long the token can be used.
        #[arg(long, default_value = "1h", value_parser = humantime::parse_duration, value_name = "DURATION")]
        ttl: Duration,
        /// Keep the host's older agent credentials valid when it joins with this
        /// token (default: they are revoked then).
        #[arg(long)]
        keep_credentials: bool,
        /// Print JSON: {token, host, expires_ms, ca_hash}.
        #[arg(long)]
        json: bool,
    },
    /// Every join token, newest first: id, host, created, expires, used, revoked.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a join token by (a unique prefix of, at least 4 digits) its id: it
    /// can no longer be used to join.
    Revoke {
        /// The token's id (the ID column of `list`), or a unique prefix.
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

fn print_table(tokens: &[JoinTokenDto]) {
    let head = [
        "ID", "HOST", "STATE", "CREATED", "EXPIRES", "USED", "REVOKED",
    ];
    let mut rows = vec![head.map(String::from).to_vec()];
    rows.extend(tokens.iter().map(|t| {
        vec![
            t.id.clone(),
            t.host.clone(),
            t.state.clone(),
            when(t.created_ms),
            when(t.expires_ms),
            t.used_ms.map_or("-".into(), when),
            t.revoked_ms.map_or("-".into(), when),
        ]
    }));
    print!("{}", crate::render::table(&rows));
}

/// Runs it against the authority (`--server`, the operator credential).
pub fn run(cli: &crate::Cli, args: &Args) -> anyhow::Result<u8> {
    let rt = super::runtime()?;
    let client = super::authority::client(cli)?;
    match &args.command {
        Command::Create {
            host,
            ttl,
            keep_credentials,
            json,
        } => {
            let t = rt.block_on(client.create_token(&flotilla_api::wire::TokenRequest {
                host: host.clone(),
                ttl_secs: Some(ttl.as_secs().max(1)),
                keep_credentials: *keep_credentials,
            }))?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&t)?);
            } else {
                println!(
                    "join token for `{}` (one use, valid {}):",
                    t.host,
                    humantime::format_duration(*ttl)
                );
                println!("  {}", t.token);
                if !keep_credentials {
                    println!(
                        "joining with it revokes the older agent credentials of `{}`",
                        t.host
                    );
                }
                println!("on {}, run:", t.host);
                println!(
                    "  flotilla agent join {} {} --ca-hash {}",
                    client.urls().join(","),
                    t.token,
                    t.ca_hash
                );
            }
        }
        Command::List { json } => {
            let r: JoinTokenList = rt.block_on(client.get("/v1/tokens"))?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else if r.tokens.is_empty() {
                println!("no join tokens");
            } else {
                print_table(&r.tokens);
            }
        }
        Command::Revoke { id, json } => {
            let t: JoinTokenDto = rt.block_on(client.delete(&format!("/v1/tokens/{id}")))?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&t)?);
            } else {
                println!("join token {} (host `{}`) revoked", t.id, t.host);
            }
        }
    }
    Ok(EXIT_OK)
}

//! `flotilla serve notifications [--limit N] [--json]`: the notifications the
//! authority posted to its webhooks (`GET /v1/notifications`), newest first, with
//! how each delivery went.

use crate::EXIT_OK;
use flotilla_api::notifications::NotificationList;

/// Arguments of `flotilla serve notifications`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// How many, newest first (1 to 1000).
    #[arg(long, default_value_t = 20)]
    pub limit: u32,
    /// Print JSON (`{"notifications": [...]}`).
    #[arg(long)]
    pub json: bool,
}

/// Runs it against the authority (`--server`, the operator credential).
pub fn run(cli: &crate::Cli, args: &Args) -> anyhow::Result<u8> {
    let rt = super::runtime()?;
    let client = super::authority::client(cli)?;
    let list: NotificationList =
        rt.block_on(client.get(&format!("/v1/notifications?limit={}", args.limit)))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(EXIT_OK);
    }
    if list.notifications.is_empty() {
        println!("no notifications (webhooks: notifications.toml in the authority directory)");
    }
    for n in &list.notifications {
        let deliveries: Vec<String> = n
            .deliveries
            .iter()
            .map(|d| format!("{} {} ×{}", d.webhook, d.state, d.attempts))
            .collect();
        println!(
            "{:>5}  {:<20}  {}  [{}]",
            n.id,
            n.kind,
            n.title,
            deliveries.join(", ")
        );
    }
    Ok(EXIT_OK)
}

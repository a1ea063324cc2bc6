//! `flotilla questions`: the durable questions the permission gate asked of a
//! human, open ones first (`--all` for answered ones too).

use crate::{Cli, EXIT_OK};
use flotilla_api::sessions::QuestionsResponse;

/// Arguments of `flotilla questions`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Answered questions too.
    #[arg(long)]
    pub all: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs the command; returns the exit status.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    let client = super::authority::client(cli)?;
    let rt = super::runtime()?;
    let mut all: QuestionsResponse = rt.block_on(client.get("/v1/questions"))?;
    if !args.all {
        all.questions.retain(|q| q.doc.answer.is_none());
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(EXIT_OK);
    }
    println!("ID    SESSION  TOOL       ANSWER  REASON / INPUT");
    for q in &all.questions {
        let answer = q
            .doc
            .answer
            .as_ref()
            .map_or("-".to_string(), |a| a.decision.clone());
        let input = match q.doc.tool_input.get("command").and_then(|c| c.as_str()) {
            Some(c) => c.to_string(),
            None => q.doc.tool_input.to_string(),
        };
        // What the agent wrote is shown escaped: it must not redraw the screen
        // of the human who answers.
        println!(
            "{:<5} {:<8} {:<10} {:<7} {}\n{:<34}{}",
            q.id,
            q.session,
            crate::render::printable(&q.doc.tool_name, false),
            answer,
            crate::render::printable(&q.doc.reason, false),
            "",
            crate::render::printable(&input, false)
        );
    }
    Ok(EXIT_OK)
}

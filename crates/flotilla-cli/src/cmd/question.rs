//! `flotilla question answer ID allow|deny [--note …]`: answer a durable question.
//! The answer applies to the one tool call it was asked about, exactly as asked,
//! and resumes the session (a new runtime boots and the call reaches the gate
//! again).

use crate::{Cli, EXIT_OK, EXIT_REFUSED};
use flotilla_api::sessions::{AnswerRequest, QuestionDto};

/// Arguments of `flotilla question`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub command: QuestionCommand,
}

/// `flotilla question` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum QuestionCommand {
    /// Answer a question: allow or deny that exact call, once.
    Answer {
        /// The question's id (`flotilla questions`).
        id: u64,
        /// `allow` or `deny`.
        #[arg(value_parser = ["allow", "deny"])]
        decision: String,
        /// A note for the agent.
        #[arg(long)]
        note: Option<String>,
    },
}

/// Runs the subcommand; returns the exit status.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    let client = super::authority::client(cli)?;
    let rt = super::runtime()?;
    match &args.command {
        QuestionCommand::Answer { id, decision, note } => {
            let r: Result<QuestionDto, _> = rt.block_on(client.post(
                &format!("/v1/questions/{id}/answer"),
                &AnswerRequest {
                    decision: decision.clone(),
                    note: note.clone(),
                },
            ));
            match r {
                Ok(q) => {
                    let (text, ok) = answered(&q, decision);
                    println!("{text}");
                    Ok(if ok { EXIT_OK } else { EXIT_REFUSED })
                }
                Err(flotilla_api::ClientError::Api {
                    status: 409, error, ..
                }) => {
                    eprintln!("refused: {}", error.message);
                    Ok(EXIT_REFUSED)
                }
                Err(e) => Err(e.into()),
            }
        }
    }
}

/// What an answer came to, in words, and whether it did what was asked: the session
/// resumes, or what the authority did itself (a push) and its outcome.
pub fn answered(q: &QuestionDto, decision: &str) -> (String, bool) {
    match &q.doc.outcome {
        Some(outcome) => (
            format!(
                "question {} answered {decision}: {outcome}; session {} is told",
                q.id, q.session
            ),
            decision != "allow" || outcome.starts_with("pushed"),
        ),
        None => (
            format!(
                "question {} answered {decision}: session {} resumes",
                q.id, q.session
            ),
            true,
        ),
    }
}

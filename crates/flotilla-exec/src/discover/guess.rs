//! The readiness probe a proposal gets, guessed by asking what answers on its port
//! (loopback only, a short time limit per question): `GET` of [`PATHS`] in order, the
//! first that answers `200` wins (an `http` probe on that path); without one, a
//! `tcp` probe. A port that does not speak HTTP at all (no answer, or the connection
//! closed without one) is asked nothing more after the first question.

use crate::probe::{self, ProbeContext};
use flotilla_model::topology::Check;
use flotilla_model::values::StatusRange;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The paths asked, in order: a generic health check, the OpenAI-compatible model
/// list (llama.cpp, vLLM, LiteLLM, MLX), Ollama's version.
pub const PATHS: &[&str] = &["/health", "/v1/models", "/api/version"];

/// What a port answered.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    /// `host:port` asked (loopback).
    pub address: String,
    /// Whether it answered HTTP at all (any status).
    pub http: bool,
    /// The first of [`PATHS`] that answered 200.
    pub path: Option<String>,
    /// Each question and its answer, e.g. `GET http://127.0.0.1:8080/health → 200 OK (3 ms)`.
    pub evidence: Vec<String>,
}

/// Asks `address` (`host:port` on loopback) [`PATHS`] in turn, each within `timeout`.
pub async fn ask(address: String, timeout: Duration) -> Answer {
    let mut answer = Answer {
        address: address.clone(),
        ..Answer::default()
    };
    let ctx = ProbeContext::new("discover");
    for path in PATHS {
        let check = Check::Http {
            body_contains: None,
            endpoint: None,
            json_equals: None,
            json_pointer: None,
            status: StatusRange { min: 200, max: 200 },
            url: format!("http://{address}{path}"),
        };
        let outcome = probe::check(&check, &ctx, timeout).await;
        answer.evidence.push(outcome.evidence.clone());
        let answered = outcome.detail.get("status").is_some();
        answer.http |= answered;
        if outcome.passed {
            answer.path = Some(path.to_string());
            break;
        }
        if !answered {
            // Not HTTP (or nothing answers): the other paths would say the same.
            break;
        }
    }
    answer
}

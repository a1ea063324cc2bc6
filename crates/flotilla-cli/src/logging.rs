//! The binary's log: one `tracing` subscriber for every library's events and spans,
//! on standard error.
//!
//! What is shown: `FLOTILLA_LOG` when set, in `tracing-subscriber`'s env-filter syntax
//! (`debug`, `flotilla_exec=trace,info`:
//! <https://docs.rs/tracing-subscriber/0.3/tracing_subscriber/filter/struct.EnvFilter.html>);
//! otherwise by `-v` (`warn` by default, `info`, `debug` with `-vv`, `trace` with
//! `-vvv`; the long-running `serve` and `agent run` start at `info`; kube-rs's own
//! lines only from `-vv`, its failures being the Kubernetes adapter's errors). From `debug` on,
//! every span (an operation, a step, an HTTP request, an agent poll) is also shown when
//! it closes, with its duration. `--log-format json` writes one JSON object per line
//! (`timestamp`, `level`, `target`, `fields`, and `span`/`spans` with their fields: the
//! operation, step, host, component, request id); `text` is for people.

use std::io::IsTerminal;
use tracing_subscriber::fmt::format::FmtSpan;
use tracing_subscriber::EnvFilter;

/// How log lines are written (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// For people: `2026-01-02T03:04:05.678Z  INFO step{operation=op-3 …}: message`.
    #[default]
    Text,
    /// One JSON object per line, for a log collector.
    Json,
}

/// The environment variable holding a filter (env-filter syntax).
pub const LOG_ENV: &str = "FLOTILLA_LOG";

/// The environment variable holding the log format (`text`, `json`), as
/// `--log-format` (passed on to the processes a JSON-logging one starts).
pub const LOG_FORMAT_ENV: &str = "FLOTILLA_LOG_FORMAT";

/// The level `-v` given `verbose` times selects; `daemon` (serve, agent run) starts
/// one level up.
fn level(verbose: u8, daemon: bool) -> &'static str {
    match verbose + u8::from(daemon) {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    }
}

/// Installs the subscriber (once, before anything logs). A `FLOTILLA_LOG` that does
/// not parse is reported on standard error and the `-v` level is used.
pub fn init(verbose: u8, format: LogFormat, daemon: bool) {
    let fallback = level(verbose, daemon);
    let filter = match std::env::var(LOG_ENV) {
        Ok(spec) if !spec.trim().is_empty() => match EnvFilter::try_new(&spec) {
            Ok(f) => f,
            Err(e) => {
                eprintln!("warning: {LOG_ENV}={spec}: {e}; logging at {fallback}");
                EnvFilter::new(fallback)
            }
        },
        // kube-rs reports each failed call and watch retry itself (at ERROR/WARN);
        // the adapter reports what they mean, once, in its own errors and evidence:
        // theirs are shown from `-vv` on (or when FLOTILLA_LOG names them).
        _ if verbose < 2 => EnvFilter::new(format!("{fallback},kube_client=off,kube_runtime=off")),
        _ => EnvFilter::new(fallback),
    };
    let spans = match filter.max_level_hint() {
        Some(l) if l >= tracing::level_filters::LevelFilter::DEBUG => FmtSpan::CLOSE,
        _ => FmtSpan::NONE,
    };
    // A closed stderr (a pipe whose reader left, as `| head` or a killed `tee`
    // leaves it) loses the log lines, never the process: no report of the failed
    // write (which would itself write to stderr, and panic).
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .log_internal_errors(false)
        .with_span_events(spans);
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
            .try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v_raises_the_level_and_daemons_start_at_info() {
        assert_eq!(level(0, false), "warn");
        assert_eq!(level(1, false), "info");
        assert_eq!(level(0, true), "info");
        assert_eq!(level(2, false), "debug");
        assert_eq!(level(9, true), "trace");
    }
}

//! Makes one session tree through the clone cache, as the authority will.
//!
//! Usage: `session_tree CACHE_ROOT REPO URL SESSION_ID DEST [BASE]`
//!
//! Prints `path`, `base_commit`, `branch` and `elapsed_ms` (wall time of
//! `CloneCache::session_tree`: fetch or first mirror clone, pin, clone, checkout), one
//! `key=value` a line. Used by `scripts/bench-clone`.

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use flotilla_sessions::clone_cache::CloneCache;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !(5..=6).contains(&args.len()) {
        eprintln!("usage: session_tree CACHE_ROOT REPO URL SESSION_ID DEST [BASE]");
        return ExitCode::from(2);
    }
    let cache = CloneCache::new(&args[0]);
    let started = Instant::now();
    match cache.session_tree(
        &args[1],
        &args[2],
        &args[3],
        Path::new(&args[4]),
        args.get(5).map(String::as_str),
    ) {
        Ok(t) => {
            let elapsed = started.elapsed();
            println!("path={}", t.path.display());
            println!("base_commit={}", t.base_commit);
            println!("branch={}", t.branch.as_deref().unwrap_or(""));
            println!("elapsed_ms={:.1}", elapsed.as_secs_f64() * 1000.0);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("session_tree: {e}");
            ExitCode::FAILURE
        }
    }
}

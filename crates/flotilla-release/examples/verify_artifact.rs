//! Verifies a file's SHA-256 and size the way an agent verifies a downloaded artifact
//! (`flotilla_release::artifact::verify_file`). Used by `scripts/bench-release`.
//!
//! Usage: `verify_artifact FILE SHA256 SIZE` (SHA256: 64 hex; SIZE: bytes). Exit 0 and
//! prints the size when it matches; exit 1 with `Reason: detail` when refused; exit 2 on
//! bad arguments.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [file, sha, size] = args.as_slice() else {
        eprintln!("usage: verify_artifact FILE SHA256 SIZE");
        return ExitCode::from(2);
    };
    let Ok(size) = size.parse::<u64>() else {
        eprintln!("verify_artifact: SIZE must be a number of bytes, got {size:?}");
        return ExitCode::from(2);
    };
    match flotilla_release::artifact::verify_file(&PathBuf::from(file), sha, size) {
        Ok(n) => {
            println!("{n}");
            ExitCode::SUCCESS
        }
        Err(refusal) => {
            eprintln!("verify_artifact: {refusal}");
            ExitCode::FAILURE
        }
    }
}

//! Releases for the CLI tests, made the way an operator makes them: `release
//! manifest`, `release sign`, `release publish`, `release rollout`.

use super::Run;
use std::path::{Path, PathBuf};

/// Writes `bytes` as the artifact `dir/<name>-<version>` (mode 0755) of release `name`
/// `version` (serial `serial`) for `platform`, makes its manifest
/// `<name>-<version>.json`, signs it with the secret key `key` and publishes it with
/// the artifact, each through `run` (the operator's `flotilla`, run in `dir`).
/// Returns the artifact's path and its `sha256:<hex>`.
#[allow(clippy::too_many_arguments)]
pub fn publish(
    run: impl Fn(&[&str]) -> Run,
    dir: &Path,
    name: &str,
    version: &str,
    serial: u64,
    platform: &str,
    bytes: &[u8],
    key: &str,
) -> (PathBuf, String) {
    let file = dir.join(format!("{name}-{version}"));
    std::fs::write(&file, bytes).expect("write the artifact");
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
    let manifest = format!("{name}-{version}.json");
    let artifact = format!("{platform}={}", file.display());
    let serial = serial.to_string();
    let signature = format!("{manifest}.minisig");
    for args in [
        vec![
            "release",
            "manifest",
            name,
            version,
            "--serial",
            &serial,
            "--artifact",
            &artifact,
            "-o",
            &manifest,
        ],
        vec!["release", "sign", &manifest, "--key", key],
        vec![
            "release",
            "publish",
            &signature,
            "--artifact",
            file.to_str().unwrap(),
        ],
    ] {
        let r = run(&args);
        assert_eq!(r.code, 0, "{r:?}");
    }
    let sha = sha256_of(&file);
    (file, sha)
}

/// `sha256:<hex>` of the file at `path`.
pub fn sha256_of(path: &Path) -> String {
    format!(
        "sha256:{}",
        flotilla_release::artifact::sha256_file(path).unwrap()
    )
}

/// `release rollout NAME VERSION --selector S --canary 1 --max-in-flight N
/// --min-healthy M --timeout T --json` through `run`: the rollout created.
pub fn create_rollout(
    run: impl Fn(&[&str]) -> Run,
    name: &str,
    version: &str,
    selector: &str,
    max_in_flight: u32,
    min_healthy: &str,
    timeout: &str,
) -> serde_json::Value {
    let max_in_flight = max_in_flight.to_string();
    let r = run(&[
        "release",
        "rollout",
        name,
        version,
        "--selector",
        selector,
        "--canary",
        "1",
        "--max-in-flight",
        &max_in_flight,
        "--min-healthy",
        min_healthy,
        "--timeout",
        timeout,
        "--json",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    r.json()
}

/// Runs `program args` in `dir` with `state` as the state directory; (code, stdout,
/// stderr).
pub fn run_program(
    program: &Path,
    dir: &Path,
    args: &[&str],
    state: &Path,
) -> (i32, String, String) {
    let out = std::process::Command::new(program)
        .args(args)
        .current_dir(dir)
        .env_remove("FLOTILLA_FILE")
        .env("FLOTILLA_STATE_DIR", state)
        .env("NO_COLOR", "1")
        .output()
        .expect("run flotilla");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A good new build: this `flotilla` with bytes appended (another digest; it runs).
pub fn good_build(tag: &str) -> Vec<u8> {
    let mut b = std::fs::read(env!("CARGO_BIN_EXE_flotilla")).unwrap();
    b.extend_from_slice(format!("\nflotilla test build {tag}\n").as_bytes());
    b
}

//! Interoperability with the reference `minisign` tool (<https://jedisct1.github.io/minisign/>):
//! keys and signatures made here work with it, and its own work here. Needs `minisign`
//! on PATH (Debian: `apt-get install minisign`; `scripts/test` installs it) and fails
//! without it.

use std::path::Path;
use std::process::{Command, Stdio};

use flotilla_release::{keygen, public_key_id, sign, Manifest, TrustedKeys};

fn minisign(args: &[&Path]) -> std::process::Output {
    Command::new("minisign")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("minisign runs")
}

fn have_minisign() -> bool {
    let found = Command::new("minisign")
        .arg("-v")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    assert!(
        found,
        "minisign is not on PATH: install it (apt-get install minisign; scripts/test does)"
    );
    found
}

fn manifest() -> Vec<u8> {
    Manifest::parse(
        br#"{"name":"flotilla-agent","version":"1.0.0","serial":1,"expires":"2030-01-01T00:00:00Z",
        "artifacts":[{"os":"linux","arch":"x86_64","blob":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "sha256":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855","size":0}]}"#,
    )
    .unwrap()
    .to_bytes()
}

#[test]
fn our_keys_and_signatures_work_with_the_minisign_tool() {
    if !have_minisign() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let keys = keygen(d, "release", false).unwrap();
    let m = d.join("manifest.json");
    std::fs::write(&m, manifest()).unwrap();
    let secret = std::fs::read_to_string(&keys.secret_path).unwrap();

    // The tool verifies our signature with our public key.
    let sig = d.join("manifest.json.minisig");
    std::fs::write(
        &sig,
        sign(&secret, &manifest(), "flotilla-agent 1.0.0").unwrap(),
    )
    .unwrap();
    let out = minisign(&[
        "-V".as_ref(),
        "-m".as_ref(),
        &m,
        "-x".as_ref(),
        &sig,
        "-p".as_ref(),
        &keys.public_path,
    ]);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("flotilla-agent 1.0.0"));

    // The tool signs with our (unencrypted) secret key without asking for a password,
    // and we verify its signature.
    let sig2 = d.join("tool.minisig");
    let out = minisign(&[
        "-S".as_ref(),
        "-m".as_ref(),
        &m,
        "-x".as_ref(),
        &sig2,
        "-s".as_ref(),
        &keys.secret_path,
    ]);
    assert!(out.status.success(), "{out:?}");
    let public = std::fs::read_to_string(&keys.public_path).unwrap();
    let trusted = TrustedKeys::from_texts(&[&public]).unwrap();
    let (id, _) = trusted
        .verify(&manifest(), &std::fs::read_to_string(&sig2).unwrap())
        .unwrap();
    assert_eq!(id, keys.key_id);
}

#[test]
fn the_minisign_tools_keys_work_here() {
    if !have_minisign() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (pub_path, key_path) = (d.join("tool.pub"), d.join("tool.key"));
    let out = minisign(&[
        "-G".as_ref(),
        "-W".as_ref(),
        "-p".as_ref(),
        &pub_path,
        "-s".as_ref(),
        &key_path,
    ]);
    assert!(out.status.success(), "{out:?}");
    let public = std::fs::read_to_string(&pub_path).unwrap();
    let id = public_key_id(&public).unwrap();
    // The tool (0.11) prints the id in the comment without leading zeros; ours has 16 digits.
    let printed = public.lines().next().unwrap().rsplit(' ').next().unwrap();
    assert_eq!(id.len(), 16);
    assert_eq!(
        printed.trim_start_matches('0'),
        id.trim_start_matches('0'),
        "{public}"
    );
    let secret = std::fs::read_to_string(&key_path).unwrap();
    let sig = sign(&secret, &manifest(), "t").unwrap();
    let trusted = TrustedKeys::from_texts(&[&public]).unwrap();
    assert_eq!(trusted.verify(&manifest(), &sig).unwrap().0, id);
}

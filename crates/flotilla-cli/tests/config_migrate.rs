//! Inventory format versions: `version` at the top of an inventory (absent: 1), a
//! newer one refused by everything that reads it, with what to do; `flotilla config
//! migrate` writing the current version keeping comments and order, showing the
//! difference first, and changing nothing on error, `--dry-run` or `--check`. Plans
//! record the version; revisions of version 1 keep the digests they had before
//! versions existed.

mod common;

use common::Workspace;

const FLEET: &str = "# The lab.\nproject = \"lab\" # ours\n\n# The model server.\n[components.web]\ncommand = [\"/bin/sleep\", \"infinity\"]\n";

#[test]
fn migrate_writes_the_version_keeping_comments_and_order_after_showing_the_difference() {
    let ws = Workspace::new();
    let path = ws.write("flotilla.toml", FLEET);
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o640)).unwrap();
    let before_plan = ws.run(&["plan", "start", "web", "--json"]);
    assert_eq!(before_plan.code, 0, "{}", before_plan.stderr);
    let plan = before_plan.json();
    assert_eq!(plan["inventory_version"], 1);

    // --check: exit 1, the difference shown, nothing written.
    let check = ws.run(&["config", "migrate", "--check"]);
    assert_eq!(check.code, 1, "{}\n{}", check.stdout, check.stderr);
    assert!(
        check
            .stdout
            .contains("inventory format version 1 (not declared) → version 1"),
        "{}",
        check.stdout
    );
    assert!(check.stdout.contains("+version = 1\n"), "{}", check.stdout);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), FLEET);
    let dry = ws.run(&["config", "migrate", "--dry-run"]);
    assert_eq!(dry.code, 0);
    assert!(
        dry.stdout.contains("nothing written (--dry-run)"),
        "{}",
        dry.stdout
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), FLEET);

    let run = ws.run(&["config", "migrate"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("wrote "), "{}", run.stdout);
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        format!("# The lab.\nversion = 1\nproject = \"lab\" # ours\n\n# The model server.\n[components.web]\ncommand = [\"/bin/sleep\", \"infinity\"]\n")
    );
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o640,
        "the file keeps its permissions"
    );
    use std::os::unix::fs::PermissionsExt;
    // The same topology: the same digest as before the version was written.
    let after = ws.run(&["plan", "start", "web", "--json"]).json();
    assert_eq!(after["topology_digest"], plan["topology_digest"]);
    // Again: nothing to change.
    let again = ws.run(&["config", "migrate", "--check"]);
    assert_eq!(again.code, 0, "{}", again.stdout);
    assert!(
        again.stdout.contains("nothing to change"),
        "{}",
        again.stdout
    );
}

/// An inventory that is a symbolic link (kept in a dotfiles repository) stays one:
/// the file it points at is rewritten.
#[test]
fn migrate_writes_through_a_symbolic_link() {
    let ws = Workspace::new();
    let real = ws.write("dotfiles/fleet.toml", FLEET);
    let link = ws.path().join("flotilla.toml");
    std::os::unix::fs::symlink("dotfiles/fleet.toml", &link).unwrap();
    let run = ws.run(&["config", "migrate"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink(),
        "the link is still a link"
    );
    let text = std::fs::read_to_string(&real).unwrap();
    assert!(text.contains("version = 1\n"), "{text}");
}

#[test]
fn a_newer_or_broken_inventory_is_refused_with_what_to_do_and_left_as_it_was() {
    let ws = Workspace::new();
    let newer =
        "project = \"lab\"\nversion = 9\n[components.web]\ncommand = [\"x\"]\nfuture_key = 1\n";
    let path = ws.write("flotilla.toml", newer);
    // Validation stops at the version: a newer format's keys are not guessed at.
    let v = ws.run(&["validate", "--json"]);
    assert_eq!(v.code, 2, "{}", v.stdout);
    let diags = v.json()["diagnostics"].as_array().unwrap().clone();
    assert_eq!(diags.len(), 1, "{diags:#?}");
    assert_eq!(diags[0]["code"], "unsupported-version");
    assert_eq!(diags[0]["location"]["start"]["line"], 2);
    assert_eq!(diags[0]["location"]["start"]["column"], 11);
    assert!(
        diags[0]["help"]
            .as_str()
            .unwrap()
            .contains("upgrade flotilla"),
        "{diags:#?}"
    );
    let plan = ws.run(&["plan", "start", "web"]);
    assert_eq!(plan.code, 2);
    assert!(
        plan.stderr.contains("newer than this flotilla reads"),
        "{}",
        plan.stderr
    );
    let m = ws.run(&["config", "migrate"]);
    assert_eq!(m.code, 2, "{}\n{}", m.stdout, m.stderr);
    assert!(m.stderr.contains("format version 9, newer"), "{}", m.stderr);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), newer);

    let broken = "project = \"lab\"\n[components.web\ncommand = [\"x\"]\n";
    ws.write("flotilla.toml", broken);
    let m = ws.run(&["config", "migrate"]);
    assert_eq!(m.code, 2, "{}\n{}", m.stdout, m.stderr);
    assert!(m.stderr.contains("flotilla.toml:2:"), "{}", m.stderr);
    assert!(m.stderr.contains("nothing written"), "{}", m.stderr);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), broken);

    ws.write("flotilla.toml", "version = \"1\"\n");
    let v = ws.run(&["validate", "--json"]);
    assert_eq!(v.code, 2);
    assert_eq!(v.json()["diagnostics"][0]["code"], "invalid-value");
}

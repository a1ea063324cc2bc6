//! A clean, declared environment: a component started from a shell with extra
//! variables sees none of them unless declared; the base set, `inherit_env`,
//! `env_file` and `${env.NAME}` arrive; the config digest follows the declared set; a
//! missing secret names both places it looked.

mod common;

use flotilla_testkit::wait_until;
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(15);

fn inventory(dir: &std::path::Path, inherit: &str) {
    std::fs::write(
        dir.join("flotilla.toml"),
        format!(
            "[components.envy]\ncommand = [\"sh\", \"-c\", \"env > env.out; exec sleep 300\"]\n\
             inherit_env = [{inherit}]\nenv_file = \"app.env\"\n\
             env = {{ DECLARED = \"${{env.FLOTILLA_TEST_MODEL_DIR}}/m.gguf\", FROM_FILE = \"overridden\" }}\n\
             stop = {{ grace_period = \"1s\" }}\n"
        ),
    )
    .unwrap();
}

#[test]
fn a_component_sees_only_its_declared_environment() {
    let ws = common::Workspace::new();
    let dir = ws.path();
    std::fs::write(
        dir.join("app.env"),
        "# the app's settings\nexport FROM_FILE=yes\nQUOTED=\"a b\"\n",
    )
    .unwrap();
    inventory(dir, "\"CUDA_VISIBLE_DEVICES\"");
    let env = [
        ("SHELL_ONLY_TOKEN", "must-not-leak"),
        ("CUDA_VISIBLE_DEVICES", "1"),
        ("FLOTILLA_TEST_MODEL_DIR", "/srv/models"),
    ];
    let run = common::run_with_env(dir, &["start", "envy"], &env);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let out = dir.join("env.out");
    assert!(wait_until(DEADLINE, || std::fs::read_to_string(&out)
        .is_ok_and(|t| t.contains("PATH="))));
    let seen = std::fs::read_to_string(&out).unwrap();
    let has = |line: &str| seen.lines().any(|l| l == line);
    assert!(has("CUDA_VISIBLE_DEVICES=1"), "inherit_env: {seen}");
    assert!(has("DECLARED=/srv/models/m.gguf"), "${{env.NAME}}: {seen}");
    assert!(
        has("FROM_FILE=overridden"),
        "env overrides env_file: {seen}"
    );
    assert!(has("QUOTED=a b"), "env_file: {seen}");
    assert!(seen.lines().any(|l| l.starts_with("HOME=")), "{seen}");
    for leaked in [
        "SHELL_ONLY_TOKEN",
        "FLOTILLA_TEST_MODEL_DIR",
        "NO_COLOR",
        "FLOTILLA_STATE_DIR",
    ] {
        assert!(
            !seen.lines().any(|l| l.starts_with(&format!("{leaked}="))),
            "{leaked} leaked into the component's environment:\n{seen}"
        );
    }

    // The declared set is part of the config: dropping a name is drift, key by key.
    inventory(dir, "");
    let st = common::run_with_env(dir, &["status", "--json"], &env).json();
    let c = &st["components"][0];
    assert_eq!(c["condition"], "drift", "{c:#}");
    assert!(
        serde_json::to_string(&c["config_changes"])
            .unwrap()
            .contains("inherit_env[0]"),
        "{c:#}"
    );
    let stop = common::run_with_env(dir, &["stop", "envy"], &env);
    assert_eq!(stop.code, 0, "{}", stop.stderr);

    // ${env.NAME} of an unset variable is a clear error, naming it.
    inventory(dir, "");
    let run = common::run_with_env(dir, &["start", "envy"], &[]);
    assert_ne!(run.code, 0);
    assert!(
        format!("{}{}", run.stdout, run.stderr)
            .contains("FLOTILLA_TEST_MODEL_DIR is not set in the environment flotilla runs in"),
        "{}\n{}",
        run.stdout,
        run.stderr
    );
}

#[test]
fn a_missing_secret_names_both_places_it_looked() {
    let ws = common::Workspace::new();
    ws.write(
        "flotilla.toml",
        "[components.s]\ncommand = [\"sleep\", \"300\"]\nenv = { TOKEN = { secret = \"FLOTILLA_TEST_NO_SUCH_SECRET\" } }\n",
    );
    let run = ws.run(&["start", "s"]);
    assert_ne!(run.code, 0);
    let text = format!("{}{}", run.stdout, run.stderr);
    assert!(text.contains("FLOTILLA_TEST_NO_SUCH_SECRET"), "{text}");
    assert!(
        text.contains("the environment and") && text.contains("secrets.env (which does not exist)"),
        "{text}"
    );
}

/// `identity_files`: files a component declares part of what runs; editing one is
/// `stale-runtime` naming it, and `restart` clears it.
#[test]
fn a_changed_identity_file_is_stale_runtime_until_restart() {
    let ws = common::Workspace::new();
    ws.write("conf/model.yaml", "model: small\n");
    ws.write(
        "flotilla.toml",
        "[components.reader]\ncommand = [\"sleep\", \"300\"]\nidentity_files = [\"conf/model.yaml\"]\nstop = { grace_period = \"1s\" }\n",
    );
    assert_eq!(ws.run(&["start", "reader"]).code, 0);
    let status = || ws.run(&["status", "--json"]).json()["components"][0].clone();
    assert_eq!(status()["condition"], "ok", "{:#}", status());
    ws.write("conf/model.yaml", "model: large\n");
    let c = status();
    assert_eq!(c["condition"], "stale-runtime", "{c:#}");
    assert!(
        serde_json::to_string(&c["evidence"])
            .unwrap()
            .contains("conf/model.yaml"),
        "{c:#}"
    );
    let r = ws.run(&["restart", "reader"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(status()["condition"], "ok", "{:#}", status());
    assert_eq!(ws.run(&["stop", "reader"]).code, 0);
}

//! `flotilla import compose`: compose files shaped like the ones AI projects ship
//! (tests/fixtures/compose) become inventories that `flotilla validate` accepts, each
//! kept as a snapshot; bad input is refused at its exact line:column with nothing
//! written; an existing output is not overwritten without --force.

mod common;

use common::{run_with_env, Run, Workspace};
use std::path::Path;

const FIXTURES: &[&str] = &[
    "open-webui-ollama",
    "litellm-postgres",
    "vllm-gpu",
    "rag-anchors-extends-profiles",
];

fn fixture(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/compose")
        .join(format!("{name}.yaml"));
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Runs `flotilla ARGS` in `dir` with a fixed home directory.
fn flotilla(dir: &Path, args: &[&str]) -> Run {
    run_with_env(dir, args, &[("HOME", "/home/op")])
}

#[test]
fn each_fixture_converts_as_in_its_snapshot_and_validates() {
    for name in FIXTURES {
        let ws = Workspace::new();
        let file = format!("homelab/{name}.yaml");
        ws.write(&file, &fixture(name));
        let dir = ws.path().join("homelab");
        let run = flotilla(
            &dir,
            &[
                "import",
                "compose",
                &format!("{name}.yaml"),
                "-o",
                "flotilla.toml",
            ],
        );
        assert_eq!(run.code, 0, "{name}: {run:?}");
        assert!(run.stdout.is_empty(), "{name}: {run:?}");
        assert!(run.stderr.contains("nothing was run"), "{name}: {run:?}");
        let written = std::fs::read_to_string(dir.join("flotilla.toml")).unwrap();
        insta::assert_snapshot!(*name, written);
        // The same text on standard output.
        let run = flotilla(&dir, &["import", "compose", &format!("{name}.yaml")]);
        assert_eq!(run.code, 0, "{name}: {run:?}");
        assert_eq!(run.stdout, written, "{name}: standard output");
        let run = flotilla(&dir, &["validate"]);
        assert_eq!(run.code, 0, "{name}: flotilla validate: {run:?}");
        assert!(run.stdout.contains(": valid:"), "{name}: {run:?}");
    }
}

#[test]
fn the_project_is_named_by_p_then_the_file_then_its_directory() {
    let ws = Workspace::new();
    ws.write("My Stack/compose.yaml", &fixture("open-webui-ollama"));
    let dir = ws.path().join("My Stack");
    // No FILE: compose.yaml in the current directory; the directory names the project.
    let run = flotilla(&dir, &["import", "compose"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout.contains("\nproject = \"mystack\"\n"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("[stacks.mystack]"), "{}", run.stdout);
    assert!(
        run.stdout.contains("source = \"mystack_ollama\""),
        "{}",
        run.stdout
    );
    let run = flotilla(&dir, &["-p", "ai", "import", "compose"]);
    assert!(
        run.stdout.contains("\nproject = \"ai\"\n"),
        "{}",
        run.stdout
    );
    // The file's `name` wins over the directory.
    ws.write("vllm/compose.yaml", &fixture("vllm-gpu"));
    let run = flotilla(&ws.path().join("vllm"), &["import", "compose"]);
    assert!(
        run.stdout.contains("\nproject = \"vllm\"\n"),
        "{}",
        run.stdout
    );
    // …and the stack is renamed off the component of the same name.
    assert!(run.stdout.contains("[stacks.vllm-stack]"), "{}", run.stdout);
}

#[test]
fn paths_stay_the_compose_files_when_the_inventory_is_written_elsewhere() {
    let ws = Workspace::new();
    ws.write(
        "app/compose.yaml",
        "services:\n  web:\n    image: nginx:1.27\n    env_file: web.env\n    volumes:\n      - ./html:/usr/share/nginx/html:ro\n",
    );
    std::fs::create_dir_all(ws.path().join("fleet")).unwrap();
    let run = flotilla(
        ws.path(),
        &[
            "import",
            "compose",
            "app/compose.yaml",
            "-o",
            "fleet/flotilla.toml",
        ],
    );
    assert_eq!(run.code, 0, "{run:?}");
    let written = std::fs::read_to_string(ws.path().join("fleet/flotilla.toml")).unwrap();
    assert!(
        written.contains("env_file = \"../app/web.env\""),
        "{written}"
    );
    assert!(written.contains("source = \"../app/html\""), "{written}");
    assert!(written.contains("read_only = true"), "{written}");
}

/// An override file beside the standard compose file is said not to be merged, with
/// the way to include it; a file of another name has none.
#[test]
fn an_override_file_beside_it_is_said_not_merged() {
    let ws = Workspace::new();
    ws.write("compose.yaml", "services:\n  web:\n    image: nginx\n");
    ws.write(
        "compose.override.yaml",
        "services:\n  web:\n    ports: [\"8080:80\"]\n",
    );
    let run = flotilla(ws.path(), &["import", "compose", "-o", "out.toml"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stderr
            .contains("compose.override.yaml beside compose.yaml is not merged in")
            && run.stderr.contains("docker compose config > merged.yaml"),
        "{run:?}"
    );
    ws.write("merged.yaml", "services:\n  web:\n    image: nginx\n");
    let run = flotilla(
        ws.path(),
        &["import", "compose", "merged.yaml", "-o", "m.toml"],
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert!(!run.stderr.contains("not merged"), "{run:?}");
}

#[test]
fn an_existing_output_is_kept_unless_forced() {
    let ws = Workspace::new();
    ws.write("compose.yaml", "services:\n  web:\n    image: nginx:1.27\n");
    ws.write("flotilla.toml", "# mine\n");
    let run = flotilla(ws.path(), &["import", "compose", "-o", "flotilla.toml"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr
            .contains("flotilla.toml exists: nothing written (--force overwrites it)"),
        "{run:?}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("flotilla.toml")).unwrap(),
        "# mine\n"
    );
    let run = flotilla(
        ws.path(),
        &["import", "compose", "-o", "flotilla.toml", "--force"],
    );
    assert_eq!(run.code, 0, "{run:?}");
    let written = std::fs::read_to_string(ws.path().join("flotilla.toml")).unwrap();
    assert!(
        written.contains("image = \"docker.io/library/nginx:1.27\""),
        "{written}"
    );
    let leftovers: Vec<_> = std::fs::read_dir(ws.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn interpolation_takes_env_and_dotenv_now_and_leaves_environment_values_to_start() {
    let ws = Workspace::new();
    ws.write(".env", "TAG=1.27\nPORT=8081\n");
    ws.write(
        "compose.yaml",
        "services:\n  web:\n    image: nginx:${TAG}\n    ports: [\"${PORT}:80\"]\n    environment:\n      GREETING: hello ${WHO:-world}\n      UPSTREAM: ${UPSTREAM_URL}\n",
    );
    let run = run_with_env(ws.path(), &["import", "compose"], &[("PORT", "9090")]);
    assert_eq!(run.code, 0, "{run:?}");
    let out = &run.stdout;
    assert!(
        out.contains("image = \"docker.io/library/nginx:1.27\""),
        "{out}"
    );
    // The environment wins over .env, as in compose.
    assert!(out.contains("published = 9090"), "{out}");
    assert!(out.contains("UPSTREAM = \"${env.UPSTREAM_URL}\""), "{out}");
    assert!(out.contains("GREETING = \"hello world\""), "{out}");
    assert!(
        out.contains("`nginx:${TAG}` was resolved now, to `nginx:1.27`"),
        "{out}"
    );
}

/// Imports `text` as compose.yaml with `-o out.toml`; checks exit 2, that stderr
/// holds `compose.yaml:LINE:COLUMN: <message>` and that nothing was written.
fn refused(text: &str, line: u32, column: u32, message: &str) {
    let ws = Workspace::new();
    ws.write("compose.yaml", text);
    let run = run_with_env(
        ws.path(),
        &["import", "compose", "compose.yaml", "-o", "out.toml"],
        &[("DB_PASSWORD", "hunter2")],
    );
    assert_eq!(run.code, 2, "{text}\n{run:?}");
    let want = format!("compose.yaml:{line}:{column}: {message}");
    assert!(
        run.stderr.lines().any(|l| l.starts_with(&want)),
        "want a line starting `{want}`:\n{}",
        run.stderr
    );
    assert!(run.stderr.contains("nothing written"), "{run:?}");
    assert!(
        !ws.path().join("out.toml").exists(),
        "{text}: out.toml written"
    );
}

#[test]
fn bad_input_is_refused_at_its_line_and_column() {
    refused(
        "services:\n  web:\n    image: nginx\n    ports: [\"80:80\"\n  db:\n    image: postgres\n",
        5,
        3,
        "YAML syntax error: invalid indentation",
    );
    refused(
        "services:\n  web:\n    image: nginx\n\tdb:\n",
        3,
        12,
        "YAML syntax error: while scanning a plain scalar, found a tab",
    );
    refused(
        "services:\n  web:\n    image: nginx\n    image: httpd\n",
        4,
        5,
        "duplicate key `image` (first at line 3, column 5)",
    );
    refused(
        "x-base: &base 5\nservices:\n  web:\n    <<: *base\n    image: nginx\n",
        4,
        5,
        "merge key `<<` takes a mapping or a list of mappings",
    );
    refused(
        "services:\n  web:\n    <<: *missing\n    image: nginx\n",
        3,
        9,
        "YAML syntax error: while parsing node, found unknown anchor",
    );
    refused(
        "services:\n  web:\n    image: nginx\n    depends_on: [cache]\n",
        4,
        18,
        "service `web` depends on `cache`, which is not a service of this file",
    );
    refused(
        "services:\n  web:\n    ports: [\"80:80\"]\n",
        2,
        3,
        "service `web` has neither `image` nor `build`",
    );
    refused(
        "services:\n  web:\n    image: nginx\n    ports:\n      - \"http:80\"\n",
        5,
        9,
        "`ports[0]`: `http` is not a port (1-65535)",
    );
    refused(
        "services:\n  web:\n    image: nginx:${TAG:?set TAG to the release}\n",
        3,
        12,
        "`image`: required variable `TAG` is not set: set TAG to the release",
    );
    refused(
        "services:\n  db:\n    image: mysql:8\n    healthcheck:\n      test: mysqladmin ping -p${DB_PASSWORD}\n",
        5,
        13,
        "`healthcheck.test`: `${DB_PASSWORD}` looks like a secret",
    );
    refused(
        "services:\n  vllm:\n    image: vllm/vllm-openai:v0.6.3\n    command: [\"--model\", \"m\", \"--api-key\", \"sk-local-123\"]\n",
        4,
        44,
        "`command[3]`: the value of `--api-key` looks like a secret",
    );
    refused(
        "services:\n  vllm:\n    image: vllm/vllm-openai:v0.6.3\n    command: --model m --token=abc123\n",
        4,
        14,
        "`command[2]`: the value of `--token` looks like a secret",
    );
    refused("services: {}\n", 1, 1, "`services` is empty");
    refused(
        "- just\n- a list\n",
        1,
        1,
        "a compose file is a mapping with `services`, not a list",
    );
}

#[test]
fn anchors_merge_keys_and_extends_are_resolved_or_said() {
    let out = {
        let ws = Workspace::new();
        ws.write("rag/compose.yaml", &fixture("rag-anchors-extends-profiles"));
        let run = flotilla(&ws.path().join("rag"), &["import", "compose"]);
        assert_eq!(run.code, 0, "{run:?}");
        run.stdout
    };
    // Merge keys: the anchored mapping's keys, the service's own winning.
    let qdrant = out.split("[components.qdrant.container]").nth(1).unwrap();
    assert!(qdrant.contains("restart = \"unless-stopped\""), "{qdrant}");
    assert!(out.contains("LOG_LEVEL = \"info\""), "{out}");
    assert!(
        out.contains("interval = \"10s\", timeout = \"3s\", retries = 3"),
        "{out}"
    );
    // `extends` and unknown keys: a comment each, with the line.
    assert!(
        out.contains("line 47, `extends`: not carried over"),
        "{out}"
    );
    assert!(
        out.contains(
            "line 51, `enviroment`: not carried over: not a key of a compose service (did you mean"
        ),
        "{out}"
    );
    // Profiles: their own stacks.
    assert!(out.contains("[stacks.rag-gpu]"), "{out}");
    assert!(
        out.contains("components = [\"qdrant\", \"migrate\", \"rag-api\"]\n"),
        "{out}"
    );
}

#[test]
fn an_inventory_that_would_not_validate_is_not_written() {
    let ws = Workspace::new();
    ws.write(
        "compose.yaml",
        "services:\n  web:\n    image: \"nginx:latest:extra\"\n",
    );
    let run = flotilla(ws.path(), &["import", "compose", "-o", "out.toml"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("is not an image reference"), "{run:?}");
    assert!(
        run.stderr
            .contains("the inventory made from compose.yaml is invalid (1 error): nothing written"),
        "{run:?}"
    );
    assert!(!ws.path().join("out.toml").exists());
}

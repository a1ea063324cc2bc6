//! `flotilla serve --local`: the authority on 127.0.0.1 and this machine's agent in
//! one command; the agent reports; an agent killed is said so and started again;
//! SIGTERM leaves nothing running.

mod common;

use std::io::BufRead as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `flotilla --state-dir STATE serve --local` on a free loopback port, with no
/// authority settings from the environment, its output piped.
fn serve_local(state_arg: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_flotilla"));
    c.args([
        "--state-dir",
        state_arg,
        "serve",
        "--local",
        "--listen",
        "127.0.0.1:0",
    ])
    .env_remove("FLOTILLA_SERVER")
    .env_remove("FLOTILLA_AUTHORITY_DIR")
    .env_remove("FLOTILLA_DATABASE_URL")
    .env_remove("FLOTILLA_PUBLIC_URL")
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    c
}

#[test]
fn serve_local_runs_the_authority_and_this_machines_agent_until_sigterm() {
    let ws = common::Workspace::new();
    let state = ws.path().join("state");
    let state_arg = state.to_str().unwrap().to_string();
    let mut child = serve_local(&state_arg)
        .env("NO_COLOR", "1")
        .spawn()
        .unwrap();
    let errors = common::lines_of(child.stderr.take().unwrap());
    let _guard = common::KillOnDrop(child.id());
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut printed = Vec::new();
    let mut url = None;
    let mut dashboard = None;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(rest) = line.strip_prefix("authority: ") {
            url = rest.split(' ').next().map(str::to_string);
        }
        if let Some(rest) = line.strip_prefix("dashboard: ") {
            dashboard = rest.split(' ').next().map(str::to_string);
        }
        printed.push(line.clone());
        if line.starts_with("stop with") {
            break;
        }
    }
    let url = url.unwrap_or_else(|| panic!("no authority URL printed: {printed:#?}"));
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    // The dashboard's one-time sign-in URL, minted as `serve ui-link` mints one.
    let dashboard = dashboard.unwrap_or_else(|| panic!("no dashboard URL: {printed:#?}"));
    assert!(
        dashboard.starts_with(&format!("{url}/ui/login?token=flt-ui-")),
        "{printed:#?}"
    );
    // The agent runs (its own process, with this state directory) and reports.
    let agents = common::pids_with_arg(&state_arg);
    assert!(
        agents
            .iter()
            .any(|p| common::cmdline(*p).contains(&"agent".to_string())),
        "{printed:#?}"
    );
    let op: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state.join("authority/operator.json")).unwrap())
            .unwrap();
    let client = flotilla_api::Client::new(
        &url,
        op["ca_pem"].as_str().unwrap(),
        Some(op["credential"].as_str().unwrap().to_string()),
    )
    .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let links: flotilla_api::ui_links::UiLinkList =
        rt.block_on(client.get("/v1/ui-links")).unwrap();
    assert_eq!(links.links.len(), 1, "{links:?}");
    assert_eq!(
        (links.links[0].role.as_str(), links.links[0].used_ms),
        ("operator", None)
    );
    let mut st = None;
    let reported = flotilla_testkit::wait_until(Duration::from_secs(60), || {
        let now = rt.block_on(client.status()).unwrap();
        let done = now.hosts.iter().any(|h| h.observability == "observed");
        st = Some(now);
        done
    });
    let st = st.unwrap();
    assert!(reported, "the agent never reported: {st:#?}");
    let host = st
        .hosts
        .iter()
        .find(|h| h.observability == "observed")
        .unwrap()
        .host
        .clone();
    assert!(
        printed
            .iter()
            .any(|l| l.contains(&format!("host `{host}`"))),
        "{printed:#?}"
    );
    // A change from the CLI through the authority, on this same machine (the CLI
    // and this machine's agent share the state directory): the agent runs the step.
    let inv = ws.write(
        "fleet.toml",
        &format!(
            "[hosts.{host}]\ntransport = \"agent\"\n[components.sleeper]\nhost = \"{host}\"\ncommand = [\"/bin/sleep\", \"600\"]\n"
        ),
    );
    // The CLI is given a first address where nothing listens, as if that
    // authority were down: it fails over to the next one and sticks to it.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let servers = format!("https://127.0.0.1:{dead}, {url}");
    let cli = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_flotilla"))
            .args([
                "--state-dir",
                &state_arg,
                "--server",
                &servers,
                "-f",
                inv.to_str().unwrap(),
            ])
            .args(args)
            .env(
                "FLOTILLA_OPERATOR_FILE",
                state.join("authority/operator.json"),
            )
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        (
            out.status.code(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    let (code, out) = cli(&["config", "publish"]);
    assert_eq!(code, Some(0), "{out}");
    // The agent applies the new revision by itself first.
    let running = |want: &str| {
        rt.block_on(client.status())
            .unwrap()
            .report
            .components
            .iter()
            .any(|c| c.name == "sleeper" && c.lifecycle.as_str() == want)
    };
    assert!(
        flotilla_testkit::wait_until(Duration::from_secs(60), || running("running")),
        "the agent never started sleeper"
    );
    // `flotilla ui` looks the object up in what the authority knows.
    let (code, out) = cli(&["ui", "component/sleeper", "--print"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains(&format!("{url}/ui/components/sleeper")),
        "{out}"
    );
    let (code, out) = cli(&["ui", "component/sleepr", "--print"]);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains(
            "the authority knows no component `sleepr` (did you mean `component/sleeper`?)"
        ),
        "{out}"
    );
    let (code, out) = cli(&["restart", "sleeper"]);
    assert_eq!(
        code,
        Some(0),
        "the step runs on this machine's agent: {out}"
    );
    let (code, out) = cli(&["stop", "sleeper"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        flotilla_testkit::wait_until(Duration::from_secs(30), || running("stopped")),
        "sleeper never reported stopped"
    );

    // The agent killed: said so, and started again, reporting again.
    let agent_pid = |st: &str| {
        common::pids_with_arg(st)
            .into_iter()
            .find(|p| common::cmdline(*p).contains(&"agent".to_string()))
    };
    let first = agent_pid(&state_arg).unwrap();
    common::kill9(first);
    let mut said = Vec::new();
    let noticed = flotilla_testkit::wait_until(Duration::from_secs(20), || {
        said.extend(errors.try_iter());
        said.iter().any(|l| l.contains("the agent runs again"))
    });
    assert!(noticed, "{said:#?}");
    assert!(
        said.iter().any(
            |l| l.contains(&format!("the agent (pid {first}) exited (signal: 9"))
                && l.contains("local-agent.log")
        ),
        "{said:#?}"
    );
    let second = agent_pid(&state_arg).expect("an agent runs again");
    assert_ne!(second, first);
    let seen_after = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let again = flotilla_testkit::wait_until(Duration::from_secs(60), || {
        rt.block_on(client.status())
            .unwrap()
            .hosts
            .iter()
            .any(|h| h.host == host && h.last_report_ms.is_some_and(|t| t > seen_after))
    });
    assert!(again, "the agent started again never reported");

    // SIGTERM: the authority and its agent end, nothing of this state directory runs.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let stopped = Instant::now();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert!(
        stopped.elapsed() < Duration::from_secs(15),
        "{:?}",
        stopped.elapsed()
    );
    assert!(
        common::pids_with_arg(&state_arg).is_empty(),
        "still running: {:?}",
        common::pids_with_arg(&state_arg)
            .iter()
            .map(|p| common::cmdline(*p))
            .collect::<Vec<_>>()
    );
    // The enrollment stays for the next run.
    assert!(state.join("agent/agent.json").exists());
}

/// Its output read by a pipe whose reader goes away (`serve --local | head`): the
/// lines are lost, never the process: SIGTERM still stops the agent and exits 0.
#[test]
fn serve_local_outlives_a_closed_output_and_still_stops_its_agent() {
    let ws = common::Workspace::new();
    let state = ws.path().join("state");
    let state_arg = state.to_str().unwrap().to_string();
    let mut child = serve_local(&state_arg)
        .env("RUST_LOG", "info")
        .spawn()
        .unwrap();
    let _guard = common::KillOnDrop(child.id());
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    for line in lines.by_ref() {
        if line.unwrap().starts_with("stop with") {
            break;
        }
    }
    assert!(
        flotilla_testkit::wait_until(Duration::from_secs(20), || {
            common::pids_with_arg(&state_arg)
                .iter()
                .any(|p| common::cmdline(*p).contains(&"agent".to_string()))
        }),
        "the agent runs"
    );
    // Both readers go away.
    drop(lines);
    drop(child.stderr.take());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert!(
        common::pids_with_arg(&state_arg).is_empty(),
        "still running: {:?}",
        common::pids_with_arg(&state_arg)
            .iter()
            .map(|p| common::cmdline(*p))
            .collect::<Vec<_>>()
    );
}

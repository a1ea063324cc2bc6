//! `up` applies what changed, like `docker compose up`: a running component whose
//! effective config changed is restarted (and so is what consumes its endpoint, whose
//! own config changes with it), in dependency order, the plan saying why key by key;
//! `--no-recreate` keeps them; status is `ok` afterwards.

mod common;

use flotilla_testkit::{alive, free_port, wait_until};
use std::path::Path;
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(15);

fn inventory(dir: &Path, llm_port: u16, proxy_port: u16, model: &str) {
    let kit = flotilla_testkit::binary();
    std::fs::write(
        dir.join("flotilla.toml"),
        format!(
            "[components.llm]\ncommand = [{kit:?}, \"--listen\", \"127.0.0.1:{llm_port}\", \"--pid-file\", \"llm.pid\"]\n\
             env = {{ MODEL = {model:?} }}\n\
             endpoints = {{ http = \"http://127.0.0.1:{llm_port}\" }}\n\
             readiness = {{ http = {{ endpoint = \"http\", path = \"/\" }}, period = \"50ms\" }}\n\
             [components.proxy]\ncommand = [{kit:?}, \"--listen\", \"127.0.0.1:{proxy_port}\", \"--pid-file\", \"proxy.pid\"]\n\
             connections = {{ upstream = \"llm.http\" }}\n\
             env = {{ UPSTREAM = \"${{connections.upstream}}\" }}\n\
             endpoints = {{ http = \"http://127.0.0.1:{proxy_port}\" }}\n\
             readiness = {{ http = {{ endpoint = \"http\", path = \"/\" }}, period = \"50ms\" }}\n\
             [stacks.chat]\ncomponents = [\"proxy\"]\n"
        ),
    )
    .unwrap();
}

fn pid(dir: &Path, name: &str) -> u32 {
    std::fs::read_to_string(dir.join(format!("{name}.pid")))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn up_restarts_what_changed_and_says_why_and_no_recreate_keeps_it() {
    let ws = common::Workspace::new();
    let dir = ws.path();
    let (p1, p2, proxy) = (free_port(), free_port(), free_port());
    inventory(dir, p1, proxy, "small");
    let r = ws.run(&["up", "chat"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let (llm1, proxy1) = (pid(dir, "llm"), pid(dir, "proxy"));
    struct Kill<'a>(&'a Path);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            for n in ["llm", "proxy"] {
                if let Ok(p) = std::fs::read_to_string(self.0.join(format!("{n}.pid"))) {
                    if let Ok(p) = p.trim().parse::<i32>() {
                        let _ = nix::sys::signal::kill(
                            nix::unistd::Pid::from_raw(p),
                            nix::sys::signal::Signal::SIGKILL,
                        );
                    }
                }
            }
        }
    }
    let _kill = Kill(dir);

    // The port changes: llm restarts, and proxy (whose UPSTREAM follows it) too.
    inventory(dir, p2, proxy, "small");
    let plan = ws.run(&["plan", "up", "chat"]);
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    let line = |name: &str| {
        plan.stdout
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .unwrap_or_else(|| panic!("no step for {name}:\n{}", plan.stdout))
            .to_string()
    };
    assert!(
        line("llm").trim_start().starts_with("restart"),
        "{}",
        plan.stdout
    );
    assert!(
        line("llm").contains(&format!(
            "config changed: command[2] \"127.0.0.1:{p1}\" → \"127.0.0.1:{p2}\""
        )),
        "{}",
        plan.stdout
    );
    assert!(
        line("proxy").trim_start().starts_with("restart"),
        "{}",
        plan.stdout
    );
    assert!(line("proxy").contains("env.UPSTREAM"), "{}", plan.stdout);
    let st = ws.run(&["status", "--json"]).json();
    let llm = st["components"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "llm")
        .unwrap()
        .clone();
    assert_eq!(llm["condition"], "drift", "{llm:#}");
    assert!(
        serde_json::to_string(&llm["config_changes"])
            .unwrap()
            .contains("endpoints.http"),
        "drift names the keys: {llm:#}"
    );

    let r = ws.run(&["up", "chat"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let (llm2, proxy2) = (pid(dir, "llm"), pid(dir, "proxy"));
    assert_ne!(llm2, llm1);
    assert_ne!(proxy2, proxy1);
    assert!(wait_until(DEADLINE, || !alive(llm1) && !alive(proxy1)));
    let st = ws.run(&["status", "--json"]);
    assert_eq!(st.code, 0, "status is ok after: {}", st.stdout);

    // Only llm's env changes: proxy is left alone; with --no-recreate nothing moves.
    inventory(dir, p2, proxy, "large");
    let r = ws.run(&["up", "chat", "--no-recreate"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(pid(dir, "llm"), llm2);
    let st = ws.run(&["status", "--json"]).json();
    assert_eq!(st["components"][0]["condition"], "drift", "{st:#}");
    let r = ws.run(&["up", "chat"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("env.MODEL \"small\" → \"large\""),
        "{}",
        r.stdout
    );
    assert_ne!(pid(dir, "llm"), llm2);
    assert_eq!(pid(dir, "proxy"), proxy2, "proxy's config did not change");
    assert_eq!(ws.run(&["status"]).code, 0);
}

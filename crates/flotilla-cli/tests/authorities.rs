//! Several `flotilla serve` processes on one PostgreSQL database, end to end with
//! the real binary: a revision published through one authority reaches an agent
//! long-polling another; two CLIs selecting through two authorities at once — one
//! wins; the authority an agent sticks to killed with `kill -9` while a call for it
//! is queued — the agent fails over to the next address it knows and the call runs
//! once.

mod common;

use common::agent::AgentProc;
use common::authority::free_port;
use common::{run_with_env, KillOnDrop, Run, Workspace};
use flotilla_release::rollout::{HostPhase, HostUpdate, Phase, Rollout, UpdateReport, UpdateState};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A new database on the test PostgreSQL server (`FLOTILLA_TEST_POSTGRES_URL`).
fn fresh_database() -> flotilla_store::authority::testing::TestDatabase {
    let admin = flotilla_store::authority::testing::admin_url();
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(flotilla_store::authority::testing::create_database(&admin))
        .unwrap()
}

/// Three authorities sharing one test database and one authority directory (the
/// CA and the operator's credential).
struct Authorities {
    ws: Workspace,
    dir: PathBuf,
    db: String,
    urls: Vec<String>,
    children: Vec<Option<(Child, KillOnDrop)>>,
}

impl Authorities {
    fn start(n: usize) -> Authorities {
        let db = fresh_database();
        let ws = Workspace::new();
        let dir = ws.path().join("authority");
        let mut a = Authorities {
            ws,
            dir,
            db: db.url.clone(),
            urls: (0..n)
                .map(|_| format!("https://127.0.0.1:{}", free_port()))
                .collect(),
            children: Vec::new(),
        };
        let init = a.run(0, &["serve", "init"]);
        assert_eq!(init.code, 0, "{init:?}");
        // One after the other, each answering before the next starts: the first
        // takes the leases.
        for i in 0..n {
            let listen = a.urls[i].trim_start_matches("https://").to_string();
            let log = std::fs::File::create(a.ws.path().join(format!("serve-{i}.log"))).unwrap();
            let child = Command::new(env!("CARGO_BIN_EXE_flotilla"))
                .args(["serve", "--listen", &listen])
                .current_dir(a.ws.path())
                .env("FLOTILLA_STATE_DIR", a.ws.path().join(".flotilla-state"))
                .env("FLOTILLA_AUTHORITY_DIR", &a.dir)
                .env("FLOTILLA_DATABASE_URL", &a.db)
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap();
            let guard = KillOnDrop(child.id());
            a.children.push(Some((child, guard)));
            let mut last = None;
            let up = flotilla_testkit::wait_until(Duration::from_secs(30), || {
                let r = a.run(i, &["config", "history", "--json"]);
                let ok = r.code == 0;
                last = Some(r);
                ok
            });
            assert!(up, "authority {i} never answered: {last:?}\n{}", a.log(i));
            if i == 0 {
                let holds = flotilla_testkit::wait_until(Duration::from_secs(30), || {
                    a.log(0).contains("took the lease `rollouts`")
                });
                assert!(holds, "the first authority never took the rollouts' lease");
            }
        }
        a
    }

    fn log(&self, i: usize) -> String {
        std::fs::read_to_string(self.ws.path().join(format!("serve-{i}.log"))).unwrap_or_default()
    }

    /// The CLI with `--server` set to `servers` (one URL or several).
    fn run_through(&self, servers: &str, args: &[&str]) -> Run {
        let dir = self.dir.display().to_string();
        let operator = self.dir.join("operator.json").display().to_string();
        run_with_env(
            self.ws.path(),
            args,
            &[
                ("FLOTILLA_AUTHORITY_DIR", &dir),
                ("FLOTILLA_DATABASE_URL", &self.db),
                ("FLOTILLA_SERVER", servers),
                ("FLOTILLA_OPERATOR_FILE", &operator),
            ],
        )
    }

    fn run(&self, i: usize, args: &[&str]) -> Run {
        self.run_through(&self.urls[i], args)
    }

    fn cli(&self, servers: &str, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_flotilla"));
        c.args(args)
            .current_dir(self.ws.path())
            .env("FLOTILLA_STATE_DIR", self.ws.path().join(".flotilla-state"))
            .env("FLOTILLA_SERVER", servers)
            .env("FLOTILLA_OPERATOR_FILE", self.dir.join("operator.json"))
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// The operator file `serve init` wrote (`credential`, `ca_pem`).
    fn operator(&self) -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(self.dir.join("operator.json")).unwrap()).unwrap()
    }

    fn client(&self, i: usize) -> flotilla_api::Client {
        let op = self.operator();
        flotilla_api::Client::new(
            &self.urls[i],
            op["ca_pem"].as_str().unwrap(),
            Some(op["credential"].as_str().unwrap().to_string()),
        )
        .unwrap()
    }

    fn kill9(&mut self, i: usize) {
        if let Some((mut child, _guard)) = self.children[i].take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }
}

/// Kills, when dropped, every process with an argument that starts with `prefix`
/// (the components the agent started: they outlive it by design).
struct KillComponents(String);

impl Drop for KillComponents {
    fn drop(&mut self) {
        for p in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if common::cmdline(pid).iter().any(|a| a.starts_with(&self.0)) {
                common::kill9(pid);
            }
        }
    }
}

fn inventory(marker: &str, other: u32) -> String {
    let other = format!("{marker}{other}");
    format!(
        "[hosts.gpu]\ntransport = \"agent\"\n\n\
         [components.sleeper]\nhost = \"gpu\"\ncommand = [\"/bin/sleep\", \"{marker}\"]\n\n\
         [components.other]\nhost = \"gpu\"\ncommand = [\"/bin/sleep\", \"{other}\"]\n"
    )
}

fn published(r: &Run) -> String {
    assert_eq!(r.code, 0, "{r:?}");
    r.json()["revision"].as_str().unwrap().to_string()
}

#[test]
fn three_authorities_on_one_database_serve_one_fleet_and_survive_one_killed() {
    let mut a = Authorities::start(3);
    let (url_a, url_b, url_c) = (a.urls[0].clone(), a.urls[1].clone(), a.urls[2].clone());
    let marker = format!("86400.{}", std::process::id());
    let _components = KillComponents(marker.clone());
    a.ws.write("fleet.toml", &inventory(&marker, 1));

    // Two CLIs select through A and B at once, from the same selection: one wins.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let through_c = a.client(2);
    let rev1 = published(&a.run(0, &["-f", "fleet.toml", "config", "publish", "--json"]));
    a.ws.write("fleet.toml", &inventory(&marker, 2));
    let rev2 = published(&a.run(0, &["-f", "fleet.toml", "config", "publish", "--json"]));
    a.ws.write("fleet.toml", &inventory(&marker, 3));
    let rev3 = published(&a.run(1, &["-f", "fleet.toml", "config", "publish", "--json"]));
    let x = a
        .cli(&url_a, &["config", "select", &rev1, "--expect", &rev3])
        .spawn()
        .unwrap();
    let y = a
        .cli(&url_b, &["config", "select", &rev2, "--expect", &rev3])
        .spawn()
        .unwrap();
    let (x, y) = (x.wait_with_output().unwrap(), y.wait_with_output().unwrap());
    let said = |o: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    let winner = match (x.status.success(), y.status.success()) {
        (true, false) => (&rev1, &y),
        (false, true) => (&rev2, &x),
        _ => panic!(
            "exactly one select must win:\nA: {}\nB: {}",
            said(&x),
            said(&y)
        ),
    };
    let (won, lost) = winner;
    assert!(
        said(lost).contains(&format!("the selected revision is {won}"))
            && said(lost).contains("nothing changed"),
        "the loser is told which revision won: {}",
        said(lost)
    );
    let st = rt.block_on(through_c.status()).unwrap();
    assert_eq!(
        st.selection.as_ref().map(|s| s.revision.as_str()),
        Some(won.as_str())
    );
    // The agent knows B first, then A: it sticks to B.
    let token = a.run(0, &["serve", "token", "create", "--host", "gpu", "--json"]);
    assert_eq!(token.code, 0, "{token:?}");
    let token = token.json();
    let mut agent = AgentProc::new(a.ws.path());
    let joined = agent.join(
        &format!("{url_b},{url_a}"),
        token["token"].as_str().unwrap(),
        token["ca_hash"].as_str().unwrap(),
    );
    assert!(
        joined.status.success(),
        "{}",
        String::from_utf8_lossy(&joined.stderr)
    );
    agent.start();

    // Published through A, applied by the agent polling B, seen through C.
    a.ws.write("fleet.toml", &inventory(&marker, 4));
    let started = Instant::now();
    let rev4 = published(&a.run(0, &["-f", "fleet.toml", "config", "publish", "--json"]));
    let running = |name: &str, rev: &str| {
        rt.block_on(through_c.status()).is_ok_and(|st| {
            st.hosts
                .iter()
                .any(|h| h.host == "gpu" && h.revision.as_deref() == Some(rev))
                && st
                    .report
                    .components
                    .iter()
                    .any(|c| c.name == name && c.lifecycle.as_str() == "running")
        })
    };
    assert!(
        flotilla_testkit::wait_until(Duration::from_secs(60), || running("sleeper", &rev4)),
        "the agent on B never applied what A published\n{}",
        agent.log()
    );
    println!(
        "published through A, running by the agent of B, seen through C after {} ms",
        started.elapsed().as_millis()
    );

    // The agent held still, a restart is asked through C (its calls queue in the
    // shared database), and B — the agent's authority — is killed: the agent fails
    // over to A, picks the queued calls up there and runs the restart once.
    let before: Vec<u32> = common::pids_with_arg(&marker);
    assert_eq!(before.len(), 1, "{before:?}");
    let agent_pid = agent.child_pid().unwrap();
    let signal =
        |sig| nix::sys::signal::kill(nix::unistd::Pid::from_raw(agent_pid as i32), sig).unwrap();
    signal(nix::sys::signal::Signal::SIGSTOP);
    let restart = a
        .cli(
            &url_c,
            &[
                "-f",
                "fleet.toml",
                "--host-timeout",
                "60s",
                "restart",
                "sleeper",
            ],
        )
        .spawn()
        .unwrap();
    let _restart_guard = KillOnDrop(restart.id());
    let queued = flotilla_testkit::wait_until(Duration::from_secs(30), || {
        (1..=64).any(|id| {
            rt.block_on(through_c.call_status(id, Duration::ZERO))
                .is_ok_and(|c| c.host == "gpu" && c.response.is_none())
        })
    });
    assert!(queued, "no call for gpu was ever queued");
    a.kill9(1);
    let killed_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    signal(nix::sys::signal::Signal::SIGCONT);
    let out = restart.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the restart through C: {}\nagent: {}",
        said(&out),
        agent.log()
    );
    let after = common::pids_with_arg(&marker);
    assert_eq!(after.len(), 1, "{after:?}");
    assert_ne!(after, before, "sleeper was not restarted");
    let logs = a.run_through(
        &url_c,
        &["-f", "fleet.toml", "logs", "sleeper", "-n", "100"],
    );
    assert_eq!(logs.code, 0, "{logs:?}");
    let starts = logs
        .stdout
        .lines()
        .filter(|l| l.contains("started pid"))
        .count();
    assert_eq!(
        starts, 2,
        "one start by the revision, one by the restart: {}",
        logs.stdout
    );
    // The agent reports again, through A.
    let through_a = a.client(0);
    assert!(
        flotilla_testkit::wait_until(Duration::from_secs(30), || {
            rt.block_on(through_a.status()).is_ok_and(|st| {
                st.hosts
                    .iter()
                    .any(|h| h.host == "gpu" && h.last_report_ms.is_some_and(|t| t > killed_ms))
            })
        }),
        "the agent never reported after its authority was killed\n{}",
        agent.log()
    );

    // Its credential revoked through C: refused by A and C alike; the agent says
    // why and its components keep running.
    let enrollment: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(agent.state.join("agent").join("agent.json")).unwrap(),
    )
    .unwrap();
    let credential = enrollment["credential"].as_str().unwrap().to_string();
    let as_agent = |url: &str| {
        flotilla_api::Client::new(
            url,
            enrollment["ca_pem"].as_str().unwrap(),
            Some(credential.clone()),
        )
        .unwrap()
    };
    let (agent_a, agent_c) = (as_agent(&url_a), as_agent(&url_c));
    for c in [&agent_a, &agent_c] {
        rt.block_on(c.snapshot("gpu", 0, Duration::ZERO)).unwrap();
    }
    let revoke = a.run(2, &["serve", "credentials", "revoke", "--host", "gpu"]);
    assert_eq!(revoke.code, 0, "{revoke:?}");
    let revoked = Instant::now();
    let refused = |c: &flotilla_api::Client| {
        rt.block_on(c.snapshot("gpu", 0, Duration::ZERO))
            .is_err_and(|e| e.status() == Some(401) && e.to_string().contains("revoked"))
    };
    assert!(
        flotilla_testkit::wait_until(Duration::from_secs(5), || refused(&agent_a)
            && refused(&agent_c)),
        "the revoked credential is still taken"
    );
    println!(
        "revoked through C: refused by A and C after {} ms",
        revoked.elapsed().as_millis()
    );
    assert!(
        flotilla_testkit::wait_until(Duration::from_secs(20), || agent
            .log()
            .contains("credential-revoked")),
        "the agent never said its credential was revoked\n{}",
        agent.log()
    );
    assert_eq!(
        common::pids_with_arg(&marker),
        after,
        "sleeper keeps running"
    );
    drop(agent);
}

/// `host` reporting release 2.0.0 of `flotilla-agent` as `state`, running `sha`
/// (with no release: what it runs at start).
fn update(host: &str, sha: &str, state: Option<UpdateState>) -> HostUpdate {
    HostUpdate {
        host: host.into(),
        platform: "linux-x86_64".into(),
        running_sha256: Some(format!("sha256:{sha}")),
        pid: Some(4242),
        update: state.map(|state| UpdateReport {
            name: "flotilla-agent".into(),
            version: "2.0.0".into(),
            sha256: sha.into(),
            state,
            reason: None,
            detail: String::new(),
            evidence: Vec::new(),
            since_ms: 0,
        }),
        releases: Default::default(),
        updates: Vec::new(),
        skipped: Vec::new(),
        unskipped: Vec::new(),
        received_ms: 0,
    }
}

/// The authority that advances rollouts (the holder of their lease) killed with
/// `kill -9` mid-rollout: the other takes the lease over within its time and
/// finishes the rollout as it would have — each host assigned once, none
/// skipped, in order — with the agents talking to the survivor throughout.
#[test]
fn the_rollouts_lease_is_taken_over_when_its_holder_is_killed_mid_rollout() {
    let mut a = Authorities::start(2);
    let rt = tokio::runtime::Runtime::new().unwrap();
    a.ws.write(
        "fleet.toml",
        "[hosts.h1]\ntransport = \"agent\"\n[hosts.h2]\ntransport = \"agent\"\n[hosts.h3]\ntransport = \"agent\"\n",
    );
    published(&a.run(0, &["-f", "fleet.toml", "config", "publish", "--json"]));
    let (through_a, through_b) = (a.client(0), a.client(1));

    // Agents of h1..h3, talking to B only.
    let ca = a.operator()["ca_pem"].as_str().unwrap().to_string();
    let hosts = ["h1", "h2", "h3"];
    let agents: Vec<flotilla_api::Client> = hosts
        .iter()
        .map(|h| {
            let t = rt
                .block_on(through_a.create_token(&flotilla_api::wire::TokenRequest {
                    host: h.to_string(),
                    ttl_secs: None,
                    keep_credentials: false,
                }))
                .unwrap();
            let j = rt
                .block_on(
                    flotilla_api::Client::new(&a.urls[1], &ca, None)
                        .unwrap()
                        .join(&flotilla_api::wire::JoinRequest {
                            token: t.token,
                            agent_version: "test".into(),
                            platform: "linux-x86_64".into(),
                        }),
                )
                .unwrap();
            flotilla_api::Client::new(&a.urls[1], &ca, Some(j.credential)).unwrap()
        })
        .collect();
    for (h, agent) in hosts.iter().zip(&agents) {
        rt.block_on(agent.report_update(h, &update(h, &"1".repeat(64), None)))
            .unwrap();
    }

    // A signed release, relayed through A.
    let keys = a.ws.path().join("keys");
    let k = flotilla_release::sign::keygen(&keys, "test", false).unwrap();
    let secret = std::fs::read_to_string(&k.secret_path).unwrap();
    let artifact = b"a new agent build".repeat(1000);
    let artifact_file =
        a.ws.write("artifact", std::str::from_utf8(&artifact).unwrap());
    let sha = flotilla_release::artifact::sha256_file(&artifact_file).unwrap();
    let manifest = flotilla_release::Manifest {
        name: "flotilla-agent".into(),
        version: "2.0.0".into(),
        serial: 7,
        expires: "2999-01-01T00:00:00Z".into(),
        artifacts: vec![flotilla_release::Artifact {
            os: "linux".into(),
            arch: "x86_64".into(),
            url: None,
            blob: Some(sha.clone()),
            sha256: sha.clone(),
            size: artifact.len() as u64,
        }],
    };
    let text = String::from_utf8(manifest.to_bytes()).unwrap();
    let signature = flotilla_release::sign::sign(&secret, text.as_bytes(), "test").unwrap();
    rt.block_on(through_a.put_blob(&sha, artifact)).unwrap();
    rt.block_on(
        through_a.publish_release(&flotilla_api::wire::PublishReleaseRequest {
            manifest: text,
            signature,
        }),
    )
    .unwrap();
    let created = rt
        .block_on(
            through_a.create_rollout(&flotilla_api::wire::CreateRolloutRequest {
                name: "flotilla-agent".into(),
                version: "2.0.0".into(),
                selector: Default::default(),
                max_in_flight: 1,
                canary: 1,
                min_healthy_ms: 0,
                timeout_ms: 600_000,
            }),
        )
        .unwrap();
    let rollout = |c: &flotilla_api::Client, id: u64| -> Rollout {
        serde_json::from_value(rt.block_on(c.rollout(id)).unwrap().rollout).unwrap()
    };
    let id = serde_json::from_value::<Rollout>(created.rollout)
        .unwrap()
        .id;
    rt.block_on(through_a.rollout_action(id, "approve"))
        .unwrap();

    // Each host in turn: assigned (seen through B), then reports it updated.
    let assigned = |k: usize| {
        let mut last = None;
        let ok = flotilla_testkit::wait_until(Duration::from_secs(20), || {
            let r = rt
                .block_on(agents[k].release_assignment(hosts[k], 0, Duration::ZERO))
                .unwrap();
            let got = r.assignment.as_ref().is_some_and(|x| x.rollout == id);
            last = Some(r);
            got
        });
        assert!(ok, "{} never assigned: {last:?}", hosts[k]);
    };
    let phases = |c: &flotilla_api::Client| -> Vec<HostPhase> {
        rollout(c, id).hosts.iter().map(|h| h.phase).collect()
    };
    assigned(0);
    rt.block_on(agents[0].report_update("h1", &update("h1", &sha, Some(UpdateState::Updated))))
        .unwrap();
    assigned(1);
    assert_eq!(
        phases(&through_b),
        [HostPhase::Updated, HostPhase::Updating, HostPhase::Pending],
        "one in flight at a time"
    );

    // The holder killed; h2 reports to B: B takes the lease over and goes on.
    a.kill9(0);
    let killed = Instant::now();
    rt.block_on(agents[1].report_update("h2", &update("h2", &sha, Some(UpdateState::Updated))))
        .unwrap();
    assigned(2);
    println!(
        "the holder killed: the next host assigned by the other authority after {} ms (lease {} s)",
        killed.elapsed().as_millis(),
        flotilla_server::cluster::LEASE_TTL.as_secs()
    );
    assert!(
        a.log(1).contains("took the lease `rollouts`"),
        "{}",
        a.log(1)
    );
    rt.block_on(agents[2].report_update("h3", &update("h3", &sha, Some(UpdateState::Updated))))
        .unwrap();
    let done = flotilla_testkit::wait_until(Duration::from_secs(20), || {
        rollout(&through_b, id).phase == Phase::Succeeded
    });
    let r = rollout(&through_b, id);
    assert!(done, "{r:#?}");
    assert_eq!(
        r.hosts.iter().map(|h| h.phase).collect::<Vec<_>>(),
        [HostPhase::Updated; 3],
        "{r:#?}"
    );
}

/// An SQLite authority's directory moved to PostgreSQL (`serve init
/// --database-url` on it): its CA and operator file are kept, and the operator's
/// credential is recorded in the new database, so the CLI goes on working.
#[test]
fn an_sqlite_authority_directory_moves_to_postgresql_with_its_operator() {
    let db = fresh_database();
    let ws = Workspace::new();
    let dir = ws.path().join("authority").display().to_string();
    let init = run_with_env(
        ws.path(),
        &["serve", "init"],
        &[("FLOTILLA_AUTHORITY_DIR", &dir)],
    );
    assert_eq!(init.code, 0, "{init:?}");
    let operator = std::fs::read_to_string(ws.path().join("authority/operator.json")).unwrap();
    let moved = run_with_env(
        ws.path(),
        &["serve", "init"],
        &[
            ("FLOTILLA_AUTHORITY_DIR", &dir),
            ("FLOTILLA_DATABASE_URL", &db.url),
        ],
    );
    assert_eq!(moved.code, 0, "{moved:?}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("authority/operator.json")).unwrap(),
        operator,
        "the operator file is kept"
    );
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .current_dir(ws.path())
        .env("FLOTILLA_AUTHORITY_DIR", &dir)
        .env("FLOTILLA_DATABASE_URL", &db.url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _guard = KillOnDrop(child.id());
    let server = format!("https://127.0.0.1:{port}");
    let file = ws
        .path()
        .join("authority/operator.json")
        .display()
        .to_string();
    common::authority::assert_answers(ws.path(), &server, &file);
    child.kill().unwrap();
    child.wait().unwrap();
}

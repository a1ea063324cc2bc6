//! Serves `flotilla_testkit::kube_api` (an in-memory Kubernetes API server with a
//! simulated kubelet) from its own process, for whole-process tests and benchmarks.
//!
//! Usage: `fake-kube-apiserver [--port PORT] [--seed N] [--run-pods DIR]`. Binds
//! 127.0.0.1:PORT (an ephemeral port when absent or 0), creates N namespaces
//! `seed-<i>` each with a one-replica Deployment `app` when `--seed` is given, runs
//! bare pods as real processes with their files under DIR when `--run-pods` is given
//! (`FakeKube::run_pods`; exit 1 when it cannot), prints the one line
//! `listening on http://127.0.0.1:PORT` (flushed) once it accepts connections, and
//! runs until killed. Controls are under `/_fake/` (see `kube_api::control`).

use std::io::Write;

use flotilla_testkit::FakeKube;

fn main() {
    let mut port = 0u16;
    let mut seed = 0usize;
    let mut run_pods: Option<std::path::PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let value = args.next();
        let parsed = match a.as_str() {
            "--port" => value.and_then(|v| v.parse().ok()).map(|v| port = v),
            "--seed" => value.and_then(|v| v.parse().ok()).map(|v| seed = v),
            "--run-pods" => value.map(|v| run_pods = Some(v.into())),
            _ => None,
        };
        if parsed.is_none() {
            eprintln!("usage: fake-kube-apiserver [--port PORT] [--seed N] [--run-pods DIR]");
            std::process::exit(2);
        }
    }
    let fake = match FakeKube::start_on(port) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("fake-kube-apiserver: cannot listen on 127.0.0.1:{port}: {e}");
            std::process::exit(1);
        }
    };
    if let Some(dir) = run_pods {
        if let Err(e) = fake.run_pods(&dir) {
            eprintln!(
                "fake-kube-apiserver: cannot run pods under {}: {e}",
                dir.display()
            );
            std::process::exit(1);
        }
    }
    fake.seed(seed);
    let mut out = std::io::stdout();
    let _ = writeln!(out, "listening on {}", fake.url());
    let _ = out.flush();
    loop {
        std::thread::park();
    }
}

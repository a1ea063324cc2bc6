//! The house rules, checked on the source tree (rust-analyzer's `xtask/src/tidy.rs`
//! is the model): each rule reads every `crates/*/src/**/*.rs` file and fails naming
//! the file and the line that breaks it.
//!
//! Rules:
//! - only `flotilla-exec` and the sessions runtime (`flotilla-sessions`) start or
//!   signal processes (`Command::new`, `exec`, `kill`); test infrastructure
//!   (`flotilla-testkit`) too;
//! - the pure core (`flotilla-model`, `flotilla-plan`, and `flotilla-compose`, the
//!   compose import's converter) touches no file system, clock, environment, process
//!   or tokio;
//! - the agent does not depend on the server crate;
//! - only `flotilla-kube` depends on kube-rs and k8s-openapi;
//! - no library calls `process::exit` (the binary decides how the process ends);
//! - every crate's `lib.rs` opens with its `//!` code map;
//! - a module of test helpers (`testing`, `test_support`, `mocks`) is compiled only
//!   under `cfg(test)` or a feature;
//! - no import cycle between the files of one crate.
//!
//! Known debts are listed below with their reason; a listed file that no longer
//! breaks its rule fails the test too, so the lists only shrink.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Files outside exec and sessions that still start or signal processes, and why.
const PROCESS_DEBT: &[(&str, &str)] = &[];

/// Import cycles between files that are known, each as the set of its files (relative
/// to the crate's `src/`), and why they are still there.
const CYCLE_DEBT: &[(&str, &[&str], &str)] = &[];

/// Crates whose files may start and signal processes.
const PROCESS_CRATES: &[&str] = &["flotilla-exec", "flotilla-sessions", "flotilla-testkit"];

/// The pure core.
const PURE_CRATES: &[&str] = &["flotilla-model", "flotilla-plan", "flotilla-compose"];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the workspace root")
        .to_path_buf()
}

/// One source file: its crate, its path relative to the workspace, its text without
/// what is compiled only for tests.
struct Source {
    krate: String,
    rel: String,
    /// Relative to the crate's `src/`.
    in_src: String,
    text: String,
    production: String,
}

fn sources() -> Vec<Source> {
    let root = workspace();
    let mut out = Vec::new();
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .expect("crates/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("src").is_dir())
        .collect();
    crates.sort();
    for c in crates {
        let krate = c.file_name().unwrap().to_string_lossy().into_owned();
        let mut files = Vec::new();
        walk(&c.join("src"), &mut files);
        files.sort();
        for f in files {
            let text = std::fs::read_to_string(&f).expect("a source file");
            out.push(Source {
                krate: krate.clone(),
                rel: f.strip_prefix(&root).unwrap().display().to_string(),
                in_src: f.strip_prefix(c.join("src")).unwrap().display().to_string(),
                production: production(&text),
                text,
            });
        }
    }
    assert!(out.len() > 50, "found the sources ({} files)", out.len());
    out
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `text` without its `#[cfg(test)]` items (a test module at the end of a file, by
/// this tree's convention, or a one-line item), and without comments.
fn production(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]") {
            // The item after it: to its end (a block closed at the same indentation).
            let indent = line.len() - t.len();
            let Some(item) = lines.next() else { break };
            if item.trim_end().ends_with('{') {
                for l in lines.by_ref() {
                    let lt = l.trim_start();
                    if l.len() - lt.len() == indent && lt.starts_with('}') {
                        break;
                    }
                }
            }
            continue;
        }
        if t.starts_with("//") {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The lines of `s.production` holding one of `needles`: (line text).
fn hits(s: &Source, needles: &[&str]) -> Vec<String> {
    s.production
        .lines()
        .filter(|l| needles.iter().any(|n| l.contains(n)))
        .map(|l| l.trim().to_string())
        .collect()
}

/// Whether `s` starts or signals a process, and where.
fn starts_or_signals(s: &Source) -> Vec<String> {
    let mut found = hits(
        s,
        &[
            "Command::new(",
            ".exec()",
            "libc::kill",
            "killpg(",
            "::kill(",
        ],
    );
    if s.production.contains("nix::sys::signal") {
        found.extend(
            s.production
                .lines()
                .filter(|l| {
                    let l = l.trim();
                    (l.contains("kill(") && !l.contains("fn kill")) || l.contains("{kill")
                })
                .map(|l| l.trim().to_string()),
        );
    }
    found.sort();
    found.dedup();
    found
}

#[test]
fn only_exec_and_the_sessions_runtime_start_or_signal_processes() {
    let debt: BTreeMap<&str, &str> = PROCESS_DEBT.iter().copied().collect();
    let mut bad = Vec::new();
    let mut paid = Vec::new();
    for s in sources() {
        if PROCESS_CRATES.contains(&s.krate.as_str()) {
            continue;
        }
        let found = starts_or_signals(&s);
        match (found.is_empty(), debt.contains_key(s.rel.as_str())) {
            (false, false) => bad.push(format!("{}: {}", s.rel, found.join(" | "))),
            (true, true) => paid.push(s.rel.clone()),
            _ => {}
        }
    }
    assert!(
        bad.is_empty(),
        "only flotilla-exec and the sessions runtime start or signal processes (flotilla_exec::process has spawn, stop and identity-checked signals):\n{}",
        bad.join("\n")
    );
    assert!(
        paid.is_empty(),
        "no longer starts or signals a process: remove from PROCESS_DEBT:\n{}",
        paid.join("\n")
    );
}

#[test]
fn the_pure_core_touches_no_file_clock_environment_or_runtime() {
    let needles = [
        "std::fs",
        "std::env",
        "SystemTime",
        "Instant::now",
        "tokio",
        "std::process",
        // Sockets and name resolution; parsing an address (`IpAddr`) is pure.
        "TcpStream",
        "TcpListener",
        "UdpSocket",
        "ToSocketAddrs",
        "UnixStream",
        "std::thread",
    ];
    let mut bad = Vec::new();
    for s in sources() {
        if !PURE_CRATES.contains(&s.krate.as_str()) {
            continue;
        }
        for h in hits(&s, &needles) {
            bad.push(format!("{}: {h}", s.rel));
        }
    }
    assert!(
        bad.is_empty(),
        "flotilla-model, flotilla-plan and flotilla-compose are pure (no IO, no clock: take them as arguments):\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_agent_does_not_depend_on_the_server() {
    let manifest =
        std::fs::read_to_string(workspace().join("crates/flotilla-agent/Cargo.toml")).unwrap();
    let uses: Vec<String> = sources()
        .iter()
        .filter(|s| s.krate == "flotilla-agent")
        .flat_map(|s| {
            hits(s, &["flotilla_server"])
                .into_iter()
                .map(move |h| format!("{}: {h}", s.rel))
        })
        .collect();
    let depends = manifest
        .lines()
        .any(|l| l.trim_start().starts_with("flotilla-server"));
    assert!(
        !depends && uses.is_empty(),
        "flotilla-agent depends on flotilla-server (the wire types and Client are in flotilla-api):\n{}",
        uses.join("\n")
    );
}

#[test]
fn only_flotilla_kube_depends_on_kube() {
    // A crate's own dependencies (not its dev-dependencies: the testkit's tests drive
    // kube-rs against its fake API server) and its production sources.
    let mut bad = Vec::new();
    for entry in std::fs::read_dir(workspace().join("crates"))
        .unwrap()
        .flatten()
    {
        let krate = entry.file_name().to_string_lossy().into_owned();
        if krate == "flotilla-kube" {
            continue;
        }
        let Ok(manifest) = std::fs::read_to_string(entry.path().join("Cargo.toml")) else {
            continue;
        };
        let mut section = String::new();
        for line in manifest.lines() {
            let t = line.trim();
            if t.starts_with('[') {
                section = t.to_string();
                continue;
            }
            let production = section == "[dependencies]" || section.ends_with(".dependencies]");
            if production && (t.starts_with("kube") || t.starts_with("k8s-openapi")) {
                bad.push(format!("crates/{krate}/Cargo.toml: {t}"));
            }
        }
    }
    for s in sources()
        .iter()
        .filter(|s| s.krate != "flotilla-kube" && s.krate != "flotilla-testkit")
    {
        // `kube::` as a path of its own, not the end of `flotilla_kube::`.
        let names_kube = |line: &str| {
            ["kube::", "k8s_openapi::"].iter().any(|n| {
                line.match_indices(n).any(|(i, _)| {
                    !line[..i]
                        .chars()
                        .next_back()
                        .is_some_and(|c| c.is_alphanumeric() || c == '_')
                })
            })
        };
        for h in hits(s, &["kube::", "k8s_openapi::"]) {
            if names_kube(&h) {
                bad.push(format!("{}: {h}", s.rel));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "only flotilla-kube depends on kube and k8s-openapi (the executor reaches its adapter through the Adapter trait):\n{}",
        bad.join("\n")
    );
}

#[test]
fn no_library_calls_process_exit() {
    let mut bad = Vec::new();
    for s in sources() {
        // The binary (its main.rs decides exit codes) and test infrastructure.
        if s.krate == "flotilla-cli" || s.krate == "flotilla-testkit" {
            continue;
        }
        for h in hits(&s, &["process::exit("]) {
            bad.push(format!("{}: {h}", s.rel));
        }
    }
    assert!(
        bad.is_empty(),
        "a library returns; the binary decides how the process ends:\n{}",
        bad.join("\n")
    );
}

#[test]
fn every_lib_rs_opens_with_its_code_map() {
    let bad: Vec<String> = sources()
        .iter()
        .filter(|s| s.in_src == "lib.rs" && !s.text.trim_start().starts_with("//!"))
        .map(|s| s.rel.clone())
        .collect();
    assert!(
        bad.is_empty(),
        "a crate's lib.rs starts with `//!` docs: what the crate is, then its code map:\n{}",
        bad.join("\n")
    );
}

#[test]
fn test_helpers_are_not_compiled_into_production() {
    let names = ["testing", "test_support", "test_util", "mocks", "fakes"];
    let mut bad = Vec::new();
    for s in sources() {
        let lines: Vec<&str> = s.text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            let t = l.trim();
            let declared = names
                .iter()
                .any(|n| t == format!("pub mod {n};") || t == format!("mod {n};"));
            if !declared {
                continue;
            }
            let gated = lines[..i]
                .iter()
                .rev()
                .take_while(|p| p.trim().starts_with("#[") || p.trim().starts_with("///"))
                .any(|p| p.contains("cfg(") && (p.contains("test") || p.contains("feature")));
            if !gated {
                bad.push(format!("{}:{}: {t}", s.rel, i + 1));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "test helpers are compiled only for tests: #[cfg(any(test, feature = \"testing\"))]:\n{}",
        bad.join("\n")
    );
}

// --- import cycles between files ---

/// A crate's modules: module path (`a::b`, root = "") → file (in `src/`).
fn modules(files: &[&Source]) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    for s in files {
        let p = s.in_src.trim_end_matches(".rs");
        let module = if p == "lib" || p == "main" {
            String::new()
        } else if let Some(d) = p.strip_suffix("/mod") {
            d.replace('/', "::")
        } else if p.starts_with("bin/") {
            continue;
        } else {
            p.replace('/', "::")
        };
        m.insert(module, s.in_src.clone());
    }
    m
}

/// Expands one `use` tree (`a::{b, c::{d, e}}`) into its paths.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap_or(tree).trim();
        return vec![path.strip_suffix("::self").unwrap_or(path).to_string()];
    };
    let prefix = tree[..open].trim_end_matches("::").trim();
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(expand)
        .map(|p| {
            if p == "self" {
                prefix.to_string()
            } else if prefix.is_empty() {
                p
            } else {
                format!("{prefix}::{p}")
            }
        })
        .collect()
}

/// The paths a file names: its `use` trees, expanded, and inline `crate::`/`super::`
/// paths.
fn named_paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("use ") {
        let before = &rest[..i];
        let at_start = before.is_empty()
            || before.ends_with('\n')
            || before.ends_with(' ')
            || before.ends_with('{')
            || before.ends_with(';');
        let after = &rest[i + 4..];
        let Some(end) = after.find(';') else { break };
        if at_start && !before.trim_end().ends_with("//") {
            let tree: String = after[..end]
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            if !tree.contains('"') && !tree.contains('(') {
                out.extend(expand(&tree));
            }
        }
        rest = &after[end..];
    }
    let bytes = text.as_bytes();
    for start in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(i) = text[from..].find(start) {
            let at = from + i;
            let boundary = at == 0
                || !(bytes[at - 1].is_ascii_alphanumeric()
                    || bytes[at - 1] == b'_'
                    || bytes[at - 1] == b':');
            let path: String = text[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            if boundary {
                out.push(path.trim_end_matches(':').to_string());
            }
            from = at + start.len();
        }
    }
    out
}

/// The module a path names, resolved from module `here` (the longest module prefix).
fn target(path: &str, here: &str, mods: &BTreeMap<String, String>) -> Option<String> {
    let mut segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let mut base: Vec<String> = if here.is_empty() {
        Vec::new()
    } else {
        here.split("::").map(str::to_string).collect()
    };
    match segs.first().copied() {
        Some("crate") => {
            base.clear();
            segs.remove(0);
        }
        Some("super") => {
            while segs.first() == Some(&"super") {
                base.pop();
                segs.remove(0);
            }
        }
        Some("self") => {
            segs.remove(0);
        }
        Some(first) => {
            // Relative: only a child module of `here`.
            let child = if here.is_empty() {
                first.to_string()
            } else {
                format!("{here}::{first}")
            };
            if !mods.contains_key(&child) {
                return None;
            }
        }
        None => return None,
    }
    let mut best = None;
    let mut cur = base.clone();
    if mods.contains_key(&cur.join("::")) {
        best = Some(cur.join("::"));
    }
    for s in segs {
        cur.push(s.to_string());
        let m = cur.join("::");
        if mods.contains_key(&m) {
            best = Some(m);
        }
    }
    best
}

/// Strongly connected components of more than one file (Tarjan).
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    struct T<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<String, usize>,
        low: BTreeMap<String, usize>,
        stack: Vec<String>,
        on: BTreeSet<String>,
        next: usize,
        out: Vec<BTreeSet<String>>,
    }
    fn visit(t: &mut T, v: &str) {
        t.index.insert(v.to_string(), t.next);
        t.low.insert(v.to_string(), t.next);
        t.next += 1;
        t.stack.push(v.to_string());
        t.on.insert(v.to_string());
        let succ: Vec<String> = t.edges.get(v).into_iter().flatten().cloned().collect();
        for w in succ {
            if !t.index.contains_key(&w) {
                visit(t, &w);
                let lw = t.low[&w];
                let lv = t.low[v];
                t.low.insert(v.to_string(), lv.min(lw));
            } else if t.on.contains(&w) {
                let iw = t.index[&w];
                let lv = t.low[v];
                t.low.insert(v.to_string(), lv.min(iw));
            }
        }
        if t.low[v] == t.index[v] {
            let mut scc = BTreeSet::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(&w);
                let done = w == v;
                scc.insert(w);
                if done {
                    break;
                }
            }
            if scc.len() > 1 {
                t.out.push(scc);
            }
        }
    }
    let mut t = T {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    let nodes: Vec<String> = edges.keys().cloned().collect();
    for v in nodes {
        if !t.index.contains_key(&v) {
            visit(&mut t, &v);
        }
    }
    t.out
}

/// Every crate's import cycles: (crate, the files of one cycle).
fn import_cycles() -> Vec<(String, BTreeSet<String>)> {
    let all = sources();
    let mut by_crate: BTreeMap<String, Vec<&Source>> = BTreeMap::new();
    for s in &all {
        by_crate.entry(s.krate.clone()).or_default().push(s);
    }
    let mut out = Vec::new();
    for (krate, files) in by_crate {
        let mods = modules(&files);
        let file_of: BTreeMap<&str, &Source> =
            files.iter().map(|s| (s.in_src.as_str(), *s)).collect();
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (module, file) in &mods {
            let s = file_of[file.as_str()];
            let set = edges.entry(file.clone()).or_default();
            for p in named_paths(&s.production) {
                if let Some(m) = target(&p, module, &mods) {
                    let to = &mods[&m];
                    // A module's own file, and its parent's declaring it, are not imports.
                    if to != file && !module.starts_with(&format!("{m}::")) && !m.is_empty() {
                        set.insert(to.clone());
                    }
                }
            }
        }
        for c in cycles(&edges) {
            out.push((krate.clone(), c));
        }
    }
    out
}

#[test]
fn no_import_cycle_between_the_files_of_a_crate() {
    let found = import_cycles();
    let known: Vec<(String, BTreeSet<String>)> = CYCLE_DEBT
        .iter()
        .map(|(k, files, _)| (k.to_string(), files.iter().map(|f| f.to_string()).collect()))
        .collect();
    let new: Vec<String> = found
        .iter()
        .filter(|c| !known.iter().any(|k| k.0 == c.0 && c.1.is_subset(&k.1)))
        .map(|(k, files)| {
            format!(
                "{k}: {}",
                files.iter().cloned().collect::<Vec<_>>().join(" → ")
            )
        })
        .collect();
    let gone: Vec<String> = known
        .iter()
        .filter(|k| !found.iter().any(|c| c.0 == k.0 && c.1 == k.1))
        .map(|(k, files)| format!("{k}: {files:?}"))
        .collect();
    assert!(
        new.is_empty(),
        "import cycles between files (move what both need to a module of its own):\n{}",
        new.join("\n")
    );
    assert!(
        gone.is_empty(),
        "a known cycle is gone or smaller: update CYCLE_DEBT:\n{}",
        gone.join("\n")
    );
}

#[test]
fn the_cycle_finder_finds_a_cycle_and_resolves_use_trees() {
    assert_eq!(
        expand("crate::{a::{b, c as d}, e::self}"),
        ["crate::a::b", "crate::a::c", "crate::e"]
    );
    let mut edges = BTreeMap::new();
    for (a, b) in [("x", "y"), ("y", "z"), ("z", "x"), ("z", "w")] {
        edges
            .entry(a.to_string())
            .or_insert_with(BTreeSet::new)
            .insert(b.to_string());
    }
    edges.insert("w".into(), BTreeSet::new());
    let c = cycles(&edges);
    assert_eq!(c.len(), 1);
    assert_eq!(
        c[0],
        ["x", "y", "z"].iter().map(|s| s.to_string()).collect()
    );
    let mods: BTreeMap<String, String> = [("", "lib.rs"), ("a", "a.rs"), ("a::b", "a/b.rs")]
        .iter()
        .map(|(m, f)| (m.to_string(), f.to_string()))
        .collect();
    assert_eq!(target("super::Thing", "a::b", &mods).as_deref(), Some("a"));
    assert_eq!(target("crate::a::b::X", "", &mods).as_deref(), Some("a::b"));
    assert_eq!(target("b::X", "a", &mods).as_deref(), Some("a::b"));
    assert_eq!(target("serde::Serialize", "a", &mods), None);
}

//! The gate on hostile input: pathological nesting and length (it must answer quickly
//! and must not overflow a 2 MiB stack, the size of a tokio worker's), a replayed
//! corpus of such lines, and a property test over lines built from shell syntax.

use flotilla_sessions::policy::{decide, AlwaysAsk, Policy};
use flotilla_sessions::rules::Rules;
use flotilla_sessions::shell::{analyze, MAX_LINE_BYTES, MAX_NESTING};
use flotilla_sessions::{Decision, Mode, ToolCall};
use serde_json::json;
use std::time::{Duration, Instant};

/// The allow rules of the adversarial table (`tests/gate.rs`).
const ALLOW: &[&str] = &[
    "Bash(ls *)",
    "Bash(echo *)",
    "Bash(git grep *)",
    "Bash(git fetch *)",
    "Bash(cat *)",
    "Bash(find *)",
    "Bash(sed *)",
    "Bash(rg *)",
    "Bash(awk *)",
    "Bash(gawk *)",
    "Bash(tar *)",
    "Bash(sort *)",
    "Bash(compgen *)",
    "Bash(set *)",
    "Bash(true)",
    "Bash(cp *)",
    "Bash(ln *)",
];

fn policy(allow: &[&str]) -> Policy {
    let allow: Vec<String> = allow.iter().map(|s| s.to_string()).collect();
    Policy {
        rules: Rules::parse(&allow, &[], &[]).unwrap(),
        always_ask: AlwaysAsk::default_list(),
    }
}

fn bash(command: &str) -> ToolCall {
    ToolCall {
        tool_name: "Bash".to_string(),
        tool_input: json!({ "command": command }),
        cwd: "/work/tree".to_string(),
    }
}

/// Runs `f` on a thread with a 2 MiB stack and returns its result (a stack overflow
/// aborts the whole test binary, which fails the test run).
fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(f)
        .expect("spawn")
        .join()
        .expect("the gate panicked")
}

/// Every mode's decision on `line`, with the adversarial allow rules and in
/// `bypassPermissions` without rules, computed on a 2 MiB stack.
fn decisions(line: String) -> Vec<(String, Decision)> {
    on_small_stack(move || {
        let rules = policy(ALLOW);
        let none = policy(&[]);
        let mut out = Vec::new();
        for mode in Mode::ALL {
            out.push((
                format!("{mode} + rules"),
                decide(mode, &rules, &bash(&line)),
            ));
        }
        out.push((
            "bypassPermissions".to_string(),
            decide(Mode::BypassPermissions, &none, &bash(&line)),
        ));
        out
    })
}

/// Pathological shapes, `n` levels deep, each hiding `git push`.
fn deep_shapes(n: usize) -> Vec<(&'static str, String)> {
    let push = "git push origin HEAD:refs/heads/pwned";
    let mut sh = push.to_string();
    for _ in 0..n.min(12) {
        sh = format!("sh -c '{}'", sh.replace('\'', "'\\''"));
    }
    vec![
        (
            "$(",
            format!("echo {}{push}{}", "$(".repeat(n), ")".repeat(n)),
        ),
        (
            "${x:-",
            format!("echo {}$({push}){}", "${x:-".repeat(n), "}".repeat(n)),
        ),
        (
            "if",
            format!("{}{push}{}", "if true; then ".repeat(n), "; fi".repeat(n)),
        ),
        (
            "$((",
            format!("echo {}$({push}){}", "$((1+".repeat(n), "))".repeat(n)),
        ),
        ("(", format!("{}{push}{}", "(".repeat(n), ")".repeat(n))),
        ("{", format!("{}{push}{}", "{ ".repeat(n), "; }".repeat(n))),
        (
            "[[ (",
            format!("[[ {}$({push}){} ]]", "( ".repeat(n), " )".repeat(n)),
        ),
        (
            "case",
            format!("{}{push}{}", "case x in x) ".repeat(n), ";; esac".repeat(n)),
        ),
        (
            "while",
            format!(
                "{}{push}{}",
                "while true; do ".repeat(n),
                "; done".repeat(n)
            ),
        ),
        ("heredoc", {
            let mut s = push.to_string();
            for k in 0..n.min(200) {
                s = format!("cat <<E{k}\n$({s})\nE{k}\n");
            }
            s
        }),
        ("backticks", {
            // `a \`b \\\`c\\\`\``: each level doubles the backslashes.
            let mut s = push.to_string();
            for _ in 0..n.min(12) {
                let escaped: String = s
                    .chars()
                    .flat_map(|c| match c {
                        '\\' | '`' => vec!['\\', c],
                        c => vec![c],
                    })
                    .collect();
                s = format!("echo `{escaped}`");
            }
            s
        }),
        ("sh -c", sh),
        ("mixed", {
            let mut s = push.to_string();
            for k in 0..n {
                s = match k % 5 {
                    0 => format!("$({s})"),
                    1 => format!("{{ {s}; }}"),
                    2 => format!("if true; then {s}; fi"),
                    3 => format!("( {s} )"),
                    _ => format!("echo ${{x:-{s}}}"),
                };
            }
            s
        }),
    ]
}

#[test]
fn pathological_nesting_asks_quickly_on_a_small_stack() {
    for n in [MAX_NESTING - 8, MAX_NESTING + 1, 2_000] {
        for (kind, line) in deep_shapes(n) {
            let start = Instant::now();
            for (who, d) in decisions(line.clone()) {
                assert!(
                    !matches!(d, Decision::Allow { .. }),
                    "{kind} x{n} allowed in {who}: {d:?}"
                );
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{kind} x{n} took {:?}",
                start.elapsed()
            );
        }
    }
}

#[test]
fn long_lines_are_refused_before_parsing() {
    let line = format!("echo {}; git push origin", "a ".repeat(MAX_LINE_BYTES));
    let a = analyze(&line);
    assert!(a.commands.is_empty());
    assert!(a.unparsed[0].reason.contains("bytes"), "{:?}", a.unparsed);
    for (who, d) in decisions(line) {
        assert_eq!(d.as_str(), "ask", "{who}: {d:?}");
    }
    // Just under the limit is parsed as usual.
    let line = format!("echo {}", "a ".repeat(1000));
    assert!(analyze(&line).unparsed.is_empty());
}

/// The files under `tests/corpus/`: each is one command line (the whole file) that
/// once crashed or fooled the gate. None may be allowed, in any mode.
#[test]
fn corpus_is_never_allowed() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    assert!(names.len() >= 8, "the corpus is missing: {}", dir.display());
    for path in names {
        let line = std::fs::read_to_string(&path).unwrap();
        for (who, d) in decisions(line) {
            assert!(
                !matches!(d, Decision::Allow { .. }),
                "{} allowed in {who}: {d:?}",
                path.display()
            );
        }
    }
}

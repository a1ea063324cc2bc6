//! The gate on hostile input: pathological nesting and length (it must answer quickly
//! and must not overflow a 2 MiB stack, the size of a tokio worker's), a replayed
//! corpus of such lines, and a property test over lines built from shell syntax.

use flotilla_sessions::policy::{decide, AlwaysAsk, Policy};
use flotilla_sessions::rules::Rules;
use flotilla_sessions::shell::{analyze, MAX_LINE_BYTES, MAX_NESTING};
use flotilla_sessions::{Decision, Mode, ToolCall};
use proptest::prelude::*;
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
        ("( case", {
            // A case pattern's `)` closes no parenthesis, but lowers the count of
            // parentheses: the measure sees one level per `( case x in x)`, the parser
            // two.
            format!(
                "{}{push}{}",
                "( case x in x) ".repeat(n),
                " ;; esac )".repeat(n)
            )
        }),
        ("$( case", {
            format!(
                "echo {}{push}{}",
                "$(case x in x) ".repeat(n),
                " ;; esac)".repeat(n)
            )
        }),
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
    for n in [MAX_NESTING - 8, MAX_NESTING, MAX_NESTING + 1, 2_000] {
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

/// Shapes that make the parser backtrack exponentially on a syntax error (each level
/// doubles its time: 32 unclosed `(` took minutes), and closers hidden in quotes that
/// a naive count would take for real. Each size up to well past the limits is decided
/// in every mode in well under two seconds (debug build), on a 2 MiB stack.
#[test]
fn backtracking_shapes_are_refused_or_fast() {
    type Shape = fn(usize) -> String;
    let shapes: &[(&str, Shape)] = &[
        ("(", |n| "(".repeat(n)),
        ("((", |n| "((".repeat(n)),
        ("( (", |n| "( ( ".repeat(n)),
        ("(x", |n| format!("{}x", "(".repeat(n))),
        ("{ ( (", |n| "{ ( ( ".repeat(n)),
        ("case", |n| "case x in x) ".repeat(n)),
        ("case (", |n| "case x in (x) ".repeat(n)),
        ("( case", |n| "( case x in x) ".repeat(n)),
        ("(( after a shift", |n| {
            format!("echo $((1<<2))\n{}", "(".repeat(n))
        }),
        ("( in a here-document", |n| {
            format!("cat <<'E'\n{}\nE", "( ".repeat(n))
        }),
        ("$( ')'", |n| format!("echo {}", "$( ')' ".repeat(n * 64))),
        ("$( \\)", |n| format!("echo {}", "$( \\) ".repeat(n * 64))),
        ("( ')' (", |n| "( ')' ".repeat(n)),
        ("quotes in a quoted ${…}", |n| {
            format!("echo \"${{x:-' {}'}}\"", "$( ".repeat(n * 64))
        }),
        ("quotes in ${…}", |n| {
            format!("echo ${{x:-' {}'}}", "$( ".repeat(n * 64))
        }),
        ("here-document in $(", |n| {
            format!("echo {}", "$(cat <<E\n$(\nE\n".repeat(n * 64))
        }),
    ];
    for (kind, shape) in shapes {
        for n in (1..=40).step_by(3) {
            let line = shape(n);
            let start = Instant::now();
            assert_eq!(decisions(line.clone()).len(), Mode::ALL.len() + 1);
            assert!(
                start.elapsed() < Duration::from_secs(2),
                "{kind} x{n} took {:?}",
                start.elapsed()
            );
        }
    }
}

/// Lines just under the length limit, made of many commands, writes and words, are
/// decided in a few seconds at most (debug build).
#[test]
fn large_lines_are_decided_quickly() {
    let fill = |unit: &str| unit.repeat((MAX_LINE_BYTES - 100) / unit.len());
    for line in [
        fill("cp a b; ./x; "),
        fill("echo $(ls) > f; "),
        fill("ls -la a b c d e f g h; "),
        fill("git grep -n x -- y; "),
        fill("echo 'a b c' \"d $x\" e; "),
        fill("a=1 b=2 c=3; "),
        fill("x "),
    ] {
        let start = Instant::now();
        let n = decisions(line.clone()).len();
        assert_eq!(n, Mode::ALL.len() + 1);
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{}… took {:?}",
            &line[..20],
            start.elapsed()
        );
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

// ---------------------------------------------------------------- properties

/// Pieces of shell syntax, nesting openers and closers, keywords and plain words.
fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "$(",
            ")",
            "${x:-",
            "}",
            "$((",
            "))",
            "((",
            "(",
            "{ ",
            "; }",
            "[[ ",
            " ]]",
            "`",
            "\\`",
            "'",
            "\"",
            "\\",
            "<<EOF\n",
            "\nEOF\n",
            "<<'E'\n",
            "\nE\n",
            "<(",
            ">(",
            ";",
            "&&",
            "||",
            "|",
            "&",
            "\n",
            " ",
            " ",
            " ",
            "if ",
            "then ",
            "fi",
            "else ",
            "case ",
            " in ",
            "esac",
            "do ",
            "done",
            "while ",
            "for x in ",
            "function f ",
            "git",
            "push",
            "origin",
            "ls",
            "echo",
            "sh -c ",
            "bash -c ",
            "eval ",
            "$x",
            "*",
            "?",
            "[a]",
            "=",
            "BASH_CMDS[ls]=",
            "${PS4:=",
            "-c",
            "--upl=",
            "-O",
            "#",
            "$'\\x41'",
            "~",
        ])
        .prop_map(str::to_string),
        "[ -~]{1,8}",
    ]
}

/// Lines of up to a few thousand tokens (about 20 KB at most).
fn shell_soup() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::collection::vec(token(), 0..64).prop_map(|v| v.concat()),
        prop::collection::vec(token(), 0..3000).prop_map(|v| v.concat()),
    ]
}

const PUSH: &str = "git push origin HEAD:refs/heads/pwned";

fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// `git push` hidden in one of the constructs the review found, then wrapped in more
/// of them, at any depth.
fn hidden_push() -> impl Strategy<Value = String> {
    let base = prop::sample::select(vec![
        PUSH.to_string(),
        format!("BASH_CMDS[ls]=/usr/bin/git; ls {}", &PUSH[4..]),
        format!("BASH_CMDS[ls]=/bin/bash; ls -c {}", sh_quote(PUSH)),
        format!("$(command -v git) {}", &PUSH[4..]),
        format!("/usr/bin/gi? {}", &PUSH[4..]),
        format!("cp /usr/bin/git ./g; ./g {}", &PUSH[4..]),
        format!(
            "git fetch --upl={} origin",
            sh_quote(&format!("{PUSH}; git upload-pack"))
        ),
        format!("git grep -iO{} x", sh_quote(&format!("{PUSH};:"))),
        format!("compgen -C {} x", sh_quote(&format!("{PUSH} #"))),
        format!("zsh -c {}", sh_quote(PUSH)),
        format!("/proc/self/exe -c {}", sh_quote(PUSH)),
        format!(
            "echo ${{PS4:={}}}; set -x; ls",
            sh_quote(&format!("$({PUSH})"))
        ),
        format!("tar -xf a.tar --to-com={}", sh_quote(PUSH)),
        format!("echo {} > s.sh; bash s.sh", sh_quote(PUSH)),
        format!("x={}; $x", sh_quote(PUSH)),
        format!("git -c alias.x={} x", sh_quote(&format!("!{PUSH}"))),
    ]);
    base.prop_recursive(6, 64, 2, |inner| {
        prop_oneof![
            inner.clone().prop_map(|s| format!("echo $({s})")),
            inner.clone().prop_map(|s| format!("echo \"$({s})\"")),
            inner
                .clone()
                .prop_map(|s| format!("sh -c {}", sh_quote(&s))),
            inner
                .clone()
                .prop_map(|s| format!("bash -c {}", sh_quote(&s))),
            inner.clone().prop_map(|s| format!("{{ {s}; }}")),
            inner.clone().prop_map(|s| format!("( {s} )")),
            inner.clone().prop_map(|s| format!("if true; then {s}; fi")),
            inner.clone().prop_map(|s| format!("f() {{ {s}; }}; f")),
            inner.clone().prop_map(|s| format!("timeout 5 {s}")),
            inner
                .clone()
                .prop_map(|s| format!("trap {} EXIT", sh_quote(&s))),
            inner.clone().prop_map(|s| format!("ls -la && {s}")),
            inner.clone().prop_map(|s| format!("{s} || echo no")),
            (inner.clone(), 0..200usize).prop_map(|(s, n)| format!("{}{s}", "ls; ".repeat(n))),
            (inner, 1..120usize).prop_map(|(s, n)| format!(
                "echo {}{s}{}",
                "$(".repeat(n),
                ")".repeat(n)
            )),
        ]
    })
}

fn hunt_cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(hunt_cases(384)))]

    /// Any line (shell metacharacters, nesting tokens and keywords, up to about 20 KB)
    /// is decided on a 2 MiB stack without a panic or an overflow, in every mode; an
    /// Allow means the line was understood in full.
    #[test]
    fn any_line_is_decided_on_a_small_stack(line in shell_soup()) {
        let probe = line.clone();
        let understood = on_small_stack(move || analyze(&probe).unparsed.is_empty());
        for (who, d) in decisions(line.clone()) {
            prop_assert!(
                !matches!(d, Decision::Allow { .. }) || understood,
                "{who} allowed a line it did not understand: {line:?}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(hunt_cases(768)))]

    /// A `git push` hidden in the review's constructs, nested in any order and depth,
    /// is never allowed: not with the everyday allow rules in any mode, not in
    /// `bypassPermissions`.
    #[test]
    fn hidden_push_is_never_allowed(line in hidden_push()) {
        for (who, d) in decisions(line.clone()) {
            prop_assert!(!matches!(d, Decision::Allow { .. }), "{who}: {line:?}: {d:?}");
        }
    }
}

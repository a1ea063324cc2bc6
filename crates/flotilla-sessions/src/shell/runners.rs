//! Programs that run code handed to them, by name: shells, interpreters, debuggers and
//! editors ([`is_code_runner`]), with a version suffix or without.

/// Whether `name` is a shell, interpreter, debugger or editor that runs code handed to
/// it: named in another program's arguments (`docker exec c sh`, `ssh host python3`), it
/// could run anything. Common English words (`dash`, `fish`, `expect`…) are left out.
pub fn is_code_runner(name: &str) -> bool {
    const RUNNERS: &[&str] = &[
        "sh",
        "bash",
        "rbash",
        "zsh",
        "ksh",
        "ksh93",
        "mksh",
        "yash",
        "busybox",
        "csh",
        "tcsh",
        "pwsh",
        "powershell",
        "xonsh",
        "elvish",
        "pypy",
        "pypy3",
        "perl",
        "ruby",
        "node",
        "nodejs",
        "deno",
        "php",
        "lua",
        "luajit",
        "Rscript",
        "julia",
        "osascript",
        "tclsh",
        "rzsh",
        "hush",
        "nushell",
        "jimsh",
        "gdb",
        "lldb",
        "vim",
        "nvim",
        "emacs",
        "parallel",
    ];
    RUNNERS.contains(&name)
        || is_python(name)
        || versioned_stem(name).is_some_and(|stem| RUNNERS.contains(&stem))
}

/// Program names that are a shell or an interpreter with a version suffix (`bash5`,
/// `zsh-5.9`, `python3.11`, `perl5.36`, `ruby3.1`, `node20`): the name without it.
pub(super) fn versioned_stem(name: &str) -> Option<&str> {
    let stem = name.trim_end_matches(|c: char| c.is_ascii_digit() || ".-_".contains(c));
    (stem.len() < name.len() && !stem.is_empty()).then_some(stem)
}

/// `python`, `python3`, `python3.12`…
pub(super) fn is_python(name: &str) -> bool {
    name.strip_prefix("python")
        .is_some_and(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

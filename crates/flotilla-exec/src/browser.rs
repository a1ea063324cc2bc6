//! Opening a URL in this machine's browser (`flotilla ui`): `$BROWSER` when set
//! (the convention of Debian's `sensible-browser` and Python's `webbrowser`: a
//! `:`-separated list of commands, each with `%s` for the URL or the URL appended;
//! the first that runs is used), else `open` on macOS, else `xdg-open` when a
//! display is there (`$DISPLAY` or `$WAYLAND_DISPLAY`). The opener is run to its end
//! ([`crate::detached::run_verb`]): `xdg-open` and `open` hand the URL to the
//! browser and return.

use std::path::Path;

/// Why a URL cannot be opened here.
#[derive(Debug, thiserror::Error)]
pub enum BrowserError {
    /// No browser opener is known or usable here (no display, no `xdg-open`).
    #[error("no browser here: {0}")]
    NoBrowser(String),
    /// Every opener tried failed.
    #[error("the browser could not be started: {0}")]
    Failed(String),
}

/// The command lines that would open `url`, in the order they are tried: from
/// `$BROWSER` (looked up with `env`), else the platform's opener (`os` is
/// `std::env::consts::OS`; `on_path` says whether a program is found on `PATH`).
///
/// # Errors
/// [`BrowserError::NoBrowser`], saying why.
pub fn openers(
    url: &str,
    os: &str,
    env: &dyn Fn(&str) -> Option<String>,
    on_path: &dyn Fn(&str) -> bool,
) -> Result<Vec<Vec<String>>, BrowserError> {
    if let Some(list) = env("BROWSER").filter(|b| !b.trim().is_empty()) {
        let cmds: Vec<Vec<String>> = list
            .split(':')
            .filter(|c| !c.trim().is_empty())
            .map(|c| {
                let mut argv: Vec<String> =
                    c.split_whitespace().map(|a| a.replace("%s", url)).collect();
                if !c.contains("%s") {
                    argv.push(url.to_string());
                }
                argv
            })
            .collect();
        return Ok(cmds);
    }
    if os == "macos" {
        return Ok(vec![vec!["open".into(), url.into()]]);
    }
    let display = ["DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|v| env(v).is_some_and(|d| !d.is_empty()));
    if !display {
        return Err(BrowserError::NoBrowser(
            "no display ($DISPLAY and $WAYLAND_DISPLAY are unset) and no $BROWSER".into(),
        ));
    }
    if !on_path("xdg-open") {
        return Err(BrowserError::NoBrowser(
            "xdg-open is not installed and $BROWSER is unset".into(),
        ));
    }
    Ok(vec![vec!["xdg-open".into(), url.into()]])
}

/// Whether `program` is an executable file in a directory of `$PATH`.
pub fn on_path(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p).any(|d| {
            std::fs::metadata(Path::new(&d).join(program))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// Opens `url` with the first of [`openers`] (this process's environment) that
/// succeeds; the command line used.
///
/// # Errors
/// [`BrowserError::NoBrowser`] when there is no opener; [`BrowserError::Failed`]
/// when each failed (their errors joined).
pub fn open(url: &str) -> Result<String, BrowserError> {
    let cmds = openers(
        url,
        std::env::consts::OS,
        &|v| std::env::var(v).ok(),
        &on_path,
    )?;
    let mut errors = Vec::new();
    for argv in cmds {
        match crate::detached::run_verb(&argv) {
            Ok(_) => return Ok(argv.join(" ")),
            Err(e) => errors.push(e.to_string()),
        }
    }
    Err(BrowserError::Failed(errors.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn browser_wins_then_the_platform_opener_with_a_display() {
        let u = "https://a/ui/";
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let yes = |_: &str| true;
        assert_eq!(
            openers(
                u,
                "linux",
                &env(&[("BROWSER", "w3m:firefox --new-tab %s")]),
                &yes
            )
            .unwrap(),
            vec![
                vec!["w3m".to_string(), u.into()],
                vec!["firefox".into(), "--new-tab".into(), u.into()]
            ]
        );
        assert_eq!(
            openers(u, "macos", &env(&[]), &yes).unwrap(),
            vec![vec!["open".to_string(), u.into()]]
        );
        assert_eq!(
            openers(u, "linux", &env(&[("WAYLAND_DISPLAY", "wayland-0")]), &yes).unwrap(),
            vec![vec!["xdg-open".to_string(), u.into()]]
        );
        let e = openers(u, "linux", &env(&[]), &yes).unwrap_err();
        assert!(e.to_string().contains("no display"), "{e}");
        let e = openers(u, "linux", &env(&[("DISPLAY", ":0")]), &|_| false).unwrap_err();
        assert!(e.to_string().contains("xdg-open is not installed"), "{e}");
    }
}

//! Where a started component's processes live in the cgroup tree.
//!
//! A component the node agent starts while the agent itself runs as a systemd
//! service would otherwise stay in the agent's cgroup (`KillMode=process` is what
//! keeps it alive across the agent's restarts, and `systemctl status` of the agent
//! would list it). Instead, when this process runs as a systemd service and systemd
//! is the init system, each component's log writer is started through
//! `systemd-run --scope` (systemd-run(1)): the component runs in a transient scope of
//! its own, `flotilla-<component>-<ms>.scope` (in `system.slice`, or the user
//! manager's `app.slice` for a user service), which systemd shows, accounts and
//! keeps apart from the agent's unit, whatever happens to the agent. A process
//! started from a login shell (`flotilla up`) stays where it is. When `systemd-run`
//! cannot make the scope, the component is started without one (and a warning says
//! why).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The systemd unit of a `/proc/self/cgroup` text: the last `*.service` component of
/// the unified hierarchy's path (`0::…`, else the `name=systemd` v1 hierarchy), and
/// whether it is a user unit (the path goes through `user@UID.service`).
pub fn unit_from_cgroup(cgroup: &str) -> Option<(bool, String)> {
    let path = cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .or_else(|| {
            cgroup
                .lines()
                .find_map(|l| l.split_once(":name=systemd:").map(|(_, p)| p))
        })?;
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let i = parts.iter().rposition(|p| p.ends_with(".service"))?;
    let unit = parts[i];
    if unit.starts_with("user@") {
        // The user manager itself, not one of its units.
        return None;
    }
    let user = parts[..i].iter().any(|p| p.starts_with("user@"));
    Some((user, unit.to_string()))
}

/// How components are placed by this process: `Some(user)` to start them in a
/// transient systemd scope of their own (`user`: of the user manager), `None` to
/// leave them in this process's cgroup. Decided once per process: this process runs
/// in a `*.service` cgroup (see [`unit_from_cgroup`]), `/run/systemd/system` exists
/// (systemd is the init system) and `systemd-run` is on `PATH` (or in `/usr/bin`,
/// `/bin`). `FLOTILLA_COMPONENT_SCOPE=0` turns it off.
pub fn scope_placement() -> Option<&'static (bool, PathBuf)> {
    static DECIDED: OnceLock<Option<(bool, PathBuf)>> = OnceLock::new();
    DECIDED
        .get_or_init(|| {
            if std::env::var("FLOTILLA_COMPONENT_SCOPE").is_ok_and(|v| v == "0") {
                return None;
            }
            if !Path::new("/run/systemd/system").is_dir() {
                return None;
            }
            let (user, _) = unit_from_cgroup(&crate::sys::self_cgroup()?)?;
            let path = std::env::var_os("PATH").unwrap_or_default();
            let run = std::env::split_paths(&path)
                .chain([PathBuf::from("/usr/bin"), PathBuf::from("/bin")])
                .map(|d| d.join("systemd-run"))
                .find(|p| p.is_file())?;
            Some((user, run))
        })
        .as_ref()
}

/// The scope's unit name for a start of `component` at `at_ms`:
/// `flotilla-llm-1796121663120.scope` (characters outside `[A-Za-z0-9_.-]` become
/// `_`, as unit names allow no others unescaped; see systemd.unit(5)).
pub fn scope_name(component: &str, at_ms: u64) -> String {
    let safe: String = component
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("flotilla-{safe}-{at_ms}.scope")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_names_are_valid_unit_names() {
        assert_eq!(scope_name("llm", 5), "flotilla-llm-5.scope");
        assert_eq!(scope_name("a b/c", 7), "flotilla-a_b_c-7.scope");
    }
}

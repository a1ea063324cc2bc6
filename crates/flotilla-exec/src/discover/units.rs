//! systemd service units that run, asked of `systemctl` (systemd ≥ 240; properties
//! as org.freedesktop.systemd1(5) names them): `systemctl list-units --type=service
//! --state=running --plain --no-legend --full --no-pager` for their names, then one
//! `systemctl show` of them all for what a proposal needs. The plain listing and
//! `show` work on every version this crate supports (`--output=json` of
//! `list-units` does not), so they are what is read.

use super::{DiscoverError, UnitFacts};
use std::path::Path;

/// The properties read with `systemctl show`.
pub const PROPERTIES: &str =
    "Id,Description,MainPID,FragmentPath,ControlGroup,UnitFileState,User,ExecStart";

/// Every running `.service` unit of the system manager, with its properties.
///
/// # Errors
/// [`DiscoverError::Verb`] when `systemctl` cannot run or fails.
pub fn running(systemctl: &Path) -> Result<Vec<UnitFacts>, DiscoverError> {
    let listed = ctl(
        systemctl,
        &[
            "list-units",
            "--type=service",
            "--state=running",
            "--plain",
            "--no-legend",
            "--full",
            "--no-pager",
        ],
    )?;
    let names = parse_list(&listed);
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let mut args = vec!["show", "-p", PROPERTIES, "--"];
    args.extend(names.iter().map(String::as_str));
    Ok(parse_show(&ctl(systemctl, &args)?))
}

/// Runs `systemctl ARGS` to its end ([`crate::detached::run_verb`]); its standard
/// output.
fn ctl(systemctl: &Path, args: &[&str]) -> Result<String, DiscoverError> {
    let mut argv: Vec<&std::ffi::OsStr> = vec![systemctl.as_os_str()];
    argv.extend(args.iter().map(std::ffi::OsStr::new));
    Ok(crate::detached::run_verb(&argv)?)
}

/// The unit names of `list-units --plain --no-legend` (its first column), `.service`
/// units only.
pub fn parse_list(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|u| u.ends_with(".service"))
        .map(str::to_string)
        .collect()
}

/// The units of `systemctl show` of several units: `Key=Value` lines, a blank line
/// between units. A block without `Id` is left out.
pub fn parse_show(text: &str) -> Vec<UnitFacts> {
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let mut u = UnitFacts::default();
        for line in block.lines() {
            let Some((k, v)) = line.split_once('=') else {
                continue;
            };
            let some = || Some(v.to_string()).filter(|v| !v.is_empty());
            match k {
                "Id" => u.unit = v.to_string(),
                "Description" => u.description = some(),
                "MainPID" => u.main_pid = v.parse().unwrap_or(0),
                "FragmentPath" => u.fragment_path = some(),
                "ControlGroup" => u.control_group = some(),
                "UnitFileState" => u.unit_file_state = some(),
                "User" => u.user = some(),
                // The first command only (a unit may list several).
                "ExecStart" if u.exec_start.is_empty() => u.exec_start = exec_start_argv(v),
                _ => {}
            }
        }
        if !u.unit.is_empty() {
            out.push(u);
        }
    }
    out
}

/// The `argv[]` of a `systemctl show` `ExecStart` value (`{ path=/usr/bin/x ;
/// argv[]=/usr/bin/x -p 8080 ; ignore_errors=no ; … }`), split at spaces as systemd
/// prints it (its words are not quoted there).
fn exec_start_argv(value: &str) -> Vec<String> {
    let Some(start) = value.find("argv[]=") else {
        return Vec::new();
    };
    let rest = &value[start + "argv[]=".len()..];
    let end = rest.find(" ; ").unwrap_or(rest.len());
    rest[..end].split_whitespace().map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_units_plain_gives_names() {
        let text = "cron.service loaded active running Regular background program processing daemon\nllama@big.service loaded active running llama.cpp\nfoo.socket loaded active running x\n";
        assert_eq!(parse_list(text), ["cron.service", "llama@big.service"]);
        assert!(parse_list("").is_empty());
    }

    #[test]
    fn show_of_several_units() {
        let text = "Id=llama.service\nDescription=llama.cpp server\nMainPID=4242\nFragmentPath=/etc/systemd/system/llama.service\nControlGroup=/system.slice/llama.service\nUnitFileState=enabled\nUser=llm\nExecStart={ path=/opt/llama/llama-server ; argv[]=/opt/llama/llama-server --port 8080 -m /m.gguf ; ignore_errors=no ; start_time=[Mon 2026-01-05 10:00:00 UTC] ; stop_time=[n/a] ; pid=4242 ; code=(null) ; status=0/0 }\n\nId=cron.service\nDescription=Regular background program processing daemon\nMainPID=12\nFragmentPath=/lib/systemd/system/cron.service\nControlGroup=/system.slice/cron.service\nUnitFileState=enabled\nUser=\nExecStart={ path=/usr/sbin/cron ; argv[]=/usr/sbin/cron -f $EXTRA_OPTS ; ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=12 ; code=(null) ; status=0/0 }\n";
        let units = parse_show(text);
        assert_eq!(units.len(), 2);
        let u = &units[0];
        assert_eq!(u.unit, "llama.service");
        assert_eq!(u.main_pid, 4242);
        assert_eq!(
            u.fragment_path.as_deref(),
            Some("/etc/systemd/system/llama.service")
        );
        assert_eq!(
            u.control_group.as_deref(),
            Some("/system.slice/llama.service")
        );
        assert_eq!(u.user.as_deref(), Some("llm"));
        assert_eq!(
            u.exec_start,
            ["/opt/llama/llama-server", "--port", "8080", "-m", "/m.gguf"]
        );
        assert_eq!(units[1].user, None);
        assert_eq!(units[1].exec_start[0], "/usr/sbin/cron");
    }
}

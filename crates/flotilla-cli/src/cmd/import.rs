//! `flotilla import compose [FILE]`: a docker compose file as an equivalent inventory
//! (`flotilla_compose::convert`), written to standard output or `--output FILE`.
//! Nothing is run or pulled. This file does the IO: it reads the compose file and
//! what compose would take from the machine (the environment and the `.env` beside the
//! file, for interpolation; the home directory), checks the result with the same
//! validation as `flotilla validate`, and writes it only when it is valid.

use crate::{render, Cli, EXIT_OK, EXIT_REFUSED, EXIT_USAGE};
use anyhow::Context;
use flotilla_model::{Format, Severity, SourceFile, Sources};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The compose files looked for, in compose's order, when FILE is not given.
pub const COMPOSE_FILES: &[&str] = &[
    "compose.yaml",
    "compose.yml",
    "docker-compose.yaml",
    "docker-compose.yml",
];

/// Arguments of `flotilla import`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub command: ImportCommand,
}

/// `flotilla import` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum ImportCommand {
    /// Write an inventory equivalent to a docker compose file: one `container`
    /// component per service, one stack per compose project (and one per profile),
    /// a `#` comment for every key not carried over. Runs nothing.
    ///
    /// `${VAR}` in `environment` and `command` becomes `${env.VAR}` (read where the
    /// component starts); elsewhere it is resolved now, from the environment and the
    /// `.env` beside the file. A value that looks like a secret is never written, even
    /// when the compose file holds it. The result is validated before it is written;
    /// errors name FILE:LINE:COLUMN and nothing is written.
    Compose(ComposeArgs),
}

/// Arguments of `flotilla import compose`.
#[derive(clap::Args, Debug)]
pub struct ComposeArgs {
    /// The compose file; default: compose.yaml, compose.yml, docker-compose.yaml or
    /// docker-compose.yml in the current directory. The project is named by -p, else
    /// the file's `name`, else its directory (as compose names it).
    #[arg(value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Write the inventory to FILE instead of standard output (refused if FILE exists,
    /// unless --force). Relative host paths are rewritten to stay the compose file's.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Overwrite --output if it exists.
    #[arg(long, requires = "output")]
    pub force: bool,
}

/// Runs the subcommand; returns the exit status.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    match &args.command {
        ImportCommand::Compose(a) => compose(cli, a),
    }
}

fn compose(cli: &Cli, args: &ComposeArgs) -> anyhow::Result<u8> {
    let path = match &args.file {
        Some(p) => p.clone(),
        None => COMPOSE_FILES
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .ok_or_else(|| {
                crate::usage(format!(
                    "no compose file found: looked for {} in the current directory; pass FILE",
                    COMPOSE_FILES.join(", ")
                ))
            })?,
    };
    let text = std::fs::read_to_string(&path).map_err(|e| {
        crate::usage_from(format!("cannot read compose file {}", path.display()), e)
    })?;
    let compose_dir = std::path::absolute(parent(&path))
        .with_context(|| format!("cannot resolve the directory of {}", path.display()))?;
    if let Some(out) = &args.output {
        if out.exists() && !args.force {
            eprintln!(
                "error: {} exists: nothing written (--force overwrites it)",
                out.display()
            );
            return Ok(EXIT_REFUSED);
        }
    }
    let base_dir = match &args.output {
        Some(out) => {
            let out_dir = std::path::absolute(parent(out))
                .with_context(|| format!("cannot resolve the directory of {}", out.display()))?;
            let (out_dir, compose_dir) = (normal(&out_dir), normal(&compose_dir));
            (out_dir != compose_dir).then(|| relative(&out_dir, &compose_dir).display().to_string())
        }
        None => None,
    };
    let (variables, variables_source) = variables(&compose_dir)?;
    let options = flotilla_compose::Options {
        project: cli.project.clone(),
        dir_name: compose_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        file_name: path.display().to_string(),
        base_dir,
        home: std::env::var("HOME").ok().filter(|h| !h.is_empty()),
        variables,
        variables_source,
    };
    let conversion = match flotilla_compose::convert(&text, &options) {
        Ok(c) => c,
        Err(errors) => {
            for e in &errors {
                let at = e.at();
                let message = match e {
                    flotilla_compose::ComposeError::Syntax { message, .. } => {
                        format!("YAML syntax error: {message}")
                    }
                    flotilla_compose::ComposeError::Invalid { message, .. } => message.clone(),
                };
                eprintln!("{}:{}:{}: {message}", path.display(), at.line, at.column);
                if let Some(line) = text.lines().nth(at.line.saturating_sub(1) as usize) {
                    eprintln!("  | {line}");
                    eprintln!("  | {}^", " ".repeat(at.column.saturating_sub(1) as usize));
                }
            }
            eprintln!(
                "error: {} cannot be imported ({} error{}): nothing written",
                path.display(),
                errors.len(),
                if errors.len() == 1 { "" } else { "s" }
            );
            return Ok(EXIT_USAGE);
        }
    };
    // The result must be an inventory `flotilla validate` accepts.
    let shown = args
        .output
        .as_ref()
        .map(|o| o.display().to_string())
        .unwrap_or_else(|| "<standard output>.toml".into());
    let mut sources = Sources::new();
    let file = sources.add(SourceFile::from_bytes(
        shown.clone(),
        Format::Toml,
        conversion.toml.clone().into_bytes(),
    ));
    match flotilla_model::validate(&sources, file, &[]) {
        Ok(v) => render::diagnostics(&sources, &v.warnings),
        Err(diags) => {
            render::diagnostics(&sources, &diags);
            let errors = diags
                .iter()
                .filter(|d| d.severity == Severity::Error)
                .count();
            eprintln!(
                "error: the inventory made from {} is invalid ({errors} error{}): nothing written",
                path.display(),
                if errors == 1 { "" } else { "s" }
            );
            return Ok(EXIT_USAGE);
        }
    }
    // `docker compose up` merges an override file beside the standard one by itself
    // (compose's "Merge and override"); this import reads one file.
    if let Some(over) = override_beside(&path) {
        eprintln!(
            "warning: {} beside {} is not merged in: docker compose would apply it; to include it, import the merged file: docker compose config > merged.yaml && flotilla import compose merged.yaml",
            over.display(),
            path.display()
        );
    }
    let summary = format!(
        "{} component{}, {} stack{}; {} comment{} on what was not carried over",
        conversion.inventory.components.len(),
        plural(conversion.inventory.components.len()),
        conversion.inventory.stacks.len(),
        plural(conversion.inventory.stacks.len()),
        conversion.notes,
        plural(conversion.notes),
    );
    match &args.output {
        Some(out) => {
            write_file(out, conversion.toml.as_bytes(), args.force)?;
            eprintln!(
                "{}: project `{}`, {summary}; nothing was run (check it: flotilla -f {} check)",
                out.display(),
                conversion.project,
                out.display()
            );
        }
        None => {
            std::io::stdout().write_all(conversion.toml.as_bytes())?;
            eprintln!(
                "project `{}`: {summary}; nothing was run",
                conversion.project
            );
        }
    }
    Ok(EXIT_OK)
}

/// The override file docker compose reads with `path` when `path` is one of the
/// standard names (`compose.override.yaml` beside `compose.yaml`, …), if one exists.
fn override_beside(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?.to_str()?;
    let (stem, _) = name.rsplit_once('.')?;
    if !COMPOSE_FILES.contains(&name) {
        return None;
    }
    ["yaml", "yml"]
        .iter()
        .map(|ext| parent(path).join(format!("{stem}.override.{ext}")))
        .find(|p| p.exists())
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn parent(p: &Path) -> &Path {
    p.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// `p` without `.` components (`absolute` keeps them).
fn normal(p: &Path) -> PathBuf {
    p.components()
        .filter(|c| !matches!(c, std::path::Component::CurDir))
        .collect()
}

/// `to` as seen from `from` (both absolute, normalised): `../compose` and the like.
fn relative(from: &Path, to: &Path) -> PathBuf {
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..from.len() {
        out.push("..");
    }
    for c in &to[common..] {
        out.push(c);
    }
    if out.as_os_str().is_empty() {
        out.push(".");
    }
    out
}

/// Compose's interpolation variables: the `.env` file beside the compose file, under
/// the environment (which wins, as in compose).
fn variables(dir: &Path) -> anyhow::Result<(BTreeMap<String, String>, String)> {
    let mut vars = BTreeMap::new();
    let dotenv = dir.join(".env");
    let mut source = "the environment".to_string();
    if dotenv.is_file() {
        let text = std::fs::read_to_string(&dotenv)
            .map_err(|e| crate::usage_from(format!("cannot read {}", dotenv.display()), e))?;
        let pairs = flotilla_exec::secrets::parse_dotenv(&text).map_err(|line| {
            crate::usage(format!(
                "{}:{line}: expected NAME=value (compose reads this file for interpolation)",
                dotenv.display()
            ))
        })?;
        vars.extend(pairs);
        source = format!("the environment and {}", dotenv.display());
    }
    vars.extend(
        std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
    );
    Ok((vars, source))
}

/// Writes `bytes` to `path` whole or not at all: a new file is created exclusively
/// (a file that appeared meanwhile is not overwritten); with `force`, a temporary file
/// beside it is renamed over it.
fn write_file(path: &Path, bytes: &[u8], force: bool) -> anyhow::Result<()> {
    if !force {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        f.write_all(bytes)
            .with_context(|| format!("cannot write {}", path.display()))?;
        return Ok(());
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = parent(path).join(format!(".{name}.{}.tmp", std::process::id()));
    let result = std::fs::write(&tmp, bytes)
        .and_then(|()| std::fs::rename(&tmp, path))
        .with_context(|| format!("cannot write {}", path.display()));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

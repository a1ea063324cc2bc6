//! Reading the inventory and its template files from disk (the only IO the read-only
//! verbs do), and handing them to `flotilla_model::validate`.

use anyhow::{Context, Result};
use flotilla_model::{validate, Diagnostic, Format, SourceFile, Sources, TemplateRef, Validated};
use std::path::{Path, PathBuf};

/// The inventory files looked for, in order, when `-f` is not given.
pub const DEFAULT_FILES: &[&str] = &["flotilla.toml", "flotilla.json"];

/// What loading produced: the sources (for rendering) and the validation outcome.
pub struct Loaded {
    /// Every file read.
    pub sources: Sources,
    /// The inventory's directory: the base of relative paths in it.
    pub base_dir: PathBuf,
    /// Topology and warnings, or every diagnostic.
    pub result: Result<Validated, Vec<Diagnostic>>,
}

/// Finds the inventory: `explicit` if given, else the first of [`DEFAULT_FILES`] in the
/// current directory.
pub fn inventory_path(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        return Ok(p.to_path_buf());
    }
    for name in DEFAULT_FILES {
        let p = PathBuf::from(name);
        if p.exists() {
            return Ok(p);
        }
    }
    Err(crate::usage(format!(
        "no inventory found: looked for {} in the current directory; pass -f FILE or set FLOTILLA_FILE",
        DEFAULT_FILES.join(" and ")
    )))
}

/// Reads the inventory at `path`, and every `templates/*.toml` / `*.json` beside it,
/// then validates them.
///
/// # Errors
/// When a file cannot be read (invalid content, including bytes that are not UTF-8,
/// is reported in `result` instead).
pub fn load(path: &Path) -> Result<Loaded> {
    let bytes = std::fs::read(path)
        .map_err(|e| crate::usage_from(format!("cannot read inventory {}", path.display()), e))?;
    let mut sources = Sources::new();
    let name = path.display().to_string();
    let inventory = sources.add(SourceFile::from_bytes(
        name.clone(),
        Format::from_path(&name),
        bytes,
    ));
    let mut templates = Vec::new();
    let dir = path.parent().unwrap_or(Path::new("")).join("templates");
    if dir.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
            .with_context(|| format!("cannot list {}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("toml" | "json")
                )
            })
            .collect();
        entries.sort();
        for p in entries {
            let bytes = std::fs::read(&p)
                .with_context(|| format!("cannot read template {}", p.display()))?;
            let shown = p.display().to_string();
            let file = sources.add(SourceFile::from_bytes(
                shown.clone(),
                Format::from_path(&shown),
                bytes,
            ));
            let tname = p
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default()
                .to_string();
            templates.push(TemplateRef { name: tname, file });
        }
    }
    let mut result = validate(&sources, inventory, &templates);
    let base_dir = std::path::absolute(
        path.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new(".")),
    )
    .with_context(|| format!("cannot resolve the directory of {}", path.display()))?;
    if let Ok(v) = &mut result {
        anchor_kubeconfigs(&mut v.topology, &base_dir);
    }
    Ok(Loaded {
        sources,
        base_dir,
        result,
    })
}

/// Makes every cluster's relative `kubeconfig` relative to the inventory's directory
/// `base_dir`, as every other path in the inventory is (not to the directory
/// `flotilla` runs in); absolute and `~/` paths are kept.
fn anchor_kubeconfigs(topology: &mut flotilla_model::topology::Topology, base_dir: &Path) {
    let anchor = |c: &mut Option<flotilla_model::topology::Cluster>| {
        if let Some(k) = c.as_mut().and_then(|c| c.kubeconfig.as_mut()) {
            if !k.starts_with('/') && !k.starts_with("~/") {
                *k = base_dir.join(&*k).display().to_string();
            }
        }
    };
    for h in topology.hosts.values_mut() {
        anchor(&mut h.cluster);
    }
    for c in &mut topology.components {
        anchor(&mut c.cluster);
    }
}

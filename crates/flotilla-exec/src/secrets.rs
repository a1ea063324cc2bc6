//! Secret resolution on the host, at execution time (DESIGN.md invariant 9).
//!
//! The topology references secrets by name (`EnvValue::Secret("HF_TOKEN")`); a
//! [`SecretResolver`] turns a name into its value from, in order, the environment
//! variable of the same name and a secrets file. Values are never logged, never
//! `Debug`-printed and never appear in errors: only names do.

use flotilla_model::values::EnvValue;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

/// Why a secret could not be resolved or the secrets file could not be used.
/// Messages name the file, line number or secret name, never a value.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The secrets file is readable or writable by group or others.
    #[error("secrets file {path} has mode {mode:04o}, readable by others: run `chmod 600 {path}`", path = path.display())]
    InsecureFile {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The secrets file belongs to another user.
    #[error("secrets file {path} belongs to uid {owner}, not to uid {me} running flotilla: run `chown {me} {path}`", path = path.display())]
    NotOwned {
        /// The file.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// The effective uid of this process.
        me: u32,
    },
    /// The secrets file cannot be read.
    #[error("secrets file {path}: {source}", path = path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A line of the secrets file is not `NAME=value`.
    #[error("secrets file {path} line {line}: expected NAME=value", path = path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// 1-based line number (the line itself is not shown: it may hold a value).
        line: usize,
    },
    /// No source has the secret.
    #[error("component `{component}`: secret `{name}` is not set (looked in {looked_in})")]
    Missing {
        /// The component needing it.
        component: String,
        /// The secret's name.
        name: String,
        /// Where it looked, e.g. "the environment and /home/me/.config/flotilla/secrets".
        looked_in: String,
    },
}

/// Resolves secret names to values. `Debug` shows its sources and how many entries
/// the file had, never a name's value.
pub struct SecretResolver {
    env: bool,
    file: Option<PathBuf>,
    /// A secrets file that was looked for and does not exist (named in messages).
    absent_file: Option<PathBuf>,
    values: HashMap<String, String>,
}

impl fmt::Debug for SecretResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretResolver")
            .field("env", &self.env)
            .field("file", &self.file)
            .field("file_entries", &self.values.len())
            .finish_non_exhaustive()
    }
}

impl SecretResolver {
    /// A resolver reading the environment (when `env`) and then `file` (when given).
    ///
    /// The file is read once, here. It must be owned by the effective user and have
    /// no group or other permission bits (`mode & 0o077 == 0`). Format: one
    /// `NAME=value` per line; blank lines and lines starting with `#` are skipped;
    /// `export ` before the name is allowed; the value is the rest of the line, with
    /// one pair of surrounding `"` or `'` removed.
    ///
    /// # Errors
    /// [`SecretError::InsecureFile`] (with the `chmod 600` fix), [`SecretError::NotOwned`],
    /// [`SecretError::Read`] (including a missing file), [`SecretError::Malformed`].
    pub fn new(env: bool, file: Option<PathBuf>) -> Result<Self, SecretError> {
        let values = match &file {
            Some(path) => read_file(path)?,
            None => HashMap::new(),
        };
        Ok(SecretResolver {
            env,
            file,
            absent_file: None,
            values,
        })
    }

    /// Says in messages that `path` was looked for too and does not exist.
    pub fn also_looked_for(mut self, path: PathBuf) -> Self {
        self.absent_file = Some(path);
        self
    }

    /// The value of secret `name`, if any source has it (environment first).
    pub fn get(&self, name: &str) -> Option<String> {
        if self.env {
            if let Ok(v) = std::env::var(name) {
                return Some(v);
            }
        }
        self.values.get(name).cloned()
    }

    /// The value of secret `name`, needed by `component`.
    ///
    /// # Errors
    /// [`SecretError::Missing`] naming the component, the secret and where it looked.
    pub fn require(&self, component: &str, name: &str) -> Result<String, SecretError> {
        self.get(name).ok_or_else(|| SecretError::Missing {
            component: component.to_string(),
            name: name.to_string(),
            looked_in: self.sources(),
        })
    }

    /// A component's environment with every secret reference resolved, as
    /// `(name, value)` pairs in name order: what [`crate::process::ProcessSpec::env`]
    /// takes.
    ///
    /// # Errors
    /// [`SecretError::Missing`] for the first secret no source has.
    pub fn resolve_env(
        &self,
        component: &str,
        env: &BTreeMap<String, EnvValue>,
    ) -> Result<Vec<(String, String)>, SecretError> {
        env.iter()
            .map(|(k, v)| {
                let value = match v {
                    EnvValue::Literal(s) => s.clone(),
                    EnvValue::Secret(name) => self.require(component, name)?,
                };
                Ok((k.clone(), value))
            })
            .collect()
    }

    /// Where this resolver looks, for messages: "the environment and FILE".
    pub fn sources(&self) -> String {
        if let (true, None, Some(absent)) = (self.env, &self.file, &self.absent_file) {
            return format!(
                "the environment and {} (which does not exist)",
                absent.display()
            );
        }
        match (self.env, &self.file) {
            (true, Some(f)) => format!("the environment and {}", f.display()),
            (true, None) => "the environment".into(),
            (false, Some(f)) => f.display().to_string(),
            (false, None) => "no source (no environment, no secrets file)".into(),
        }
    }
}

fn read_file(path: &Path) -> Result<HashMap<String, String>, SecretError> {
    use std::os::unix::fs::MetadataExt;
    let read_err = |source| SecretError::Read {
        path: path.to_path_buf(),
        source,
    };
    let md = std::fs::metadata(path).map_err(read_err)?;
    let mode = md.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(SecretError::InsecureFile {
            path: path.to_path_buf(),
            mode,
        });
    }
    let me = nix::unistd::geteuid().as_raw();
    if md.uid() != me {
        return Err(SecretError::NotOwned {
            path: path.to_path_buf(),
            owner: md.uid(),
            me,
        });
    }
    let text = std::fs::read_to_string(path).map_err(read_err)?;
    let pairs = parse_dotenv(&text).map_err(|line| SecretError::Malformed {
        path: path.to_path_buf(),
        line,
    })?;
    Ok(pairs.into_iter().collect())
}

/// Parses dotenv text: one `NAME=value` per line; blank lines and lines starting with
/// `#` are skipped; `export ` before the name is allowed; the value is the rest of
/// the line, with one pair of surrounding `"` or `'` removed. The pairs in file order
/// (a later one wins when names repeat); `Err(line)` (from 1) for a malformed line.
pub fn parse_dotenv(text: &str) -> Result<Vec<(String, String)>, usize> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let (name, value) = line.split_once('=').ok_or(i + 1)?;
        let name = name.trim();
        if name.is_empty() || name.contains(char::is_whitespace) {
            return Err(i + 1);
        }
        let value = value.trim_end_matches('\r');
        let value = ['"', '\'']
            .iter()
            .find_map(|q| {
                value
                    .strip_prefix(*q)
                    .and_then(|v| v.strip_suffix(*q))
                    .filter(|_| value.len() >= 2)
            })
            .unwrap_or(value);
        out.push((name.to_string(), value.to_string()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn file_format_and_debug() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secrets");
        std::fs::write(
            &path,
            "# comment\n\nA_TOKEN=abc=def\nexport B_KEY=\"quoted value\"\nC='x'\n",
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let r = SecretResolver::new(false, Some(path.clone())).unwrap();
        assert_eq!(r.get("A_TOKEN").as_deref(), Some("abc=def"));
        assert_eq!(r.get("B_KEY").as_deref(), Some("quoted value"));
        assert_eq!(r.get("C").as_deref(), Some("x"));
        assert_eq!(r.get("PATH"), None, "env disabled");
        let dbg = format!("{r:?}");
        assert!(!dbg.contains("abc") && !dbg.contains("quoted"), "{dbg}");
        let err = r.require("web", "NOPE").unwrap_err().to_string();
        assert!(err.contains("`NOPE`") && err.contains("web"), "{err}");

        std::fs::write(&path, "A=1\nnot a pair\n").unwrap();
        let err = SecretResolver::new(false, Some(path)).unwrap_err();
        assert!(
            matches!(err, SecretError::Malformed { line: 2, .. }),
            "{err}"
        );
    }
}

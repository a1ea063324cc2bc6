//! A local inventory as the desired-state source (`flotilla agent run --inventory
//! FILE`): a single machine gets supervision and boot integration without an
//! authority.
//!
//! The file is loaded and validated by the same loader the CLI uses, handed in as an
//! [`InventoryLoader`] (the CLI owns it; this crate does not depend on the CLI). It is
//! polled: each poll compares every file the last load read (the inventory, its
//! templates) and the `templates/` directory by modification time and size, and only
//! when one moved compares their SHA-256 over their content; only a real change is
//! loaded again. An invalid edit is reported once ([`SourceError::Invalid`]) and the
//! last good desired state is kept; fixing the file makes it the desired state.
//!
//! Its revision is the digest of the validated topology (`sha256:` of its canonical
//! JSON), as an authority names revisions.

use crate::source::{Desired, Next, Source, SourceError};
use flotilla_model::Topology;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// An inventory, loaded and validated.
#[derive(Debug)]
pub struct LoadedInventory {
    /// The validated topology, its project set.
    pub topology: Topology,
    /// The inventory's directory: the base of relative paths in it.
    pub base_dir: PathBuf,
    /// Every file read (the inventory first, then its templates).
    pub files: Vec<PathBuf>,
}

/// Why an inventory could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// A file could not be read.
    #[error("{0}")]
    Unreadable(String),
    /// It does not validate: a summary (`2 errors; first: …`), the loader having
    /// shown the diagnostics themselves.
    #[error("{0}")]
    Invalid(String),
}

/// Loads and validates an inventory file: the CLI's loader (inventory plus
/// `templates/` beside it, project resolved as the CLI does).
pub trait InventoryLoader: Send + Sync + 'static {
    /// Loads the inventory at `path`.
    ///
    /// # Errors
    /// [`LoadError`].
    fn load(&self, path: &Path) -> Result<LoadedInventory, LoadError>;
}

impl<F> InventoryLoader for F
where
    F: Fn(&Path) -> Result<LoadedInventory, LoadError> + Send + Sync + 'static,
{
    fn load(&self, path: &Path) -> Result<LoadedInventory, LoadError> {
        self(path)
    }
}

/// What a file looked like: modification time and size, `None` when absent.
type Stamp = Option<(SystemTime, u64)>;

/// The desired state in an inventory file, for one of its hosts.
pub struct LocalInventory<L> {
    path: PathBuf,
    host: String,
    loader: L,
    poll: Duration,
    started: bool,
    /// Files (and the templates directory) watched, with how they looked.
    watched: Vec<(PathBuf, Stamp)>,
    /// SHA-256 over the watched files' content at the last load.
    content: Option<[u8; 32]>,
    /// The last desired state yielded.
    last: Option<Desired>,
}

impl<L: InventoryLoader> LocalInventory<L> {
    /// The inventory at `path` (made absolute), for `host`, looked at every `poll`.
    ///
    /// # Errors
    /// When `path` cannot be made absolute (no current directory).
    pub fn new(
        path: &Path,
        host: impl Into<String>,
        loader: L,
        poll: Duration,
    ) -> std::io::Result<Self> {
        Ok(LocalInventory {
            path: std::path::absolute(path)?,
            host: host.into(),
            loader,
            poll,
            started: false,
            watched: Vec::new(),
            content: None,
            last: None,
        })
    }

    /// The inventory file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn templates_dir(&self) -> PathBuf {
        self.path
            .parent()
            .unwrap_or(Path::new("/"))
            .join("templates")
    }

    fn stamp(p: &Path) -> Stamp {
        std::fs::metadata(p)
            .ok()
            .map(|m| (m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len()))
    }

    /// The paths to watch: the inventory, the templates directory, and what the
    /// last load read.
    fn watch_list(&self, files: &[PathBuf]) -> Vec<PathBuf> {
        let mut list = vec![self.path.clone(), self.templates_dir()];
        for f in files {
            let f = std::path::absolute(f).unwrap_or_else(|_| f.clone());
            if !list.contains(&f) {
                list.push(f);
            }
        }
        list
    }

    /// SHA-256 over the watched paths' names and contents (directories by their
    /// listing).
    fn digest(paths: &[PathBuf]) -> [u8; 32] {
        let mut h = Sha256::new();
        for p in paths {
            h.update(p.as_os_str().as_encoded_bytes());
            h.update([0]);
            if p.is_dir() {
                let mut names: Vec<_> = std::fs::read_dir(p)
                    .map(|d| d.filter_map(|e| e.ok().map(|e| e.file_name())).collect())
                    .unwrap_or_default();
                names.sort();
                for n in names {
                    h.update(n.as_encoded_bytes());
                    h.update([0]);
                }
            } else {
                match std::fs::read(p) {
                    Ok(b) => {
                        h.update((b.len() as u64).to_le_bytes());
                        h.update(&b);
                    }
                    Err(_) => h.update(b"\xffabsent"),
                }
            }
            h.update([1]);
        }
        h.finalize().into()
    }

    /// Looks at the file now (no waiting).
    fn look(&mut self) -> Result<Next, SourceError> {
        let moved = self.watched.is_empty()
            || self
                .watched
                .iter()
                .any(|(p, stamp)| Self::stamp(p) != *stamp);
        if !moved {
            return Ok(Next::Unchanged);
        }
        let paths: Vec<PathBuf> = if self.watched.is_empty() {
            self.watch_list(&[])
        } else {
            self.watched.iter().map(|(p, _)| p.clone()).collect()
        };
        // Stamps first, content second: a write racing with this look moves a stamp
        // again, so the next look reads it.
        let stamps: Vec<Stamp> = paths.iter().map(|p| Self::stamp(p)).collect();
        let content = Self::digest(&paths);
        if self.content == Some(content) {
            self.watched = paths.into_iter().zip(stamps).collect();
            return Ok(Next::Unchanged);
        }
        let loaded = self.loader.load(&self.path);
        // Whatever the outcome, this content has been looked at: an invalid file is
        // reported once, not at every poll.
        self.content = Some(content);
        let loaded = match loaded {
            Ok(l) => l,
            Err(e) => {
                self.watched = paths.into_iter().zip(stamps).collect();
                return Err(match e {
                    LoadError::Unreadable(why) => SourceError::Unreadable {
                        path: self.path.clone(),
                        why,
                    },
                    LoadError::Invalid(why) => SourceError::Invalid {
                        path: self.path.clone(),
                        why,
                    },
                });
            }
        };
        let list = self.watch_list(&loaded.files);
        if list != paths {
            // New templates were read: watch them from now on (their content is
            // covered by the next look's digest).
            self.content = Some(Self::digest(&list));
        }
        self.watched = list.iter().map(|p| (p.clone(), Self::stamp(p))).collect();
        if !loaded.topology.hosts.contains_key(&self.host) {
            return Err(SourceError::UnknownHost {
                path: self.path.clone(),
                host: self.host.clone(),
                known: loaded
                    .topology
                    .hosts
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        let desired = Desired {
            revision: loaded.topology.digest().to_string(),
            index: None,
            snapshot: loaded.topology.snapshot(&self.host),
            base_dir: loaded.base_dir,
        };
        if self.last.as_ref() == Some(&desired) {
            return Ok(Next::Unchanged);
        }
        self.last = Some(desired.clone());
        Ok(Next::Changed(desired))
    }
}

impl<L: InventoryLoader> Source for LocalInventory<L> {
    async fn next(&mut self) -> Result<Next, SourceError> {
        if std::mem::replace(&mut self.started, true) {
            tokio::time::sleep(self.poll).await;
        }
        self.look()
    }

    fn describe(&self) -> String {
        format!("inventory {} (host {})", self.path.display(), self.host)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_model::{validate, Format, SourceFile, Sources};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// A loader for one file without templates, counting its loads.
    fn loader(count: Arc<AtomicUsize>) -> impl InventoryLoader {
        move |path: &Path| {
            count.fetch_add(1, Ordering::SeqCst);
            let bytes = std::fs::read(path).map_err(|e| LoadError::Unreadable(e.to_string()))?;
            let mut sources = Sources::new();
            let name = path.display().to_string();
            let id = sources.add(SourceFile::from_bytes(
                name.clone(),
                Format::from_path(&name),
                bytes,
            ));
            match validate(&sources, id, &[]) {
                Ok(mut v) => {
                    v.topology.set_project("t");
                    Ok(LoadedInventory {
                        topology: v.topology,
                        base_dir: path.parent().unwrap().to_path_buf(),
                        files: vec![path.to_path_buf()],
                    })
                }
                Err(d) => Err(LoadError::Invalid(format!("{} diagnostics", d.len()))),
            }
        }
    }

    fn write(p: &Path, arg: &str) {
        std::fs::write(
            p,
            format!("[components.a]\ncommand = [\"/bin/sleep\", \"{arg}\"]\n"),
        )
        .unwrap();
    }

    #[test]
    fn yields_once_then_only_real_changes_and_keeps_the_last_good_state() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("flotilla.toml");
        write(&p, "100");
        let count = Arc::new(AtomicUsize::new(0));
        let mut src =
            LocalInventory::new(&p, "local", loader(count.clone()), Duration::ZERO).unwrap();
        let Next::Changed(first) = src.look().unwrap() else {
            panic!("the first look yields the desired state")
        };
        assert_eq!(first.snapshot.components.len(), 1);
        assert!(first.revision.starts_with("sha256:"));
        assert_eq!(src.look().unwrap(), Next::Unchanged);
        assert_eq!(count.load(Ordering::SeqCst), 1, "nothing moved: not loaded");

        // Touched, same content: not loaded again.
        let f = std::fs::File::options().write(true).open(&p).unwrap();
        f.set_modified(SystemTime::now() + Duration::from_secs(5))
            .unwrap();
        assert_eq!(src.look().unwrap(), Next::Unchanged);
        assert_eq!(count.load(Ordering::SeqCst), 1);

        // An invalid edit: reported once, then quiet until the file changes.
        std::fs::write(&p, "[components.a]\ncommand = 3\n").unwrap();
        assert!(matches!(src.look(), Err(SourceError::Invalid { .. })));
        assert_eq!(src.look().unwrap(), Next::Unchanged);

        // Fixed with a new argument: a new revision.
        write(&p, "200");
        let Next::Changed(second) = src.look().unwrap() else {
            panic!("a real change yields")
        };
        assert_ne!(second.revision, first.revision);
        assert_eq!(second.snapshot.components[0].command[1], "200");

        // Back to the first content after an invalid one: the same revision as
        // before the edit is still a change from the last one yielded.
        write(&p, "100");
        let Next::Changed(third) = src.look().unwrap() else {
            panic!()
        };
        assert_eq!(third.revision, first.revision);
    }

    #[test]
    fn an_unknown_host_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("flotilla.toml");
        write(&p, "1");
        let mut src = LocalInventory::new(
            &p,
            "studio",
            loader(Arc::new(AtomicUsize::new(0))),
            Duration::ZERO,
        )
        .unwrap();
        let e = src.look().unwrap_err();
        assert!(e.needs_a_fix());
        assert!(
            e.to_string().contains("no host `studio` (hosts: local)"),
            "{e}"
        );
    }
}

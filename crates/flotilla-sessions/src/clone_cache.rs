//! The clone cache: per repository one bare mirror on the authority
//! host, and per session a tree that borrows the mirror's objects.
//!
//! Layout under the cache's root:
//!
//! - `<repo>.git`: a bare mirror (`git clone --mirror`), with
//!   `extensions.preciousObjects` set (so no `git gc`/`repack`/`prune` deletes an
//!   object: `core.repositoryformatversion` is 1 for that), `gc.auto=0`, and fetches
//!   that never prune (`fetch.prune=false`, `fetch.pruneTags=false`,
//!   `--no-prune`). Its fetch refspec excludes `refs/flotilla/*`
//!   (`^refs/flotilla/*`, git ≥ 2.29), so the upstream can never move a pin.
//! - `<repo>.lock`: the lock file. Creating and fetching the mirror and writing its
//!   refs happen under an exclusive `flock(2)` on it, across threads and processes.
//! - `refs/flotilla/sessions/<session id>` in the mirror: the pin of a session's base
//!   commit, so the objects its tree borrows stay reachable in the mirror.
//!
//! A session tree is `git clone --shared --no-checkout <mirror> <dest>`: its
//! `.git/objects/info/alternates` names the mirror's object directory and it has no
//! objects of its own until the agent commits. (For a local source `--shared` is what
//! `--reference <mirror>` amounts to without going through a transport: `--reference`
//! with a local path still hard-links every object, `--dissociate` would copy them.)
//! Its `origin` is then set to the upstream URL, so the agent fetches from and pushes
//! to the real repository.
//!
//! The base is checked out as a normal clone would have it: a branch name (or no base:
//! the mirror's `HEAD` branch) becomes that local branch, at the resolved commit, with
//! `origin/<branch>` as upstream; a tag or a commit is checked out detached. No
//! Flotilla branch is made: the agent makes its own branches.
//!
//! All git work shells out to the `git` program (git ≥ 2.29), with
//! `GIT_TERMINAL_PROMPT=0` (never waits on a credentials prompt) and `LC_ALL=C`.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nix::fcntl::{Flock, FlockArg};

/// The ref namespace of the pins in a mirror.
pub const PIN_PREFIX: &str = "refs/flotilla/sessions/";

/// The ref namespace, in a mirror, of the commits sessions asked to push (one ref
/// per session: its latest request).
pub const PUSH_PREFIX: &str = "refs/flotilla/push/";

/// What a session asks to push, taken into its repository's mirror by
/// [`CloneCache::take_commits`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushCandidate {
    /// The full commit id to push.
    pub commit: String,
    /// The commits from the session's base to it, newest first, `<short id>
    /// <subject>` each (at most [`PUSH_LOG_MAX`]).
    pub log: Vec<String>,
    /// `git diff --stat` from the base to it (at most [`PUSH_LOG_MAX`] files).
    pub diffstat: String,
}

/// The most commits and files a [`PushCandidate`] lists.
pub const PUSH_LOG_MAX: usize = 50;

/// Checks a ref name the way `git check-ref-format` would for a branch: ASCII
/// letters, digits and `._/-`, no `..`, `//`, `@{`, no component starting with `.`
/// or `-`, not ending with `/`, `.` or `.lock`, at most 200 bytes.
///
/// # Errors
/// What is wrong, as a sentence.
pub fn check_ref_name(name: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("`{name}` is not a branch name: {why}"));
    if name.is_empty() || name.len() > 200 {
        return bad("empty or longer than 200 bytes");
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "._/-".contains(*c)))
    {
        return bad(&format!("`{c}` is not allowed"));
    }
    if name.contains("..") || name.contains("//") {
        return bad("`..` and `//` are not allowed");
    }
    if name.ends_with('/') || name.ends_with('.') || name.ends_with(".lock") {
        return bad("it must not end with `/`, `.` or `.lock`");
    }
    if name
        .split('/')
        .any(|c| c.starts_with('.') || c.starts_with('-'))
    {
        return bad("no part may start with `.` or `-`");
    }
    Ok(())
}

/// Environment variables that would point git at another repository than the one
/// named on its command line.
const GIT_LOCATION_ENV: [&str; 8] = [
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_CEILING_DIRECTORIES",
];

/// The clone cache rooted at one directory (created on first use).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloneCache {
    root: PathBuf,
}

/// A session's tree, made by [`CloneCache::session_tree`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionTree {
    /// The tree's directory (its `.git` is inside).
    pub path: PathBuf,
    /// The full commit id checked out, and pinned in the mirror.
    pub base_commit: String,
    /// The local branch checked out, or `None` for a detached `HEAD` (the base was a
    /// tag or a commit).
    pub branch: Option<String>,
}

/// A clone cache failure.
#[derive(Debug, thiserror::Error)]
pub enum CloneError {
    /// A repository name outside `[A-Za-z0-9][A-Za-z0-9._-]{0,99}` (or with `..`, or
    /// ending in `.` or `.lock`).
    #[error("invalid repository name {name:?}: {reason}")]
    InvalidRepo {
        /// The name given.
        name: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A session id outside `[A-Za-z0-9][A-Za-z0-9._-]{0,127}` (or with `..`, or
    /// ending in `.` or `.lock`).
    #[error("invalid session id {id:?}: {reason}")]
    InvalidSessionId {
        /// The id given.
        id: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A base that is empty, starts with `-` or holds spaces or control characters.
    #[error("invalid base {base:?}: {reason}")]
    InvalidBase {
        /// The base given.
        base: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A URL that is empty or starts with `-`.
    #[error("invalid repository URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL given.
        url: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// The base names no commit in the mirror.
    #[error("base {base:?} is not a commit, branch or tag of repository {repo:?}: {stderr}")]
    UnknownBase {
        /// The repository.
        repo: String,
        /// The base given.
        base: String,
        /// What `git rev-parse` said.
        stderr: String,
    },
    /// The mirror's `HEAD` names no commit (an empty repository) and no base was given.
    #[error("repository {repo:?} has no commits (its HEAD is unborn): give a base")]
    EmptyRepository {
        /// The repository.
        repo: String,
    },
    /// The mirror exists and fetches another URL.
    #[error("the mirror of {repo:?} fetches {configured:?}, not {given:?}")]
    UrlMismatch {
        /// The repository.
        repo: String,
        /// The URL the mirror fetches.
        configured: String,
        /// The URL given.
        given: String,
    },
    /// The destination exists and is not an empty directory.
    #[error("destination {path} exists and is not an empty directory")]
    DestExists {
        /// The destination.
        path: PathBuf,
    },
    /// `remove_session` was given a directory that is not a tree borrowing from the
    /// repository's mirror; nothing was deleted.
    #[error("{path} is not a session tree of the mirror {mirror}: not deleted")]
    NotASessionTree {
        /// The directory.
        path: PathBuf,
        /// The mirror.
        mirror: PathBuf,
    },
    /// A git command exited unsuccessfully.
    #[error("`{command}` failed ({}): {stderr}", describe(*status))]
    Git {
        /// The command line.
        command: String,
        /// Its exit code; `None` when a signal ended it.
        status: Option<i32>,
        /// Its stderr, trimmed.
        stderr: String,
    },
    /// A git command could not be started (`git` not installed…).
    #[error("could not run `{command}`: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// Why.
        source: io::Error,
    },
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

fn describe(status: Option<i32>) -> String {
    match status {
        Some(c) => format!("exit status {c}"),
        None => "killed by a signal".into(),
    }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> CloneError + '_ {
    move |source| CloneError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Checks a name that becomes a path component or a ref component.
fn check_name(s: &str, max: usize) -> Result<(), &'static str> {
    let mut chars = s.chars();
    match chars.next() {
        None => return Err("it is empty"),
        Some(c) if !c.is_ascii_alphanumeric() => {
            return Err("it must start with a letter or digit")
        }
        _ => {}
    }
    if s.len() > max {
        return Err("it is too long");
    }
    if !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')) {
        return Err("only letters, digits, '.', '_' and '-' are allowed");
    }
    if s.contains("..") || s.ends_with('.') || s.ends_with(".lock") {
        return Err("it must not contain '..' or end in '.' or '.lock'");
    }
    Ok(())
}

fn check_repo(name: &str) -> Result<(), CloneError> {
    check_name(name, 100).map_err(|reason| CloneError::InvalidRepo {
        name: name.to_string(),
        reason,
    })
}

fn check_session_id(id: &str) -> Result<(), CloneError> {
    check_name(id, 128).map_err(|reason| CloneError::InvalidSessionId {
        id: id.to_string(),
        reason,
    })
}

fn check_base(base: &str) -> Result<(), CloneError> {
    let bad = |reason| {
        Err(CloneError::InvalidBase {
            base: base.to_string(),
            reason,
        })
    };
    if base.is_empty() {
        return bad("it is empty");
    }
    if base.starts_with('-') {
        return bad("it must not start with '-'");
    }
    if base.len() > 256 || base.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return bad("it must be a commit, branch or tag name without spaces");
    }
    Ok(())
}

fn check_url(url: &str) -> Result<(), CloneError> {
    let reason = if url.is_empty() {
        "it is empty"
    } else if url.starts_with('-') {
        "it must not start with '-'"
    } else {
        return Ok(());
    };
    Err(CloneError::InvalidUrl {
        url: url.to_string(),
        reason,
    })
}

/// Runs `git [-C dir] args…`; its stdout, trimmed, on success.
fn git<S: AsRef<OsStr>>(dir: Option<&Path>, args: &[S]) -> Result<String, CloneError> {
    git_env(dir, args, &[])
}

/// [`git`] with more environment variables.
fn git_env<S: AsRef<OsStr>>(
    dir: Option<&Path>,
    args: &[S],
    env: &[(&str, &OsStr)],
) -> Result<String, CloneError> {
    let mut cmd = Command::new("git");
    cmd.envs(env.iter().map(|(k, v)| (*k, *v)));
    let mut line: Vec<OsString> = vec!["git".into()];
    if let Some(d) = dir {
        cmd.arg("-C").arg(d);
        line.extend(["-C".into(), d.as_os_str().to_owned()]);
    }
    for a in args {
        cmd.arg(a);
        line.push(a.as_ref().to_owned());
    }
    for v in GIT_LOCATION_ENV {
        cmd.env_remove(v);
    }
    cmd.env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C")
        .stdin(Stdio::null());
    let command = line
        .iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    let out = cmd.output().map_err(|source| CloneError::Spawn {
        command: command.clone(),
        source,
    })?;
    if !out.status.success() {
        return Err(CloneError::Git {
            command,
            status: out.status.code(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// [`git`] for a mirror's clone or fetch, trusting the repository it reads even
/// when another user owns it (git's `safe.directory`, which must come from a
/// global configuration: git drops `-c` and `GIT_CONFIG_*` before it runs
/// `upload-pack` on a local path). The file is `<root>/gitconfig`, written here;
/// nothing else of a user's configuration is read.
fn git_trusting<S: AsRef<OsStr>>(
    root: &Path,
    dir: Option<&Path>,
    args: &[S],
) -> Result<String, CloneError> {
    let config = root.join("gitconfig");
    let want = "[safe]\n\tdirectory = *\n";
    if fs::read_to_string(&config).ok().as_deref() != Some(want) {
        fs::create_dir_all(root).map_err(io_err(root))?;
        let tmp = root.join("gitconfig.tmp");
        fs::write(&tmp, want).map_err(io_err(&tmp))?;
        fs::rename(&tmp, &config).map_err(io_err(&config))?;
    }
    git_env(dir, args, &[("GIT_CONFIG_GLOBAL", config.as_os_str())])
}

/// An exclusive `flock` held until dropped.
struct Locked {
    _lock: Flock<File>,
}

impl CloneCache {
    /// A cache rooted at `root` (made absolute against the current directory; created
    /// on first use).
    pub fn new(root: impl Into<PathBuf>) -> CloneCache {
        let root = root.into();
        let root = std::path::absolute(&root).unwrap_or(root);
        CloneCache { root }
    }

    /// The cache's root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the mirror of `repo` is (`<root>/<repo>.git`), whether or not it exists.
    pub fn mirror_path(&self, repo: &str) -> Result<PathBuf, CloneError> {
        check_repo(repo)?;
        Ok(self.root.join(format!("{repo}.git")))
    }

    /// Makes the mirror of `repo` from `url` the first time, fetches it (never
    /// pruning) every other time, under the repository's lock; its path.
    ///
    /// Errors: invalid name or URL; [`CloneError::UrlMismatch`] when the mirror
    /// fetches another URL; [`CloneError::Git`] when cloning or fetching fails.
    pub fn mirror(&self, repo: &str, url: &str) -> Result<PathBuf, CloneError> {
        check_repo(repo)?;
        check_url(url)?;
        let _lock = self.lock(repo)?;
        self.update_mirror(repo, url)
    }

    /// Makes the tree of session `session_id` at `dest` (absent, or an empty
    /// directory): fetches the mirror, resolves `base` (a commit, branch or tag of
    /// the mirror; `None`: the mirror's `HEAD`) to a commit, pins it as
    /// `refs/flotilla/sessions/<session_id>` in the mirror, clones the mirror with
    /// its objects borrowed through `objects/info/alternates`, points `origin` at
    /// `url` and checks the base out (see the module docs). On failure after the pin,
    /// the pin and whatever was made at `dest` are removed.
    ///
    /// Errors: invalid name, id, base or URL; [`CloneError::DestExists`];
    /// [`CloneError::UnknownBase`]; [`CloneError::EmptyRepository`];
    /// [`CloneError::UrlMismatch`]; [`CloneError::Git`] naming the git command that
    /// failed.
    pub fn session_tree(
        &self,
        repo: &str,
        url: &str,
        session_id: &str,
        dest: &Path,
        base: Option<&str>,
    ) -> Result<SessionTree, CloneError> {
        check_repo(repo)?;
        check_url(url)?;
        check_session_id(session_id)?;
        if let Some(b) = base {
            check_base(b)?;
        }
        let dest_existed = match fs::read_dir(dest) {
            Ok(mut entries) => {
                if entries.next().is_some() {
                    return Err(CloneError::DestExists {
                        path: dest.to_path_buf(),
                    });
                }
                true
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(_) => {
                return Err(CloneError::DestExists {
                    path: dest.to_path_buf(),
                })
            }
        };
        let pin = format!("{PIN_PREFIX}{session_id}");
        let (mirror, commit, branch) = {
            let _lock = self.lock(repo)?;
            let mirror = self.update_mirror(repo, url)?;
            let (commit, branch) = resolve(&mirror, repo, base)?;
            git(Some(&mirror), &["update-ref", &pin, &commit])?;
            (mirror, commit, branch)
        };
        let made = make_tree(&mirror, url, dest, &commit, branch.as_deref());
        if let Err(e) = made {
            if dest_existed {
                if let Ok(entries) = fs::read_dir(dest) {
                    for entry in entries.flatten() {
                        let p = entry.path();
                        let _ = if p.is_dir() {
                            fs::remove_dir_all(&p)
                        } else {
                            fs::remove_file(&p)
                        };
                    }
                }
            } else {
                let _ = fs::remove_dir_all(dest);
            }
            if let Ok(_lock) = self.lock(repo) {
                let _ = git(Some(&mirror), &["update-ref", "-d", &pin]);
            }
            return Err(e);
        }
        Ok(SessionTree {
            path: dest.to_path_buf(),
            base_commit: commit,
            branch,
        })
    }

    /// Pins session `session_id`'s base in the mirror of `repo` (made or fetched
    /// from `url` first) without making a tree here: for a runtime whose tree is
    /// made elsewhere from [`CloneCache::session_bundle`] (a pod's init
    /// container). The commit pinned and the branch to check out (`None`: a
    /// detached `HEAD`).
    ///
    /// Errors: as [`CloneCache::session_tree`].
    pub fn pin_session(
        &self,
        repo: &str,
        url: &str,
        session_id: &str,
        base: Option<&str>,
    ) -> Result<(String, Option<String>), CloneError> {
        check_repo(repo)?;
        check_url(url)?;
        check_session_id(session_id)?;
        if let Some(b) = base {
            check_base(b)?;
        }
        let pin = format!("{PIN_PREFIX}{session_id}");
        let _lock = self.lock(repo)?;
        let mirror = self.update_mirror(repo, url)?;
        let (commit, branch) = resolve(&mirror, repo, base)?;
        git(Some(&mirror), &["update-ref", &pin, &commit])?;
        Ok((commit, branch))
    }

    /// Writes to `out` a git bundle (`git bundle create`,
    /// <https://git-scm.com/docs/git-bundle>) of session `session_id`'s pinned base
    /// in the mirror of `repo`: its one ref is `refs/flotilla/sessions/<id>`, with
    /// the whole history behind it.
    ///
    /// Errors: invalid name or id; [`CloneError::Git`] when the mirror or the pin
    /// is missing or the bundle cannot be written.
    pub fn session_bundle(
        &self,
        repo: &str,
        session_id: &str,
        out: &Path,
    ) -> Result<(), CloneError> {
        check_repo(repo)?;
        check_session_id(session_id)?;
        let mirror = self.mirror_path(repo)?;
        let pin = format!("{PIN_PREFIX}{session_id}");
        git(
            Some(&mirror),
            &[
                OsStr::new("bundle"),
                OsStr::new("create"),
                OsStr::new("--quiet"),
                out.as_os_str(),
                OsStr::new(&pin),
            ],
        )?;
        Ok(())
    }

    /// Deletes session `session_id`'s tree at `dest` (if it is there) and its pin in
    /// the mirror of `repo` (if there). Idempotent.
    ///
    /// Errors: invalid name or id; [`CloneError::NotASessionTree`] when `dest`
    /// exists but does not borrow from the repository's mirror (nothing is deleted
    /// then); [`CloneError::Io`]; [`CloneError::Git`].
    pub fn remove_session(
        &self,
        repo: &str,
        session_id: &str,
        dest: &Path,
    ) -> Result<(), CloneError> {
        check_repo(repo)?;
        check_session_id(session_id)?;
        let mirror = self.mirror_path(repo)?;
        if fs::symlink_metadata(dest).is_ok() {
            if !borrows_from(dest, &mirror) {
                return Err(CloneError::NotASessionTree {
                    path: dest.to_path_buf(),
                    mirror,
                });
            }
            fs::remove_dir_all(dest).map_err(io_err(dest))?;
        }
        if mirror.join("HEAD").exists() {
            let _lock = self.lock(repo)?;
            git(
                Some(&mirror),
                &["update-ref", "-d", &format!("{PIN_PREFIX}{session_id}")],
            )?;
        }
        Ok(())
    }

    /// Takes the commit `src` (a branch of the session's tree, or `HEAD`) from the
    /// session's `tree` into the mirror of `repo`, under
    /// `refs/flotilla/push/<session_id>`, and describes it against `base`.
    ///
    /// The tree is the agent's: nothing of it runs as root. The fetch's far side
    /// (`git upload-pack`, which reads the tree) is `upload_pack`, a command that
    /// runs it as the tree's owner (the authority's launcher); git is run with no
    /// system or global configuration and no home, and only receives a pack into
    /// the mirror (checked as any fetched pack). `tree/.git` must be a directory
    /// (not a `gitdir:` file or a link pointing elsewhere).
    ///
    /// # Errors
    /// Invalid names; [`CloneError::NotASessionTree`] when `tree/.git` is not a
    /// directory; [`CloneError::Git`] when `src` names no commit there, or a git
    /// command fails.
    pub fn take_commits(
        &self,
        repo: &str,
        session_id: &str,
        tree: &Path,
        src: &str,
        base: &str,
        upload_pack: &str,
    ) -> Result<PushCandidate, CloneError> {
        check_repo(repo)?;
        check_session_id(session_id)?;
        check_base(base)?;
        if src != "HEAD" {
            check_ref_name(src).map_err(|_| CloneError::InvalidBase {
                base: src.to_string(),
                reason: "it must be HEAD or a branch name",
            })?;
        }
        let mirror = self.mirror_path(repo)?;
        let gitdir = tree.join(".git");
        // Checked here when this process may look (the tree is its owner's: the
        // `upload_pack` command, run as that owner, checks it too).
        let is_dir = match fs::symlink_metadata(&gitdir) {
            Ok(m) => m.is_dir(),
            Err(e) => e.kind() == io::ErrorKind::PermissionDenied,
        };
        if !is_dir {
            return Err(CloneError::NotASessionTree {
                path: tree.to_path_buf(),
                mirror,
            });
        }
        let dst = format!("{PUSH_PREFIX}{session_id}");
        let _lock = self.lock(repo)?;
        let upload_pack = format!("--upload-pack={upload_pack}");
        let refspec = format!("+{src}:{dst}");
        git_env(
            Some(&mirror),
            &[
                OsStr::new("-c"),
                OsStr::new("protocol.file.allow=always"),
                OsStr::new("fetch"),
                OsStr::new("--quiet"),
                OsStr::new("--no-tags"),
                OsStr::new("--no-write-fetch-head"),
                OsStr::new("--no-recurse-submodules"),
                OsStr::new(&upload_pack),
                gitdir.as_os_str(),
                OsStr::new(&refspec),
            ],
            &[
                ("HOME", OsStr::new("/nonexistent")),
                ("GIT_CONFIG_NOSYSTEM", OsStr::new("1")),
                ("GIT_CONFIG_GLOBAL", OsStr::new("/dev/null")),
            ],
        )?;
        let commit = git(
            Some(&mirror),
            &["rev-parse", "--verify", &format!("{dst}^{{commit}}")],
        )?;
        let range = format!("{base}..{commit}");
        let max = format!("--max-count={PUSH_LOG_MAX}");
        let log = git(
            Some(&mirror),
            &["log", "--no-decorate", "--format=%h %s", &max, &range, "--"],
        )?;
        let diffstat = git(
            Some(&mirror),
            &[
                "diff",
                "--no-ext-diff",
                "--no-textconv",
                &format!("--stat=120,100,{PUSH_LOG_MAX}"),
                base,
                &commit,
                "--",
            ],
        )?;
        Ok(PushCandidate {
            commit,
            log: log.lines().map(str::to_string).collect(),
            diffstat,
        })
    }

    /// Pushes `commit` (already in the mirror of `repo`, see
    /// [`CloneCache::take_commits`]) to `refs/heads/<branch>` of `url`, from the
    /// mirror (never from a session's tree), without force: a push that is not a
    /// fast-forward is refused by git. Returns git's porcelain summary line.
    ///
    /// # Errors
    /// Invalid names; [`CloneError::Git`] when the push is refused or fails.
    pub fn push(
        &self,
        repo: &str,
        url: &str,
        commit: &str,
        branch: &str,
    ) -> Result<String, CloneError> {
        check_repo(repo)?;
        check_url(url)?;
        check_base(commit)?;
        check_ref_name(branch).map_err(|_| CloneError::InvalidBase {
            base: branch.to_string(),
            reason: "it must be a branch name",
        })?;
        let mirror = self.mirror_path(repo)?;
        let _lock = self.lock(repo)?;
        git(
            Some(&mirror),
            &[
                "push",
                "--porcelain",
                "--no-verify",
                url,
                &format!("{commit}:refs/heads/{branch}"),
            ],
        )
    }

    /// The pins in the mirror of `repo`: session id → pinned commit (empty when there
    /// is no mirror).
    pub fn pins(&self, repo: &str) -> Result<BTreeMap<String, String>, CloneError> {
        let mirror = self.mirror_path(repo)?;
        if !mirror.join("HEAD").exists() {
            return Ok(BTreeMap::new());
        }
        let out = git(
            Some(&mirror),
            &[
                "for-each-ref",
                "--format=%(objectname) %(refname)",
                PIN_PREFIX,
            ],
        )?;
        Ok(out
            .lines()
            .filter_map(|l| {
                let (commit, name) = l.split_once(' ')?;
                Some((
                    name.strip_prefix(PIN_PREFIX)?.to_string(),
                    commit.to_string(),
                ))
            })
            .collect())
    }

    /// Takes the exclusive lock of `repo` (blocking), creating the root and the lock
    /// file as needed.
    fn lock(&self, repo: &str) -> Result<Locked, CloneError> {
        fs::create_dir_all(&self.root).map_err(io_err(&self.root))?;
        let path = self.root.join(format!("{repo}.lock"));
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io_err(&path))?;
        loop {
            match Flock::lock(file, FlockArg::LockExclusive) {
                Ok(lock) => return Ok(Locked { _lock: lock }),
                Err((f, nix::errno::Errno::EINTR)) => file = f,
                Err((_, errno)) => {
                    return Err(CloneError::Io {
                        path,
                        source: io::Error::from(errno),
                    })
                }
            }
        }
    }

    /// Creates or fetches the mirror; the caller holds the lock.
    fn update_mirror(&self, repo: &str, url: &str) -> Result<PathBuf, CloneError> {
        let mirror = self.mirror_path(repo)?;
        if mirror.join("HEAD").exists() {
            let configured = git(Some(&mirror), &["config", "--get", "remote.origin.url"])?;
            if configured != url {
                return Err(CloneError::UrlMismatch {
                    repo: repo.to_string(),
                    configured,
                    given: url.to_string(),
                });
            }
            // The repository may belong to another user (git's safe.directory):
            // only `upload-pack` runs in it, which git makes safe for that.
            git_trusting(
                &self.root,
                Some(&mirror),
                &[
                    "fetch",
                    "--quiet",
                    "--no-prune",
                    "--no-prune-tags",
                    "origin",
                ],
            )?;
            return Ok(mirror);
        }
        // Cloned aside and renamed into place, so a failed clone leaves no mirror.
        let partial = self.root.join(format!("{repo}.git.partial"));
        if fs::symlink_metadata(&partial).is_ok() {
            fs::remove_dir_all(&partial).map_err(io_err(&partial))?;
        }
        let made = (|| {
            git_trusting(
                &self.root,
                None,
                &[
                    OsStr::new("clone"),
                    OsStr::new("--quiet"),
                    OsStr::new("--mirror"),
                    OsStr::new("--"),
                    OsStr::new(url),
                    partial.as_os_str(),
                ],
            )?;
            for (key, value) in [
                ("core.repositoryformatversion", "1"),
                ("extensions.preciousObjects", "true"),
                ("gc.auto", "0"),
                ("fetch.prune", "false"),
                ("fetch.pruneTags", "false"),
            ] {
                git(Some(&partial), &["config", key, value])?;
            }
            git(
                Some(&partial),
                &["config", "--add", "remote.origin.fetch", "^refs/flotilla/*"],
            )?;
            fs::rename(&partial, &mirror).map_err(io_err(&mirror))
        })();
        if made.is_err() {
            let _ = fs::remove_dir_all(&partial);
        }
        made.map(|()| mirror)
    }

    /// Deletes the refs of session `session_id` in the mirror of `repo`, under the
    /// repository's lock: its pin (`refs/flotilla/sessions/<id>`) and its latest
    /// push request (`refs/flotilla/push/<id>`). Returns the refs that were there
    /// (now gone). Idempotent; `Ok(vec![])` when there is no mirror. The objects
    /// stay (the mirror never prunes); they go with the mirror
    /// ([`CloneCache::remove_mirror`]).
    ///
    /// Errors: invalid name or id; [`CloneError::Git`].
    pub fn drop_session_refs(
        &self,
        repo: &str,
        session_id: &str,
    ) -> Result<Vec<String>, CloneError> {
        check_session_id(session_id)?;
        let mirror = self.mirror_path(repo)?;
        if !mirror.join("HEAD").exists() {
            return Ok(Vec::new());
        }
        let _lock = self.lock(repo)?;
        let mut dropped = Vec::new();
        for prefix in [PIN_PREFIX, PUSH_PREFIX] {
            let name = format!("{prefix}{session_id}");
            let found = git(
                Some(&mirror),
                &["for-each-ref", "--format=%(refname)", &name],
            )?;
            if found.lines().any(|l| l == name) {
                git(Some(&mirror), &["update-ref", "-d", &name])?;
                dropped.push(name);
            }
        }
        Ok(dropped)
    }

    /// When the mirror of `repo` was last used: the newest modification time of
    /// its directory, `HEAD`, `FETCH_HEAD`, `packed-refs` and ref directories (a
    /// fetch, a pin made or dropped). `None` when there is no mirror.
    pub fn mirror_last_used(
        &self,
        repo: &str,
    ) -> Result<Option<std::time::SystemTime>, CloneError> {
        let mirror = self.mirror_path(repo)?;
        if !mirror.join("HEAD").exists() {
            return Ok(None);
        }
        let newest = [
            "",
            "HEAD",
            "FETCH_HEAD",
            "packed-refs",
            "refs",
            "refs/flotilla",
            "refs/flotilla/sessions",
            "refs/flotilla/push",
        ]
        .iter()
        .filter_map(|p| {
            let path = if p.is_empty() {
                mirror.clone()
            } else {
                mirror.join(p)
            };
            fs::symlink_metadata(path).and_then(|m| m.modified()).ok()
        })
        .max();
        Ok(newest)
    }

    /// Removes the mirror of `repo` if no session pins a commit in it and it was
    /// last used ([`CloneCache::mirror_last_used`]) before `unused_since`, all
    /// decided under the repository's lock (a session's tree is made under it, from
    /// the mirror's fetch to its pin, so no tree can start borrowing meanwhile).
    /// Returns the removed directory, or `None` when it was kept (pinned, used
    /// since, or no mirror). The lock file `<repo>.lock` stays: deleting a lock
    /// file that others may hold or wait on would let two of them in at once. The
    /// directory is removed without following symbolic links.
    ///
    /// Errors: invalid name; [`CloneError::Git`] listing the pins;
    /// [`CloneError::Io`] when it cannot be removed (whatever remains is the
    /// caller's to measure).
    pub fn remove_mirror(
        &self,
        repo: &str,
        unused_since: std::time::SystemTime,
    ) -> Result<Option<PathBuf>, CloneError> {
        let mirror = self.mirror_path(repo)?;
        if !mirror.join("HEAD").exists() {
            return Ok(None);
        }
        let _lock = self.lock(repo)?;
        if !self.pins(repo)?.is_empty() {
            return Ok(None);
        }
        match self.mirror_last_used(repo)? {
            Some(t) if t < unused_since => {}
            _ => return Ok(None),
        }
        fs::remove_dir_all(&mirror).map_err(io_err(&mirror))?;
        Ok(Some(mirror))
    }
}

/// Resolves `base` in the mirror: the commit and, when it names a branch, the branch.
fn resolve(
    mirror: &Path,
    repo: &str,
    base: Option<&str>,
) -> Result<(String, Option<String>), CloneError> {
    let commit_of = |rev: &str, shown: &str| {
        git(
            Some(mirror),
            &[
                "rev-parse",
                "--verify",
                "--end-of-options",
                &format!("{rev}^{{commit}}"),
            ],
        )
        .map_err(|e| match e {
            CloneError::Git { stderr, .. } => CloneError::UnknownBase {
                repo: repo.to_string(),
                base: shown.to_string(),
                stderr,
            },
            e => e,
        })
    };
    let Some(base) = base else {
        let head = git(Some(mirror), &["symbolic-ref", "--quiet", "HEAD"]).ok();
        let commit = commit_of("HEAD", "HEAD").map_err(|e| match e {
            CloneError::UnknownBase { .. } => CloneError::EmptyRepository {
                repo: repo.to_string(),
            },
            e => e,
        })?;
        let branch = head.and_then(|h| h.strip_prefix("refs/heads/").map(str::to_string));
        return Ok((commit, branch));
    };
    // A branch wins over a tag of the same name (rev-parse alone prefers the tag).
    let name = base.strip_prefix("refs/heads/").unwrap_or(base);
    let full = format!("refs/heads/{name}");
    let is_branch = git(
        Some(mirror),
        &["show-ref", "--verify", "--quiet", "--", &full],
    )
    .is_ok();
    if is_branch {
        return Ok((commit_of(&full, base)?, Some(name.to_string())));
    }
    Ok((commit_of(base, base)?, None))
}

/// Clones the mirror at `dest` borrowing its objects and checks `commit` out.
fn make_tree(
    mirror: &Path,
    url: &str,
    dest: &Path,
    commit: &str,
    branch: Option<&str>,
) -> Result<(), CloneError> {
    git(
        None,
        &[
            OsStr::new("clone"),
            OsStr::new("--quiet"),
            OsStr::new("--shared"),
            OsStr::new("--no-checkout"),
            OsStr::new("--"),
            mirror.as_os_str(),
            dest.as_os_str(),
        ],
    )?;
    git(Some(dest), &["remote", "set-url", "origin", url])?;
    check_out(dest, commit, branch)
}

/// Checks `commit` out in the tree at `dest`: on `branch`, tracking
/// `origin/<branch>`, or detached.
fn check_out(dest: &Path, commit: &str, branch: Option<&str>) -> Result<(), CloneError> {
    match branch {
        Some(b) => {
            git(Some(dest), &["checkout", "--quiet", "-B", b, commit])?;
            git(
                Some(dest),
                &[
                    "branch",
                    "--quiet",
                    &format!("--set-upstream-to=origin/{b}"),
                    b,
                ],
            )?;
        }
        None => {
            git(Some(dest), &["checkout", "--quiet", "--detach", commit])?;
        }
    }
    Ok(())
}

/// Makes session `session_id`'s tree at `dest` (absent or empty) from `bundle` (a
/// [`CloneCache::session_bundle`]), as [`CloneCache::session_tree`] makes it from
/// the mirror: `origin` is `url`, `commit` is checked out on `branch` (tracking
/// `origin/<branch>`) or detached. Where no mirror is at hand: in a pod's init
/// container. On failure, what was made at `dest` is left for the next try to
/// refuse (`dest` is not empty).
///
/// Errors: invalid id; [`CloneError::DestExists`]; [`CloneError::Git`].
pub fn tree_from_bundle(
    bundle: &Path,
    dest: &Path,
    session_id: &str,
    url: &str,
    commit: &str,
    branch: Option<&str>,
) -> Result<(), CloneError> {
    check_session_id(session_id)?;
    if fs::read_dir(dest).is_ok_and(|mut d| d.next().is_some()) {
        return Err(CloneError::DestExists {
            path: dest.to_path_buf(),
        });
    }
    let pin = format!("{PIN_PREFIX}{session_id}");
    git(
        None,
        &[OsStr::new("init"), OsStr::new("--quiet"), dest.as_os_str()],
    )?;
    let tracking = match branch {
        Some(b) => format!("refs/remotes/origin/{b}"),
        None => pin.clone(),
    };
    git(
        Some(dest),
        &[
            OsStr::new("fetch"),
            OsStr::new("--quiet"),
            bundle.as_os_str(),
            OsStr::new(&format!("{pin}:{tracking}")),
        ],
    )?;
    git(Some(dest), &["remote", "add", "origin", url])?;
    check_out(dest, commit, branch)
}

/// Whether the repository at `dest` borrows objects from `mirror`.
fn borrows_from(dest: &Path, mirror: &Path) -> bool {
    // The agent made everything in its tree: only a regular file reached through
    // real directories is read (a FIFO would wait forever, a link read elsewhere).
    let git = dest.join(".git");
    let plain = [git.clone(), git.join("objects"), git.join("objects/info")]
        .iter()
        .all(|d| fs::symlink_metadata(d).is_ok_and(|m| m.file_type().is_dir()))
        && fs::symlink_metadata(git.join("objects/info/alternates"))
            .is_ok_and(|m| m.file_type().is_file());
    if !plain {
        return false;
    }
    let Ok(alternates) = fs::read_to_string(dest.join(".git/objects/info/alternates")) else {
        return false;
    };
    let Ok(want) = mirror.join("objects").canonicalize() else {
        return false;
    };
    alternates
        .lines()
        .any(|l| Path::new(l.trim()).canonicalize().is_ok_and(|p| p == want))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    /// Runs git in `dir` (test fixtures), panicking on failure.
    fn g(dir: &Path, args: &[&str]) -> String {
        git(Some(dir), args).unwrap_or_else(|e| panic!("{e}"))
    }

    fn commit(dir: &Path, file: &str, content: &str) -> String {
        fs::write(dir.join(file), content).unwrap();
        g(dir, &["add", "--", file]);
        g(
            dir,
            &[
                "-c",
                "user.name=Test",
                "-c",
                "user.email=test@example.invalid",
                "commit",
                "--quiet",
                "-m",
                &format!("{file}: {content}"),
            ],
        );
        g(dir, &["rev-parse", "HEAD"])
    }

    /// An upstream with history on `main`, a tag `v1` and a branch `feature`.
    struct Upstream {
        _tmp: tempfile::TempDir,
        dir: PathBuf,
        url: String,
        first: String,
        v1: String,
    }

    fn upstream() -> Upstream {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("upstream");
        fs::create_dir(&dir).unwrap();
        g(&dir, &["init", "--quiet", "-b", "main"]);
        let first = commit(&dir, "README", "one");
        let v1 = commit(&dir, "README", "two");
        g(&dir, &["tag", "v1"]);
        g(&dir, &["checkout", "--quiet", "-b", "feature"]);
        commit(&dir, "feature.txt", "feature work");
        g(&dir, &["checkout", "--quiet", "main"]);
        commit(&dir, "README", "three");
        let url = format!("file://{}", dir.display());
        Upstream {
            _tmp: tmp,
            dir,
            url,
            first,
            v1,
        }
    }

    fn cache() -> (tempfile::TempDir, CloneCache) {
        let tmp = tempfile::tempdir().unwrap();
        let cache = CloneCache::new(tmp.path().join("cache"));
        (tmp, cache)
    }

    #[test]
    fn a_tree_made_from_a_session_bundle_is_the_tree_the_mirror_would_make() {
        let up = upstream();
        let (tmp, cache) = cache();
        for (sid, base, branch) in [("s1", None, Some("main")), ("s2", Some("v1"), None)] {
            let (commit, got) = cache.pin_session("demo", &up.url, sid, base).unwrap();
            assert_eq!(got.as_deref(), branch);
            if base == Some("v1") {
                assert_eq!(commit, up.v1);
            }
            let bundle = tmp.path().join(format!("{sid}.bundle"));
            cache.session_bundle("demo", sid, &bundle).unwrap();
            // Made where no mirror is: only the bundle is read.
            let dest = tmp.path().join(format!("pod/{sid}"));
            tree_from_bundle(&bundle, &dest, sid, &up.url, &commit, got.as_deref()).unwrap();
            assert_eq!(g(&dest, &["rev-parse", "HEAD"]), commit);
            assert_eq!(g(&dest, &["remote", "get-url", "origin"]), up.url);
            assert!(!dest.join(".git/objects/info/alternates").exists());
            match branch {
                Some(b) => assert_eq!(
                    g(&dest, &["rev-parse", "--abbrev-ref", "@{upstream}"]),
                    format!("origin/{b}")
                ),
                None => assert_eq!(g(&dest, &["rev-parse", "--abbrev-ref", "HEAD"]), "HEAD"),
            }
            assert_eq!(
                g(&dest, &["log", "--format=%H"]).lines().last(),
                Some(up.first.as_str())
            );
            // A second try on the made tree refuses, and changes nothing.
            assert!(matches!(
                tree_from_bundle(&bundle, &dest, sid, &up.url, &commit, got.as_deref()),
                Err(CloneError::DestExists { .. })
            ));
        }
        // No pin, no bundle.
        assert!(cache
            .session_bundle("demo", "s9", &tmp.path().join("s9.bundle"))
            .is_err());
    }

    #[test]
    fn a_session_tree_borrows_the_mirror_objects_and_pins_its_base() {
        let up = upstream();
        let (tmp, cache) = cache();
        let dest = tmp.path().join("trees/s1");
        let t = cache
            .session_tree("demo", &up.url, "s1", &dest, None)
            .unwrap();
        let main = g(&up.dir, &["rev-parse", "main"]);
        assert_eq!(t.base_commit, main);
        assert_eq!(t.branch.as_deref(), Some("main"));
        assert_eq!(t.path, dest);
        assert_eq!(fs::read_to_string(dest.join("README")).unwrap(), "three");

        // Objects come through alternates: the tree has none of its own.
        let mirror = cache.mirror_path("demo").unwrap();
        let alternates = fs::read_to_string(dest.join(".git/objects/info/alternates")).unwrap();
        assert_eq!(
            Path::new(alternates.trim()).canonicalize().unwrap(),
            mirror.join("objects").canonicalize().unwrap()
        );
        let counts = g(&dest, &["count-objects", "-v"]);
        assert!(counts.contains("count: 0\n"), "{counts}");
        assert!(counts.contains("in-pack: 0\n"), "{counts}");

        // A normal checkout: clean, on main tracking origin/main, origin = upstream.
        assert_eq!(g(&dest, &["status", "--porcelain"]), "");
        assert_eq!(g(&dest, &["rev-parse", "--abbrev-ref", "HEAD"]), "main");
        assert_eq!(
            g(&dest, &["rev-parse", "--abbrev-ref", "main@{upstream}"]),
            "origin/main"
        );
        assert_eq!(g(&dest, &["remote", "get-url", "origin"]), up.url);

        // The mirror: precious objects, no auto gc, the pin.
        assert_eq!(g(&mirror, &["config", "core.repositoryformatversion"]), "1");
        assert_eq!(
            g(&mirror, &["config", "extensions.preciousObjects"]),
            "true"
        );
        assert_eq!(g(&mirror, &["config", "gc.auto"]), "0");
        assert_eq!(
            g(&mirror, &["rev-parse", "refs/flotilla/sessions/s1"]),
            main
        );
        assert_eq!(
            cache.pins("demo").unwrap(),
            BTreeMap::from([("s1".to_string(), main)])
        );
        assert!(cache.root().join("demo.lock").exists());
    }

    #[test]
    fn bases_can_be_a_branch_a_tag_or_a_commit() {
        let up = upstream();
        let (tmp, cache) = cache();
        let t = |id: &str, base: &str| {
            cache
                .session_tree("demo", &up.url, id, &tmp.path().join(id), Some(base))
                .unwrap()
        };
        let feature = t("s-feature", "feature");
        assert_eq!(feature.branch.as_deref(), Some("feature"));
        assert_eq!(feature.base_commit, g(&up.dir, &["rev-parse", "feature"]));
        assert!(feature.path.join("feature.txt").exists());
        assert_eq!(
            g(&feature.path, &["rev-parse", "--abbrev-ref", "HEAD"]),
            "feature"
        );

        let tag = t("s-tag", "v1");
        assert_eq!(tag.branch, None);
        assert_eq!(tag.base_commit, up.v1);
        assert_eq!(g(&tag.path, &["rev-parse", "--abbrev-ref", "HEAD"]), "HEAD");
        assert_eq!(fs::read_to_string(tag.path.join("README")).unwrap(), "two");

        let short = &up.first[..12];
        let old = t("s-commit", short);
        assert_eq!(old.branch, None);
        assert_eq!(old.base_commit, up.first);
        assert_eq!(fs::read_to_string(old.path.join("README")).unwrap(), "one");

        let pins = cache.pins("demo").unwrap();
        assert_eq!(pins.len(), 3);
        assert_eq!(pins["s-tag"], up.v1);
        assert_eq!(pins["s-commit"], up.first);
        // One mirror for all of them.
        let mut names: Vec<_> = fs::read_dir(cache.root())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["demo.git", "demo.lock", "gitconfig"]);
    }

    #[test]
    fn the_mirror_fetches_new_commits_and_never_prunes() {
        let up = upstream();
        let (tmp, cache) = cache();
        cache
            .session_tree("demo", &up.url, "s1", &tmp.path().join("s1"), None)
            .unwrap();
        let newer = commit(&up.dir, "README", "four");
        g(&up.dir, &["branch", "-D", "feature"]);
        g(&up.dir, &["tag", "-d", "v1"]);
        let t2 = cache
            .session_tree("demo", &up.url, "s2", &tmp.path().join("s2"), None)
            .unwrap();
        assert_eq!(t2.base_commit, newer);
        let mirror = cache.mirror_path("demo").unwrap();
        g(&mirror, &["rev-parse", "--verify", "refs/heads/feature"]);
        g(&mirror, &["rev-parse", "--verify", "refs/tags/v1"]);
        // Another session can still start from what the upstream deleted.
        let t3 = cache
            .session_tree(
                "demo",
                &up.url,
                "s3",
                &tmp.path().join("s3"),
                Some("feature"),
            )
            .unwrap();
        assert!(t3.path.join("feature.txt").exists());
    }

    #[test]
    fn the_upstream_cannot_move_a_pin() {
        let up = upstream();
        let (tmp, cache) = cache();
        let t = cache
            .session_tree("demo", &up.url, "s1", &tmp.path().join("s1"), Some("v1"))
            .unwrap();
        // The upstream grows a ref in the pin namespace.
        g(
            &up.dir,
            &["update-ref", "refs/flotilla/sessions/s1", &up.first],
        );
        cache.mirror("demo", &up.url).unwrap();
        assert_eq!(cache.pins("demo").unwrap()["s1"], t.base_commit);
    }

    #[test]
    fn concurrent_session_trees_share_one_mirror_under_the_lock() {
        let up = upstream();
        let (tmp, cache) = cache();
        let cache = Arc::new(cache);
        let n = 6;
        let barrier = Arc::new(Barrier::new(n));
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let (cache, barrier, url) = (cache.clone(), barrier.clone(), up.url.clone());
                let dest = tmp.path().join(format!("t{i}"));
                std::thread::spawn(move || {
                    barrier.wait();
                    cache.session_tree("demo", &url, &format!("s{i}"), &dest, None)
                })
            })
            .collect();
        let main = g(&up.dir, &["rev-parse", "main"]);
        for h in handles {
            let t = h.join().unwrap().unwrap();
            assert_eq!(t.base_commit, main);
            assert_eq!(g(&t.path, &["status", "--porcelain"]), "");
        }
        let pins = cache.pins("demo").unwrap();
        assert_eq!(pins.len(), n);
        assert!(pins.values().all(|c| *c == main));
        assert!(!cache.root().join("demo.git.partial").exists());
        let mirror = cache.mirror_path("demo").unwrap();
        // One remote, configured once.
        assert_eq!(
            g(&mirror, &["config", "--get-all", "remote.origin.fetch"]),
            "+refs/*:refs/*\n^refs/flotilla/*"
        );
    }

    #[test]
    fn gc_prune_now_in_the_mirror_never_breaks_a_session_tree() {
        let up = upstream();
        let (tmp, cache) = cache();
        g(&up.dir, &["checkout", "--quiet", "-b", "topic"]);
        let topic = commit(&up.dir, "topic.txt", "only on topic");
        g(&up.dir, &["checkout", "--quiet", "main"]);
        let dest = tmp.path().join("s1");
        let t = cache
            .session_tree("demo", &up.url, "s1", &dest, Some("topic"))
            .unwrap();
        assert_eq!(t.base_commit, topic);
        let mirror = cache.mirror_path("demo").unwrap();
        // The branch disappears from the mirror (as if never fetched): only the pin
        // keeps the commit reachable.
        g(&mirror, &["update-ref", "-d", "refs/heads/topic"]);
        let check = || {
            assert_eq!(g(&dest, &["cat-file", "-t", &topic]), "commit");
            g(&dest, &["fsck", "--connectivity-only", "--no-dangling"]);
            assert_eq!(g(&dest, &["status", "--porcelain"]), "");
            assert_eq!(
                g(&dest, &["log", "--format=%s", "-1"]),
                "topic.txt: only on topic"
            );
        };
        g(&mirror, &["gc", "--quiet", "--prune=now"]);
        check();
        // Without preciousObjects the pin alone still protects the base.
        g(&mirror, &["config", "extensions.preciousObjects", "false"]);
        g(&mirror, &["reflog", "expire", "--expire=now", "--all"]);
        g(&mirror, &["gc", "--quiet", "--prune=now"]);
        check();
        // The agent's own commits live in the tree, not the mirror.
        let mine = commit(&dest, "agent.txt", "agent work");
        assert!(git(Some(&mirror), &["cat-file", "-e", &mine]).is_err());
        g(&mirror, &["gc", "--quiet", "--prune=now"]);
        assert_eq!(g(&dest, &["cat-file", "-t", &mine]), "commit");
    }

    #[test]
    fn remove_session_deletes_the_tree_and_the_pin() {
        let up = upstream();
        let (tmp, cache) = cache();
        let d1 = tmp.path().join("s1");
        let d2 = tmp.path().join("s2");
        cache
            .session_tree("demo", &up.url, "s1", &d1, None)
            .unwrap();
        cache
            .session_tree("demo", &up.url, "s2", &d2, None)
            .unwrap();
        cache.remove_session("demo", "s1", &d1).unwrap();
        assert!(!d1.exists());
        assert_eq!(
            cache.pins("demo").unwrap().keys().collect::<Vec<_>>(),
            ["s2"]
        );
        // Idempotent.
        cache.remove_session("demo", "s1", &d1).unwrap();
        // A directory that does not borrow from the mirror is left alone.
        let other = tmp.path().join("other");
        fs::create_dir(&other).unwrap();
        fs::write(other.join("keep"), "x").unwrap();
        let e = cache.remove_session("demo", "s2", &other).unwrap_err();
        assert!(matches!(e, CloneError::NotASessionTree { .. }), "{e}");
        assert!(other.join("keep").exists());
        assert!(cache.pins("demo").unwrap().contains_key("s2"));
        // A tree of another repository's mirror is not this one's.
        let up2 = upstream();
        let d3 = tmp.path().join("s3");
        cache
            .session_tree("other", &up2.url, "s3", &d3, None)
            .unwrap();
        assert!(matches!(
            cache.remove_session("demo", "s3", &d3),
            Err(CloneError::NotASessionTree { .. })
        ));
        assert!(d3.exists());
    }

    #[test]
    fn names_ids_bases_and_urls_are_checked() {
        let (tmp, cache) = cache();
        let dest = tmp.path().join("d");
        for bad in [
            "", "../x", "a/b", ".hidden", "-x", "x.lock", "a..b", "x.", "a b", "é",
        ] {
            assert!(
                matches!(
                    cache.session_tree(bad, "file:///x", "s1", &dest, None),
                    Err(CloneError::InvalidRepo { .. })
                ),
                "{bad:?}"
            );
            assert!(
                matches!(
                    cache.session_tree("demo", "file:///x", bad, &dest, None),
                    Err(CloneError::InvalidSessionId { .. })
                ),
                "{bad:?}"
            );
        }
        assert!(matches!(
            cache.session_tree("demo", "file:///x", &"s".repeat(129), &dest, None),
            Err(CloneError::InvalidSessionId { .. })
        ));
        for bad in ["", "-x", "--upload-pack=evil", "a b", "a\nb"] {
            assert!(
                matches!(
                    cache.session_tree("demo", "file:///x", "s1", &dest, Some(bad)),
                    Err(CloneError::InvalidBase { .. })
                ),
                "{bad:?}"
            );
        }
        assert!(matches!(
            cache.mirror("demo", "--upload-pack=touch /tmp/x"),
            Err(CloneError::InvalidUrl { .. })
        ));
        for ok in ["demo", "flotilla-sessions", "a.b_c-1", "0"] {
            check_repo(ok).unwrap();
            check_session_id(ok).unwrap();
        }
        // Nothing was made for the refused calls.
        assert!(!cache.root().exists());
    }

    #[test]
    fn failures_are_typed_and_name_the_git_command() {
        let up = upstream();
        let (tmp, cache) = cache();
        let missing = format!("file://{}/nope", tmp.path().display());
        let e = cache
            .session_tree("gone", &missing, "s1", &tmp.path().join("s1"), None)
            .unwrap_err();
        match &e {
            CloneError::Git {
                command,
                status,
                stderr,
            } => {
                assert!(
                    command.starts_with("git clone --quiet --mirror -- file://"),
                    "{command}"
                );
                assert_eq!(*status, Some(128));
                assert!(!stderr.is_empty());
            }
            e => panic!("{e}"),
        }
        assert!(e.to_string().contains("(exit status 128)"), "{e}");
        assert!(!cache.root().join("gone.git").exists());
        assert!(!cache.root().join("gone.git.partial").exists());

        let e = cache
            .session_tree(
                "demo",
                &up.url,
                "s1",
                &tmp.path().join("s1"),
                Some("no-such"),
            )
            .unwrap_err();
        assert!(
            matches!(&e, CloneError::UnknownBase { base, .. } if base == "no-such"),
            "{e}"
        );
        // The failed session left no pin and no tree.
        assert!(cache.pins("demo").unwrap().is_empty());
        assert!(!tmp.path().join("s1").exists());

        let e = cache
            .session_tree(
                "demo",
                "file:///elsewhere",
                "s1",
                &tmp.path().join("s1"),
                None,
            )
            .unwrap_err();
        assert!(matches!(e, CloneError::UrlMismatch { .. }), "{e}");

        let full = tmp.path().join("full");
        fs::create_dir(&full).unwrap();
        fs::write(full.join("x"), "x").unwrap();
        assert!(matches!(
            cache.session_tree("demo", &up.url, "s1", &full, None),
            Err(CloneError::DestExists { .. })
        ));
        // An empty directory is fine.
        let empty = tmp.path().join("empty");
        fs::create_dir(&empty).unwrap();
        cache
            .session_tree("demo", &up.url, "s1", &empty, None)
            .unwrap();

        let bare = tmp.path().join("empty-upstream.git");
        g(
            tmp.path(),
            &["init", "--quiet", "--bare", bare.to_str().unwrap()],
        );
        let e = cache
            .session_tree(
                "empty",
                bare.to_str().unwrap(),
                "s1",
                &tmp.path().join("e1"),
                None,
            )
            .unwrap_err();
        assert!(matches!(e, CloneError::EmptyRepository { .. }), "{e}");
    }

    #[test]
    fn an_unpinned_mirror_is_removed_only_after_its_grace() {
        let up = upstream();
        let (tmp, cache) = cache();
        let dest = tmp.path().join("s1");
        cache
            .session_tree("demo", &up.url, "s1", &dest, None)
            .unwrap();
        let mirror = cache.mirror_path("demo").unwrap();
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(3600);
        // Pinned: kept, whatever the grace.
        assert_eq!(cache.remove_mirror("demo", later).unwrap(), None);
        // A push request and the pin go with the session's refs.
        g(&mirror, &["update-ref", "refs/flotilla/push/s1", "HEAD"]);
        cache.remove_session("demo", "s1", &dest).unwrap();
        assert_eq!(
            cache.drop_session_refs("demo", "s1").unwrap(),
            vec!["refs/flotilla/push/s1".to_string()]
        );
        assert!(cache.drop_session_refs("demo", "s1").unwrap().is_empty());
        assert!(cache.pins("demo").unwrap().is_empty());
        // Unpinned but used just now (the pin was dropped): kept within the grace.
        let used = cache.mirror_last_used("demo").unwrap().unwrap();
        let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        assert!(used > hour_ago);
        assert_eq!(cache.remove_mirror("demo", hour_ago).unwrap(), None);
        assert!(mirror.join("HEAD").exists());
        // Past it: removed; its lock file stays; nothing to do a second time.
        assert_eq!(
            cache.remove_mirror("demo", later).unwrap(),
            Some(mirror.clone())
        );
        assert!(!mirror.exists());
        assert!(cache.root().join("demo.lock").exists());
        assert_eq!(cache.remove_mirror("demo", later).unwrap(), None);
        assert_eq!(cache.mirror_last_used("demo").unwrap(), None);
        assert!(cache.drop_session_refs("demo", "s1").unwrap().is_empty());
    }
}

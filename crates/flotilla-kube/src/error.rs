//! The adapter's errors: each names the cluster (kubeconfig and context), the object
//! and the verb, and says what to do.

use std::path::PathBuf;

/// What went wrong talking to a cluster.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// The kubeconfig file could not be read or parsed.
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// What the parser or the file system said.
        message: String,
    },
    /// The context named is not in the kubeconfig.
    #[error("kubeconfig {path} has no context `{context}` (it has: {available})")]
    NoContext {
        /// The file.
        path: PathBuf,
        /// The context asked for.
        context: String,
        /// Its contexts, comma-separated (`none` when empty).
        available: String,
    },
    /// The kubeconfig names no context and the host names none either.
    #[error("kubeconfig {path} has no current-context: name one in the host's `context`")]
    NoCurrentContext {
        /// The file.
        path: PathBuf,
    },
    /// The kubeconfig's context could not become a client (credentials, TLS…).
    #[error("context `{context}` of {path}: {message}")]
    Client {
        /// The file.
        path: PathBuf,
        /// The context.
        context: String,
        /// Why.
        message: String,
    },
    /// The API server answered with a failure status.
    #[error("{verb} {what}: {message}{help}")]
    Api {
        /// The request, e.g. `apply Deployment inference/llm`.
        verb: String,
        /// The object or collection.
        what: String,
        /// HTTP status (403, 404, 409…).
        code: u16,
        /// The Status' `reason` (`Forbidden`, `NotFound`, `Conflict`…).
        reason: String,
        /// The Status' message, as the API server wrote it.
        message: String,
        /// What to do about it (empty, or `; …`).
        help: String,
    },
    /// The API server could not be reached or its answer not read.
    #[error("{verb} {what}: the API server at {server} did not answer: {message}")]
    Unreachable {
        /// The request.
        verb: String,
        /// The object or collection.
        what: String,
        /// The server's URL.
        server: String,
        /// Why.
        message: String,
    },
    /// A wait ran out of time (a rollout, the first list of a watch).
    #[error("{what}: not done after {waited:?}: {state}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long.
        waited: std::time::Duration,
        /// What was seen last.
        state: String,
    },
    /// The operation was interrupted while this waited.
    #[error("{what}: interrupted")]
    Interrupted {
        /// What was awaited.
        what: String,
    },
    /// A file of this machine's (a component's log) could not be written.
    #[error("{what} {}: {source}", path.display())]
    File {
        /// What was being done, e.g. `copy the pods' lines into`.
        what: String,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The workload's pods fail (crash-looping, killed for memory, image not pulled).
    #[error("{what}: {why}")]
    PodsFailing {
        /// The workload.
        what: String,
        /// Which pod, which reason, the message the kubelet gave.
        why: String,
    },
}

impl KubeError {
    /// From a kube-rs error of `verb` on `what` at `server`, with advice for the
    /// statuses a user can act on.
    pub fn from_kube(verb: &str, what: &str, server: &str, e: kube::Error) -> KubeError {
        match e {
            kube::Error::Api(s) => KubeError::refused(verb, what, s.code, &s.reason, &s.message),
            other => KubeError::Unreachable {
                verb: verb.to_string(),
                what: what.to_string(),
                server: server.to_string(),
                message: chain(&other),
            },
        }
    }

    /// The API server's refusal (`code`, the Status' `reason` and `message`) of `verb`
    /// on `what`, with advice for the statuses a user can act on.
    pub fn refused(verb: &str, what: &str, code: u16, reason: &str, message: &str) -> KubeError {
        let help = match (code, reason) {
            (403, _) => "; the context's user lacks that permission (RBAC): grant it the verb on that resource in the namespace, e.g. with a Role and RoleBinding".to_string(),
            (409, "Conflict") if verb.starts_with("apply") => "; another field manager owns those fields: nothing was applied; set kubernetes.force_conflicts = true to take them over, or remove them from the other manager".to_string(),
            (404, _) if message.contains("namespaces") => "; Flotilla does not create namespaces: create it (kubectl create namespace …) or name another (a component's kubernetes.namespace, its host's namespace, or sessions.toml's [runtime.kubernetes] namespace)".to_string(),
            (401, _) => "; the context's credentials were refused".to_string(),
            _ => String::new(),
        };
        KubeError::Api {
            verb: verb.to_string(),
            what: what.to_string(),
            code,
            reason: reason.to_string(),
            message: if message.is_empty() {
                format!("{code} {reason}")
            } else {
                message.to_string()
            },
            help,
        }
    }

    /// The HTTP status when the API server answered with one.
    pub fn code(&self) -> Option<u16> {
        match self {
            KubeError::Api { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// `e` and its sources, joined with `: `.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

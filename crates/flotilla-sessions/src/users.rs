//! The users the authority's pieces run as (`[privileges]` of `sessions.toml`): their
//! defaults and how a name becomes a uid and gid.

/// The default API user: the uid just below the session range (no account needed).
pub const DEFAULT_API_USER: &str = "61183";
/// The default executor user: an unprivileged uid of its own (no account needed),
/// which holds nothing until the operator gives it access (or names another).
pub const DEFAULT_EXECUTOR_USER: &str = "61182";

/// A user named in `[privileges]`: an account name or a number (uid = gid then).
///
/// # Errors
/// What is wrong, as a sentence.
pub fn resolve_user(name: &str) -> Result<(u32, u32), String> {
    if let Ok(n) = name.parse::<u32>() {
        return Ok((n, n));
    }
    let u = nix::unistd::User::from_name(name)
        .ok()
        .flatten()
        .ok_or_else(|| format!("no user `{name}` on this host"))?;
    Ok((u.uid.as_raw(), u.gid.as_raw()))
}

//! The dashboard's part of the authority's state: live sessions, the change feed
//! of live updates, the sign-in rate limit.

/// What the dashboard keeps in memory ([`crate::state::AppState`]'s `ui`).
#[derive(Default)]
pub struct UiState {
    /// Signed-in browsers.
    pub sessions: super::session::Sessions,
    /// What changed, for the event streams.
    pub hub: super::hub::Hub,
    /// Sign-in attempts per client address.
    pub sign_in: super::ratelimit::SignInLimit,
    /// Fragments rendered at a hub sequence number, shared by every stream of the
    /// same view (see [`super::renders`]).
    pub renders: super::renders::Renders,
}

//! The wire types (DTOs) of the authority's HTTP API, version 1 (`/v1/...`): what
//! agents and the CLI send and receive, as JSON. The OpenAPI document generated from
//! them (`flotilla serve openapi`, committed as `crates/flotilla-server/openapi.json`)
//! is the reference; a test keeps the two equal.
//!
//! Domain types (the model's `Snapshot`, `StatusReport`) travel inside these as they
//! are; the document describes them as free-form objects and points at the model.

use flotilla_model::status::{Evidence, StatusReport};
use flotilla_model::topology::Snapshot;
use flotilla_release::SkipEntry;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The path prefix of this version of the API.
pub const V1: &str = "/v1";

/// An error answer: every non-2xx response carries one.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ApiError {
    /// A stable machine-readable code: `unauthorized`, `forbidden`, `not-found`,
    /// `conflict`, `invalid`, `token-used`, `token-expired`, `unavailable`, `internal`.
    pub code: String,
    /// What went wrong, for a human.
    pub message: String,
    /// For `conflict` on a selection: the revision selected now (`null` when none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<String>,
}

/// `POST /v1/join`: an agent exchanges a one-time join token for its credential.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct JoinRequest {
    /// The join token `flotilla serve token create` printed (`flt-join-…`).
    pub token: String,
    /// The agent's version (`flotilla --version`).
    pub agent_version: String,
    /// The agent's platform, `<os>-<arch>` (e.g. `linux-x86_64`).
    pub platform: String,
}

/// The answer to a join.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct JoinResponse {
    /// The host the token was bound to: the only host this agent may act for.
    pub host: String,
    /// The agent's credential (`flt-agent-…`), sent as `Authorization: Bearer …`.
    /// Shown once; the authority keeps only its SHA-256.
    pub credential: String,
}

/// `POST /v1/tokens` (operator): make a join token for one host.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TokenRequest {
    /// The host the token is bound to (must be a host of the selected revision or
    /// one to come; not checked).
    pub host: String,
    /// How long the token can be used, in seconds (default 3600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_secs: Option<u64>,
    /// Keep the host's older agent credentials valid when the token is redeemed
    /// (default `false`: joining again revokes them).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_credentials: bool,
}

/// A new join token.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TokenResponse {
    /// The token (`flt-join-…`), shown once.
    pub token: String,
    /// The host it is bound to.
    pub host: String,
    /// When it stops being usable, ms since the Unix epoch.
    pub expires_ms: i64,
    /// `sha256:<hex>` of the authority's CA certificate (DER): the pin an agent
    /// joins with (`--ca-hash`).
    pub ca_hash: String,
}

/// `GET /v1/hosts/{host}/snapshot?index=N&wait=30s`: what one host should run.
///
/// A long poll in Consul's blocking-query style: the request returns as soon as the
/// selection's index is greater than `index`, else after `wait` (at most 5 min,
/// default 30 s, with up to 1/16 of it added as jitter) with the same index.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SnapshotResponse {
    /// The selection's index (0: nothing selected yet). Pass it back as `index`.
    pub index: u64,
    /// The selected revision (`sha256:…`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// The host's role in the revision: `control` or `component`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// The revision filtered for this host (the model's `topology::Snapshot`): its
    /// own components, their resolved connections, its own host entry and the hosts
    /// its tunnels go through. No secret values ever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub snapshot: Option<Snapshot>,
    /// `control` hosts only: the whole (secret-free) revision, for planning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub topology: Option<serde_json::Value>,
}

/// What the agent found changed by hand on its host: reported, never merged back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Drift {
    /// The component.
    pub component: String,
    /// What kind: `stopped-by-hand` (desired running, stopped by an operation that
    /// was not the agent's), `foreign` (a process Flotilla did not start holds its
    /// port), `config` (it runs another effective config than the
    /// desired one), `runtime` (its executable or an `identity_files` file was edited
    /// since it started), `undesired` (a process Flotilla started runs for a
    /// component the desired state does not have).
    pub kind: String,
    /// What shows it (the model's `status::Evidence`: signal, source, at_ms, saw).
    #[schema(value_type = Vec<Object>)]
    pub evidence: Vec<Evidence>,
}

/// `POST /v1/hosts/{host}/report`: an agent's measured view of its host.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AgentReport {
    /// The revision the agent has applied (its snapshot's), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// The agent's version.
    pub agent_version: String,
    /// The agent's platform, `<os>-<arch>`.
    pub platform: String,
    /// The agent's measured status of its components (the model's
    /// `status::StatusReport`).
    #[schema(value_type = Object)]
    pub status: StatusReport,
    /// Drift found since the last snapshot was applied.
    #[serde(default)]
    pub drift: Vec<Drift>,
    /// Recent events (applied a revision, restarted a component…), newest last.
    #[serde(default)]
    pub events: Vec<String>,
}

/// `POST /v1/revisions` (operator): publish a validated inventory as a revision and
/// select it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PublishRequest {
    /// The validated topology (the canonical JSON `flotilla validate --json`'s
    /// topology is made of). The authority checks it again and names it by the
    /// SHA-256 of its canonical JSON.
    #[schema(value_type = Object)]
    pub topology: serde_json::Value,
    /// Compare-and-swap: publish only if this is the revision selected now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<String>,
}

/// `PUT /v1/selection` (operator): select an existing revision (e.g. roll back).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SelectRequest {
    /// The revision to select.
    pub revision: String,
    /// Compare-and-swap: only if this is the revision selected now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<String>,
}

/// A selection: which revision is desired, since when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SelectionDto {
    /// Its index: 1 for the first selection, one more for each change.
    pub index: u64,
    /// The selected revision.
    pub revision: String,
    /// When, ms since the Unix epoch.
    pub selected_ms: i64,
    /// Who (the operator credential's name).
    pub selected_by: String,
}

/// The answer to a publish or a select.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SelectResponse {
    /// The revision.
    pub revision: String,
    /// Whether anything changed (`false`: it was already selected).
    pub changed: bool,
    /// The selection now.
    pub selection: SelectionDto,
}

/// One revision in the history.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RevisionSummaryDto {
    /// Its name, `sha256:…`.
    pub revision: String,
    /// When it was first published, ms since the Unix epoch.
    pub created_ms: i64,
    /// Who published it.
    pub published_by: String,
    /// Whether it is the one selected now.
    pub selected: bool,
}

/// `GET /v1/revisions`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct HistoryResponse {
    /// Revisions, newest first.
    pub revisions: Vec<RevisionSummaryDto>,
    /// Selections, newest first.
    pub selections: Vec<SelectionDto>,
}

/// `GET /v1/revisions/{revision}`: one revision whole (operator only).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RevisionDto {
    /// Its name.
    pub revision: String,
    /// When it was first published, ms since the Unix epoch.
    pub created_ms: i64,
    /// Who published it.
    pub published_by: String,
    /// The topology.
    #[schema(value_type = Object)]
    pub topology: serde_json::Value,
}

/// One entry of a diff between revisions.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ChangeDto {
    /// `component`, `host` or `stack`.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// `added`, `removed` or `changed`.
    pub change: String,
    /// For `changed`: what, one line each (`command[2] "1" → "2"`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
    /// A component whose runtime config changed: a running instance is restarted
    /// to apply it.
    #[serde(default)]
    pub restarts: bool,
}

/// `GET /v1/revisions/{a}/diff/{b}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DiffResponse {
    /// From.
    pub from: String,
    /// To.
    pub to: String,
    /// What changed, by kind and name.
    pub changes: Vec<ChangeDto>,
}

/// One host as the authority sees it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct HostStateDto {
    /// The host.
    pub host: String,
    /// `observed` (its agent reported within the deadline), `unreachable` (it did
    /// once, not lately: what it said is `report`, `age_ms` old) or `never-reported`.
    pub observability: String,
    /// When the last report arrived, ms since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_report_ms: Option<i64>,
    /// How old the last report is, ms (by the authority's clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub age_ms: Option<i64>,
    /// The revision the agent says it applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// The last report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<AgentReport>,
    /// The agent's runtime identity: what it measured of its own executable, against
    /// the release selected for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_identity: Option<AgentIdentityDto>,
    /// When the last report was measured before the last operation step the host
    /// answered through the authority: that operation (`op-7`). What the report says
    /// may already be undone; a newer report is due.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report_before: Option<String>,
}

/// An agent's runtime identity as the status shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AgentIdentityDto {
    /// `sha256:<hex>` of the agent's running executable, measured by the agent through
    /// `/proc/self/exe` (never a version string compiled in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_sha256: Option<String>,
    /// The agent's pid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// When that was reported (ms since the Unix epoch).
    pub reported_ms: i64,
    /// The release selected for this host: the newest one a rollout updated it to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<SelectedReleaseDto>,
    /// A release a rollout is updating it to now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updating_to: Option<SelectedReleaseDto>,
    /// `matches` (the measured digest is the selected release's), `differs`, or
    /// `no-release` (no rollout has updated this host).
    pub runtime_identity: String,
    /// Set when two agent processes report for this host, alternating, within the
    /// report deadline: what the authority saw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conflict: Option<String>,
    /// What the host refuses `Skipped`: every entry of its skip lists, as its agent
    /// last reported them (`flotilla_release::SkipEntry`: name, version, sha256,
    /// reason, at_ms); `flotilla release unskip` clears one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<Object>)]
    pub skipped: Vec<SkipEntry>,
}

/// A release as selected for one host.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SelectedReleaseDto {
    /// The release's name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// The artifact's SHA-256 for the host's platform (64 hex digits).
    pub sha256: String,
    /// The rollout that selected it.
    pub rollout: u64,
}

impl From<flotilla_model::status::SelectedRelease> for SelectedReleaseDto {
    fn from(r: flotilla_model::status::SelectedRelease) -> Self {
        SelectedReleaseDto {
            name: r.name,
            version: r.version,
            sha256: r.sha256,
            rollout: r.rollout,
        }
    }
}

/// `GET /v1/status`: every host's last report, with its age.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct FleetStatus {
    /// The selection now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<SelectionDto>,
    /// The authority's clock when it answered, ms since the Unix epoch.
    pub now_ms: i64,
    /// A report older than this (ms) makes its host `unreachable`.
    pub report_deadline_ms: i64,
    /// Hosts: those of the selected revision and any that reported.
    pub hosts: Vec<HostStateDto>,
    /// Every component, as its agent last measured it: `unreachable` with last-known
    /// state when that report is older than the deadline, `unobserved` when its
    /// host never reported (the model's `status::StatusReport`).
    #[schema(value_type = Object)]
    pub report: StatusReport,
}

/// `POST /v1/hosts/{host}/calls` (operator): queue a call for the host's agent (the
/// `agent` transport).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EnqueueRequest {
    /// The call: a host-mode request (`flotilla_exec::remote::Request`: protocol,
    /// version, call), as `flotilla host serve` reads it over SSH.
    #[schema(value_type = Object)]
    pub request: serde_json::Value,
    /// After this (ms since the Unix epoch) the agent refuses the call instead of
    /// running it.
    pub deadline_ms: i64,
}

/// A queued call's id.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Enqueued {
    /// The call's id.
    pub id: u64,
}

/// One queued call, as its agent receives it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CallDto {
    /// Its id.
    pub id: u64,
    /// The host-mode request.
    #[schema(value_type = Object)]
    pub request: serde_json::Value,
    /// Refuse it after this time (ms since the Unix epoch).
    pub deadline_ms: i64,
}

/// `GET /v1/hosts/{host}/calls?after=N&wait=30s`: the host's unanswered calls with
/// ids above `after`, long-polled like snapshots.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CallsResponse {
    /// Oldest first.
    pub calls: Vec<CallDto>,
    /// The highest call id queued so far, for any host: where an agent that starts
    /// afresh begins (calls queued before it ran are not run late, and a call it was
    /// running when it stopped is not run twice).
    #[serde(default)]
    pub latest: u64,
}

/// `POST /v1/calls/{id}/reply` (the agent of the call's host).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ReplyRequest {
    /// The host-mode response (`flotilla_exec::remote::Response`).
    #[schema(value_type = Object)]
    pub response: serde_json::Value,
}

/// `GET /v1/calls/{id}?wait=30s` (operator): a call and its answer when there is one.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CallStatus {
    /// Its id.
    pub id: u64,
    /// Its host.
    pub host: String,
    /// The answer, once the agent gave it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub response: Option<serde_json::Value>,
}

/// `POST /v1/releases` (operator): relay a release manifest signed offline. The
/// authority stores the exact bytes and never signs anything: agents verify the
/// signature against the keys they pinned (minisign format,
/// <https://jedisct1.github.io/minisign/>).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PublishReleaseRequest {
    /// The manifest (`flotilla_release::Manifest` as JSON), exactly the bytes signed.
    pub manifest: String,
    /// Its `.minisig` signature file's text.
    pub signature: String,
}

/// One published release.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ReleaseDto {
    /// `flotilla-agent`, or a component binary's name (`llama-server`).
    pub name: String,
    /// Its version.
    pub version: String,
    /// The manifest's monotonic serial.
    pub serial: u64,
    /// When it expires (RFC 3339).
    pub expires: String,
    /// Its artifacts' platforms (`<os>-<arch>`) and SHA-256s (hex), in manifest order.
    pub artifacts: Vec<ArtifactDto>,
    /// When it was published (ms since the Unix epoch).
    pub created_ms: i64,
    /// Who published it (`operator`).
    pub published_by: String,
    /// The minisign key id (16 hex digits) that signed it, as the signature file says
    /// (not verified by the authority: agents verify).
    pub key_id: String,
    /// The manifest text, exactly as signed.
    pub manifest: String,
    /// The signature file's text.
    pub signature: String,
}

/// One artifact of a release, as listed.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ArtifactDto {
    /// `<os>-<arch>`, e.g. `linux-x86_64`.
    pub platform: String,
    /// SHA-256 of the artifact, 64 hex digits.
    pub sha256: String,
    /// Its size in bytes.
    pub size: u64,
    /// Where it comes from: `blob` (the authority's blob store) or the URL.
    pub source: String,
}

/// `POST /v1/rollouts` (operator): roll a published release out to the agent hosts
/// that match `selector`. Created `AwaitingApproval`; the host set is frozen now.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CreateRolloutRequest {
    /// The release's name.
    pub name: String,
    /// The release's version.
    pub version: String,
    /// Host labels that must all match (`{}`: every agent host of the selected
    /// revision).
    #[serde(default)]
    pub selector: std::collections::BTreeMap<String, String>,
    /// How many hosts update at once after the canaries (at least 1).
    pub max_in_flight: u32,
    /// How many hosts update first, alone, before any other starts.
    pub canary: u32,
    /// How long a host must run the new release, measured, before it counts as
    /// `Updated` (ms).
    pub min_healthy_ms: u64,
    /// How long a host may take from the step being sent to `Updated` (ms).
    pub timeout_ms: u64,
}

/// `POST /v1/rollbacks` (operator): roll back rollout `rollout` — a halted or
/// finished rollout — as a new rollout: every host it changed goes back to the release
/// it ran before (the hosts it never changed are untouched). Created
/// `AwaitingApproval`, with the canaries, concurrency, soak and timeout of the rollout
/// it reverses unless given here.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CreateRollbackRequest {
    /// The rollout to roll back.
    pub rollout: u64,
    /// How many hosts update at once after the canaries (default: the rollout's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<u32>,
    /// How many hosts go back first, alone (default: the rollout's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<u32>,
    /// The soak, ms (default: the rollout's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_healthy_ms: Option<u64>,
    /// The timeout, ms (default: the rollout's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// `POST /v1/rollouts/{id}/{action}` answer and `GET /v1/rollouts/{id}`: the rollout
/// (`flotilla_release::rollout::Rollout`: phase, `halted`, per-host phase, reason and
/// times, events).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RolloutDto {
    /// The rollout document.
    #[schema(value_type = Object)]
    pub rollout: serde_json::Value,
}

/// `GET /v1/rollouts`: every rollout, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RolloutsResponse {
    /// Rollout documents (see [`RolloutDto`]).
    #[schema(value_type = Vec<Object>)]
    pub rollouts: Vec<serde_json::Value>,
}

/// What the agent of a host should apply: one release of one rollout, while the host
/// is `Updating` in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Assignment {
    /// The rollout's id.
    pub rollout: u64,
    /// The release's name.
    pub name: String,
    /// The release's version.
    pub version: String,
    /// The manifest, exactly the signed bytes (UTF-8 JSON).
    pub manifest: String,
    /// Its `.minisig` text.
    pub signature: String,
    /// The soak: how long the new release must run, measured, before success (ms).
    pub min_healthy_ms: u64,
    /// How long the host has from now to prove the new release (ms).
    pub timeout_ms: u64,
    /// The rollout this one rolls back, for an operator-approved rollback: the host
    /// accepts a lower serial then, and only to a digest it ran before and still keeps
    /// installed (its previous version); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_of: Option<u64>,
}

/// `GET /v1/hosts/{host}/release?index=N&wait=30s` (the host's agent): its
/// assignment, long-polled: answers when the assignments' index passes `N`, else
/// after about `wait`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ReleaseAssignment {
    /// The index of the rollouts' state this answer reflects.
    pub index: u64,
    /// The release to apply, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assignment: Option<Assignment>,
    /// The host's pending unskip requests, oldest first: release versions to remove
    /// from its skip lists (sent again in every answer until the host's update report
    /// shows them carried out; absent from an authority that predates them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unskip: Vec<UnskipRequest>,
}

/// One unskip request as the host's agent receives it: remove every entry of release
/// `name` at `version` from the host's skip lists (the agent's install root's
/// `skip.json` for `flotilla-agent`, else those of the component install roots that
/// keep release `name`), then report them (`HostUpdate`'s `skipped` and `unskipped`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UnskipRequest {
    /// The request's id.
    pub id: u64,
    /// The release's name (`flotilla-agent`, or a component release's).
    pub name: String,
    /// The release's version.
    pub version: String,
}

/// `POST /v1/hosts/{host}/unskip` (operator): allow release `name` at `version` on
/// the host again, by removing it from the host's skip lists (where an agent records a
/// version it rolled back, and refuses it `Skipped` from then on).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CreateUnskipRequest {
    /// The release's name: `flotilla-agent` (the agent's own binary) or a component
    /// release's (`llama-server`).
    pub name: String,
    /// The release's version, as in its manifest (matched exactly).
    pub version: String,
}

/// Where an unskip request stands (serialised lowercase).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum UnskipState {
    /// Sent to the host's agent with every release answer until it reports it done.
    Pending,
    /// The host's agent removed the entries, and a report it sent since shows none
    /// left for this release version.
    Done,
}

/// An unskip request (`POST /v1/hosts/{host}/unskip`, `GET /v1/unskips/{id}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UnskipDto {
    /// Its id (1, 2, 3…).
    pub id: u64,
    /// The host whose skip lists it clears.
    pub host: String,
    /// The release's name.
    pub name: String,
    /// The release's version.
    pub version: String,
    /// `pending` or `done`.
    pub state: UnskipState,
    /// When it was requested, ms since the Unix epoch (the authority's clock).
    pub requested_ms: i64,
    /// Who requested it (the operator credential's name).
    pub requested_by: String,
    /// When the host's report showed it done, ms since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done_ms: Option<i64>,
    /// The entries of this release version in the host's skip lists as its agent last
    /// reported them when the request was made (`flotilla_release::SkipEntry`: name,
    /// version, sha256, reason, at_ms); empty when there were none or the host had
    /// not reported.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<Object>)]
    pub found: Vec<SkipEntry>,
    /// Once done: the entries the agent removed (`found` when the agent had removed
    /// them before, e.g. in a run that ended before it reported).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<Object>)]
    pub cleared: Vec<SkipEntry>,
    /// Why the agent could not change a skip list, as it last reported (the request
    /// stays pending; the agent tries again at its next release answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

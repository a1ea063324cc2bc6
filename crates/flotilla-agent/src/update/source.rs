//! The calls the updater makes to its authority ([`ReleaseSource`]): the
//! `flotilla_api::Client`, or no authority at all ([`NoAuthority`]).

use crate::authority::{one_line, ClientError};
use flotilla_api::wire::ReleaseAssignment;
use flotilla_release::HostUpdate;
use std::future::Future;
use std::path::Path;
use std::time::Duration;

/// The calls the updater makes to its authority (what `flotilla_api::Client`
/// provides).
pub trait ReleaseSource: Send + Sync + 'static {
    /// `GET /v1/hosts/{host}/release?index={index}&wait={wait}`: the host's release
    /// assignment, long-polled.
    ///
    /// # Errors
    /// [`ClientError`]: unreachable, refused, unreadable answer.
    fn release_assignment(
        &self,
        host: &str,
        index: u64,
        wait: Duration,
    ) -> impl Future<Output = Result<ReleaseAssignment, ClientError>> + Send;

    /// `POST /v1/hosts/{host}/release`: what this agent measured and where its update
    /// stands.
    ///
    /// # Errors
    /// [`ClientError`].
    fn report_update(
        &self,
        host: &str,
        update: &HostUpdate,
    ) -> impl Future<Output = Result<(), ClientError>> + Send;

    /// `GET /v1/blobs/{sha256}` into `dest` (unverified), continuing from the
    /// bytes `dest` already holds (a `Range` request: an interrupted download
    /// resumes where it stopped), reading no further once more than `limit` bytes
    /// arrived and writing nothing past it; the bytes `dest` holds then (more than
    /// `limit`: the blob is too long). What arrived stays in `dest` on failure.
    ///
    /// # Errors
    /// [`ClientError`].
    fn download_blob(
        &self,
        sha256: &str,
        dest: &Path,
        limit: u64,
    ) -> impl Future<Output = Result<u64, ClientError>> + Send;
}

impl ReleaseSource for flotilla_api::Client {
    async fn release_assignment(
        &self,
        host: &str,
        index: u64,
        wait: Duration,
    ) -> Result<ReleaseAssignment, ClientError> {
        flotilla_api::Client::release_assignment(self, host, index, wait)
            .await
            .map_err(|e| one_line(&e))
    }

    async fn report_update(&self, host: &str, update: &HostUpdate) -> Result<(), ClientError> {
        flotilla_api::Client::report_update(self, host, update)
            .await
            .map_err(|e| one_line(&e))
    }

    async fn download_blob(
        &self,
        sha256: &str,
        dest: &Path,
        limit: u64,
    ) -> Result<u64, ClientError> {
        flotilla_api::Client::resume_blob(self, sha256, dest, limit)
            .await
            .map_err(|e| one_line(&e))
    }
}

/// No authority (`agent run --inventory`): nothing is ever assigned, reports are
/// accepted at once (so `reported.json` is written as soon as the agent started), no
/// blob can be fetched.
pub struct NoAuthority;

impl ReleaseSource for NoAuthority {
    async fn release_assignment(
        &self,
        _host: &str,
        _index: u64,
        _wait: Duration,
    ) -> Result<ReleaseAssignment, ClientError> {
        std::future::pending().await
    }

    async fn report_update(&self, _host: &str, _update: &HostUpdate) -> Result<(), ClientError> {
        Ok(())
    }

    async fn download_blob(
        &self,
        _sha256: &str,
        _dest: &Path,
        _limit: u64,
    ) -> Result<u64, ClientError> {
        Err(ClientError("no authority to fetch a blob from".into()))
    }
}

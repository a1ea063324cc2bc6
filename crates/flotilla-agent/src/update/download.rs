//! Fetching an artifact into `<root>/downloads/` (from the authority's blob store or
//! the artifact's URL, never more than the manifest's size) and checking its size and
//! SHA-256, with retries when the transfer fails.

use super::{ReleaseSource, Updater};
use crate::record::chain;
use flotilla_release::{InstallRoot, Reason, Refusal};
use std::path::{Path, PathBuf};
use std::time::Duration;

impl<S: ReleaseSource> Updater<S> {
    /// Downloads `artifact` into `<root>/downloads/` and checks size and digest; the
    /// temporary file. Tried three times (1 s, 2 s apart) when the transfer fails,
    /// a blob's download continuing from the bytes the failed attempt left; a file
    /// that arrives whole with the wrong digest or size is not tried again.
    pub(crate) async fn download(
        &self,
        root: &InstallRoot,
        artifact: &flotilla_release::Artifact,
    ) -> Result<PathBuf, Refusal> {
        let mut delay = Duration::from_secs(1);
        let mut last = String::new();
        // One file for every attempt: a blob's download that failed midway
        // resumes from the bytes it holds.
        let (file, tmp) = root.temp_download().map_err(|e| {
            Refusal::new(Reason::InstallFailed, format!("downloads directory: {e}"))
        })?;
        // Room for the manifest's size first: a download that cannot fit is
        // refused before a byte arrives, not when the disk is full.
        if let Ok(st) = nix::sys::statvfs::fstatvfs(&file) {
            // Their widths differ between platforms (u32 on macOS).
            #[allow(clippy::unnecessary_cast)]
            let free = st.blocks_available() as u64 * st.fragment_size() as u64;
            if free < artifact.size {
                drop(file);
                let _ = std::fs::remove_file(&tmp);
                return Err(Refusal::new(
                    Reason::InstallFailed,
                    format!(
                        "{} bytes free where downloads go ({}), the artifact is {} bytes",
                        free,
                        tmp.parent()
                            .map(|p| p.display().to_string())
                            .unwrap_or_default(),
                        artifact.size
                    ),
                ));
            }
        }
        drop(file);
        // Whether this attempt continues from bytes an earlier one left.
        let mut resumed = false;
        for attempt in 1..=3 {
            let fetched = match (&artifact.blob, &artifact.url) {
                (Some(blob), _) => match self.source.download_blob(blob, &tmp, artifact.size).await
                {
                    Ok(n) if n > artifact.size => Err(Refusal::new(
                        Reason::SizeMismatch,
                        format!(
                            "blob {blob} is longer than the manifest's {} bytes (reading stopped)",
                            artifact.size
                        ),
                    )),
                    Ok(n) => Ok(n),
                    Err(e) => Err(Refusal::new(Reason::DownloadFailed, e.0)),
                },
                (None, Some(url)) => fetch_url(url, &tmp, artifact.size).await,
                (None, None) => Err(Refusal::new(
                    Reason::DownloadFailed,
                    "the artifact names neither a blob nor a URL",
                )),
            };
            match fetched {
                Ok(_) => {
                    let verified = {
                        let (tmp, sha, size) =
                            (tmp.clone(), artifact.sha256.clone(), artifact.size);
                        tokio::task::spawn_blocking(move || {
                            flotilla_release::artifact::verify_file(&tmp, &sha, size)
                        })
                        .await
                        .unwrap_or_else(|e| {
                            Err(Refusal::new(Reason::DownloadFailed, e.to_string()))
                        })
                    };
                    match verified {
                        Ok(_) => return Ok(tmp),
                        // Resumed after a failed attempt: the bytes kept from it
                        // may be what was wrong; once more from the start.
                        Err(r) if attempt < 3 && resumed => {
                            last = r.detail;
                            self.log_once(&format!(
                                "the resumed download does not verify ({last}): starting over"
                            ));
                            std::fs::File::create(&tmp).map_err(|e| {
                                Refusal::new(
                                    Reason::InstallFailed,
                                    format!("{}: {e}", tmp.display()),
                                )
                            })?;
                            resumed = false;
                            continue;
                        }
                        Err(r) => {
                            let _ = std::fs::remove_file(&tmp);
                            return Err(r);
                        }
                    }
                }
                Err(r) if r.reason == Reason::SizeMismatch => {
                    let _ = std::fs::remove_file(&tmp);
                    return Err(r);
                }
                Err(r) => {
                    // Kept: the next attempt continues from it (a URL's download
                    // starts over).
                    last = r.detail;
                    resumed = artifact.blob.is_some();
                    if attempt < 3 {
                        self.log_once(&format!("download attempt {attempt} of 3 failed: {last}"));
                        tokio::time::sleep(delay).await;
                        delay *= 2;
                    }
                }
            }
        }
        let _ = std::fs::remove_file(&tmp);
        Err(Refusal::new(
            Reason::DownloadFailed,
            format!("3 attempts failed, the last: {last}"),
        ))
    }
}

/// Fetches `url` into `dest`, refusing as soon as more than `size` bytes arrive. HTTPS
/// is verified against the system's roots (the digest is checked after anyway).
async fn fetch_url(url: &str, dest: &Path, size: u64) -> Result<u64, Refusal> {
    use std::io::Write;
    let failed = |m: String| Refusal::new(Reason::DownloadFailed, format!("{url}: {m}"));
    let tls = flotilla_api::tls::native_roots_config().map_err(|e| failed(e.to_string()))?;
    let http = reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .connect_timeout(Duration::from_secs(10))
        .read_timeout(Duration::from_secs(60))
        .build()
        .map_err(|e| failed(e.to_string()))?;
    let mut resp = http
        .get(url)
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .map_err(|e| failed(chain(&e)))?;
    let mut file = std::fs::File::create(dest).map_err(|e| failed(e.to_string()))?;
    let mut written = 0u64;
    while let Some(chunk) = resp.chunk().await.map_err(|e| failed(chain(&e)))? {
        written += chunk.len() as u64;
        if written > size {
            return Err(Refusal::new(
                Reason::SizeMismatch,
                format!("{url} sent more than the manifest's {size} bytes"),
            ));
        }
        file.write_all(&chunk).map_err(|e| failed(e.to_string()))?;
    }
    file.sync_all().map_err(|e| failed(e.to_string()))?;
    Ok(written)
}

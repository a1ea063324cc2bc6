//! A real, headless Chromium for the dashboard's tests: Debian's `chromium` driven
//! through `chromedriver` (WebDriver, plain HTTP on a free loopback port) with
//! fantoccini. Every wait has a deadline; screenshots go to
//! `$CARGO_TARGET_TMPDIR/screenshots/`. The browser trusts any certificate (the
//! authority's private CA is not the system's).
//!
//! The methods block (the browser runs on a runtime of its own), like the rest of
//! the CLI tests.

use super::KillOnDrop;
use fantoccini::{Client, ClientBuilder, Locator};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How long a wait lasts by default.
pub const WAIT: Duration = Duration::from_secs(20);

/// Where the tests' screenshots go.
pub fn screenshots_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("screenshots")
}

/// A headless Chromium session.
pub struct Browser {
    rt: tokio::runtime::Runtime,
    client: Option<Client>,
    _driver: (Child, KillOnDrop),
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver on a free loopback port and a headless Chromium of
    /// `width` × `height` CSS pixels.
    pub fn start(width: u32, height: u32) -> Browser {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        use std::os::unix::process::CommandExt as _;
        // A process group of its own: dropping the browser ends chromedriver and the
        // Chromium it started together.
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver (Debian's chromium-driver; scripts/test installs it)");
        let guard = KillOnDrop(driver.id());
        let up = flotilla_testkit::wait_until(Duration::from_secs(20), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        assert!(up, "chromedriver never listened on {port}");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // Chromium that exits while starting (it happens on a loaded machine: "Chrome
        // instance exited") is started again, with a fresh profile, a few times: the
        // page under test is not involved yet.
        let mut attempt = 0;
        let (client, profile) = loop {
            attempt += 1;
            let profile = tempfile::tempdir().unwrap();
            let mut caps = serde_json::Map::new();
            caps.insert("acceptInsecureCerts".into(), true.into());
            caps.insert(
                "goog:chromeOptions".into(),
                serde_json::json!({
                    "binary": "/usr/bin/chromium",
                    "args": [
                        "--headless=new",
                        "--no-sandbox",
                        "--disable-gpu",
                        "--disable-dev-shm-usage",
                        "--ignore-certificate-errors",
                        "--hide-scrollbars",
                        format!("--window-size={width},{height}"),
                        format!("--user-data-dir={}", profile.path().display()),
                    ]
                }),
            );
            match rt.block_on(
                ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                    .capabilities(caps)
                    .connect(&format!("http://127.0.0.1:{port}")),
            ) {
                Ok(c) => break (c, profile),
                Err(e) if attempt < 3 && format!("{e:?}").contains("SessionNotCreated") => {
                    eprintln!("Chromium did not start (attempt {attempt}): {e}; starting it again");
                }
                Err(e) => panic!("a Chromium session: {e:?}"),
            }
        };
        let b = Browser {
            rt,
            client: Some(client),
            _driver: (driver, guard),
            _profile: profile,
        };
        b.resize(width, height);
        b
    }

    fn c(&self) -> &Client {
        self.client.as_ref().expect("open")
    }

    /// Makes the page's viewport `width` × `height` CSS pixels (the window is
    /// resized until its inner width is `width`).
    pub fn resize(&self, width: u32, height: u32) {
        self.rt
            .block_on(self.c().set_window_size(width, height))
            .unwrap();
        let inner = self.js("return window.innerWidth").as_i64().unwrap_or(0);
        if inner > 0 && inner != i64::from(width) {
            let w = (2 * i64::from(width) - inner).max(100) as u32;
            self.rt
                .block_on(self.c().set_window_size(w, height))
                .unwrap();
        }
    }

    /// Opens `url`.
    pub fn goto(&self, url: &str) {
        self.rt.block_on(self.c().goto(url)).unwrap();
    }

    /// Reloads the page.
    pub fn reload(&self) {
        self.rt.block_on(self.c().refresh()).unwrap();
    }

    /// The current URL.
    pub fn url(&self) -> String {
        self.rt
            .block_on(self.c().current_url())
            .unwrap()
            .to_string()
    }

    /// Runs `script` (a function body; `arguments` are not passed) and returns what
    /// it returns.
    pub fn js(&self, script: &str) -> serde_json::Value {
        self.rt
            .block_on(self.c().execute(script, vec![]))
            .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// Runs an async `script`: its last argument is the callback to call with the
    /// result.
    pub fn js_async(&self, script: &str) -> serde_json::Value {
        self.rt
            .block_on(self.c().execute_async(script, vec![]))
            .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// The text of the first element matching `css`, if there is one.
    pub fn text(&self, css: &str) -> Option<String> {
        let v = self.js(&format!(
            "const e = document.querySelector({}); return e ? e.textContent : null;",
            serde_json::to_string(css).unwrap()
        ));
        v.as_str().map(str::to_string)
    }

    /// Waits (at most `within`) until `check` holds, else panics naming `what` with
    /// the page's URL and text.
    pub fn wait_for(&self, what: &str, within: Duration, mut check: impl FnMut(&Browser) -> bool) {
        if !flotilla_testkit::wait_until(within, || check(self)) {
            panic!(
                "timed out waiting for {what}\nat {}\npage text:\n{}",
                self.url(),
                self.text("body").unwrap_or_default()
            );
        }
    }

    /// Waits until an element matching `css` exists; its text.
    pub fn wait_css(&self, css: &str) -> String {
        let mut out = None;
        self.wait_for(&format!("`{css}`"), WAIT, |b| {
            out = b.text(css);
            out.is_some()
        });
        out.unwrap_or_default()
    }

    /// Waits until the element matching `css` contains `text`.
    pub fn wait_text(&self, css: &str, text: &str) {
        self.wait_for(&format!("`{css}` to contain {text:?}"), WAIT, |b| {
            b.text(css).is_some_and(|t| t.contains(text))
        });
    }

    /// Types `text` into the element matching `css`.
    pub fn fill(&self, css: &str, text: &str) {
        self.on_element(&format!("fill `{css}`"), || {
            let c = self.c();
            self.rt.block_on(async {
                let e = c.find(Locator::Css(css)).await?;
                e.clear().await?;
                e.send_keys(text).await
            })
        });
    }

    /// Runs `act` on an element until it succeeds (at most [`WAIT`]): a live page
    /// replaces fragments at any time, so an element found may be swapped out
    /// before it is used ("stale element reference"), or not be there yet; a person
    /// would simply act on the fresh one. Any other error panics at once.
    fn on_element(
        &self,
        what: &str,
        mut act: impl FnMut() -> Result<(), fantoccini::error::CmdError>,
    ) {
        let mut last = None;
        let done = flotilla_testkit::wait_until(WAIT, || match act() {
            Ok(()) => true,
            Err(e) => {
                let text = e.to_string();
                if !(text.contains("stale element") || text.contains("no such element")) {
                    panic!("{what}: {e}");
                }
                last = Some(e);
                false
            }
        });
        if !done {
            panic!(
                "{what}: {}",
                last.map(|e| e.to_string()).unwrap_or_default()
            );
        }
    }

    /// Clicks the element matching `css`.
    pub fn click(&self, css: &str) {
        self.on_element(&format!("click `{css}`"), || {
            let c = self.c();
            self.rt
                .block_on(async { c.find(Locator::Css(css)).await?.click().await })
        });
    }

    /// Sends keys to the page (as typed with the focus on `<body>`).
    pub fn keys(&self, keys: &str) {
        let c = self.c();
        self.rt
            .block_on(async { c.find(Locator::Css("body")).await?.send_keys(keys).await })
            .unwrap_or_else(|e| panic!("keys {keys:?}: {e}"));
    }

    /// Signs in at `base` (`https://127.0.0.1:port`) with `credential` through the
    /// sign-in form, starting from `path` (a dashboard path the form sends back to).
    pub fn sign_in(&self, base: &str, credential: &str, path: &str) {
        self.goto(&format!("{base}{path}"));
        self.wait_css("#credential");
        self.fill("#credential", credential);
        self.click("form button[type=submit]");
        self.wait_for("signing in", WAIT, |b| b.text("[data-who]").is_some());
    }

    /// A PNG of the viewport, written to [`screenshots_dir`]`/<name>.png`.
    pub fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.rt.block_on(self.c().screenshot()).unwrap();
        let dir = screenshots_dir();
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        path
    }

    /// A PNG of the whole page (the window made as tall as the page first).
    pub fn screenshot_full(&self, name: &str, width: u32) -> PathBuf {
        let h = self
            .js("return document.documentElement.scrollHeight")
            .as_u64()
            .unwrap_or(900)
            .clamp(400, 4000) as u32;
        self.resize(width, h);
        self.screenshot(name)
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ask for an orderly end, briefly: Chromium may wait a minute on a page
        // that keeps a stream open. Then the whole group goes.
        if let Some(c) = self.client.take() {
            let _ = self
                .rt
                .block_on(async { tokio::time::timeout(Duration::from_secs(3), c.close()).await });
        }
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(self._driver.0.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = self._driver.0.wait();
    }
}

//! The terminal while the UI runs: raw mode and the alternate screen (ratatui's
//! crossterm backend), restored on every way out — a return, an error, a panic.
//! Standard error is captured meanwhile (what a library or an `ssh` it starts
//! writes there would draw over the screen) and printed once the screen is back.

use ratatui::DefaultTerminal;
use std::io::{Read, Seek};
use std::os::fd::OwnedFd;
use std::sync::Mutex;

/// Standard error as it was before the capture (for the panic hook).
static SAVED_STDERR: Mutex<Option<OwnedFd>> = Mutex::new(None);

/// The terminal in the UI's hands, and what standard error received meanwhile.
pub struct Screen {
    /// The ratatui terminal on standard output.
    pub terminal: DefaultTerminal,
    capture: Option<std::fs::File>,
}

/// Puts standard error back where it was (once).
fn restore_stderr() {
    if let Some(saved) = SAVED_STDERR.lock().ok().and_then(|mut s| s.take()) {
        let _ = nix::unistd::dup2_stderr(&saved);
    }
}

/// Sends standard error to an unlinked temporary file; returns it.
fn capture_stderr() -> std::io::Result<std::fs::File> {
    let path = std::env::temp_dir().join(format!(
        "flotilla-tui-{}-{}.stderr",
        std::process::id(),
        flotilla_exec::this_process::now_ms()
    ));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    let _ = std::fs::remove_file(&path);
    let saved = nix::unistd::dup(std::io::stderr())?;
    nix::unistd::dup2_stderr(&file)?;
    if let Ok(mut s) = SAVED_STDERR.lock() {
        *s = Some(saved);
    }
    Ok(file)
}

impl Screen {
    /// Enters raw mode and the alternate screen, and captures standard error. A
    /// panic restores both before its message is printed.
    ///
    /// # Errors
    /// The terminal cannot be set up (not a terminal).
    pub fn enter() -> std::io::Result<Screen> {
        let capture = capture_stderr().ok();
        let terminal = match ratatui::try_init() {
            Ok(t) => t,
            Err(e) => {
                restore_stderr();
                return Err(e);
            }
        };
        // ratatui's hook restores the terminal, then prints the panic: standard error
        // must be the real one by then.
        let ratatui_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore_stderr();
            ratatui_hook(info);
        }));
        Ok(Screen { terminal, capture })
    }

    /// Restores the terminal and standard error; returns what was written to
    /// standard error meanwhile.
    pub fn leave(self) -> String {
        ratatui::restore();
        restore_stderr();
        let mut text = String::new();
        if let Some(mut f) = self.capture {
            if f.rewind().is_ok() {
                let _ = f.read_to_string(&mut text);
            }
        }
        text
    }
}

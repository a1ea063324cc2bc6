//! The event loop: one channel of [`Action`]s fed by an input thread (crossterm's
//! blocking reads: keys and resizes) and by the [`Source`]'s tasks (observations,
//! log lines, plans, progress); each batch of actions goes through the update
//! function, its effects to the source, and the screen is drawn once after it. No
//! timer draws: an idle UI draws only when data arrives.

use crate::tui::action::Action;
use crate::tui::model::App;
use crate::tui::source::Source;
use ratatui::crossterm::event::{self, Event, KeyEventKind};
use std::sync::Arc;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

/// Reads the terminal's events on a thread of its own, sending keys and resizes
/// to `tx` until the channel closes or the terminal cannot be read.
pub fn spawn_input(tx: UnboundedSender<Action>) {
    std::thread::spawn(move || loop {
        let action = match event::read() {
            Ok(Event::Key(k)) if k.kind != KeyEventKind::Release => Action::Key(k),
            Ok(Event::Resize(..)) => Action::Resize,
            Ok(_) => continue,
            Err(_) => return,
        };
        if tx.send(action).is_err() {
            return;
        }
    });
}

/// Runs the UI on `terminal` until it quits.
///
/// # Errors
/// The terminal cannot be drawn on.
pub async fn run<B: ratatui::backend::Backend>(
    mut app: App,
    source: Arc<Source>,
    mut rx: UnboundedReceiver<Action>,
    terminal: &mut ratatui::Terminal<B>,
) -> Result<(), B::Error> {
    source.start();
    terminal.draw(|f| crate::tui::components::draw(&app, f))?;
    while let Some(action) = rx.recv().await {
        let mut effects = crate::tui::update::update(&mut app, action);
        // Everything that arrived meanwhile, then one draw.
        while let Ok(more) = rx.try_recv() {
            effects.extend(crate::tui::update::update(&mut app, more));
        }
        for e in effects {
            source.dispatch(e);
        }
        if app.quit {
            source.stop();
            break;
        }
        terminal.draw(|f| crate::tui::components::draw(&app, f))?;
    }
    Ok(())
}

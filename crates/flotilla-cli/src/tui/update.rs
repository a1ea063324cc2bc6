//! The update function: an [`Action`] changes the [`App`] and may ask for
//! [`Effect`]s. Pure (no IO, no clock): the snapshot tests drive it with keys.

use crate::tui::action::{Action, Effect};
use crate::tui::model::{AnswerDialog, App, Focus, Overlay, PlanDialog, PlanState, LOG_KEEP};
use flotilla_plan::{Operation, Verb};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// How many rows PageUp/PageDown move.
const PAGE: usize = 10;

/// Applies `action` to `app`; returns what the runtime should do.
pub fn update(app: &mut App, action: Action) -> Vec<Effect> {
    match action {
        Action::Key(k) => key(app, k),
        Action::Resize => Vec::new(),
        Action::Observed(Ok(s)) => {
            app.snapshot = Some(s);
            app.error = None;
            clamp(app);
            follow_if_changed(app)
        }
        Action::Observed(Err(e)) => {
            app.error = Some(e);
            Vec::new()
        }
        Action::Log { generation, lines } if generation == app.logs.generation => {
            let n = lines.len();
            app.logs.lines.extend(lines);
            let over = app.logs.lines.len().saturating_sub(LOG_KEEP);
            app.logs.lines.drain(..over);
            if app.logs.back > 0 {
                // Scrolled back: the view stays where it is.
                app.logs.back = (app.logs.back + n).min(app.logs.lines.len());
                app.logs.unseen += n;
            }
            app.logs.error = None;
            Vec::new()
        }
        Action::LogError { generation, error } if generation == app.logs.generation => {
            app.logs.error = Some(error);
            Vec::new()
        }
        Action::Log { .. } | Action::LogError { .. } => Vec::new(),
        Action::Questions(Ok(mut qs)) => {
            qs.retain(|q| q.doc.answer.is_none());
            qs.sort_by_key(|q| q.id);
            app.question_cursor = app.question_cursor.min(qs.len().saturating_sub(1));
            app.questions = Some(qs);
            Vec::new()
        }
        Action::Questions(Err(e)) => {
            app.message = Some(format!("questions: {e}"));
            Vec::new()
        }
        Action::Planned { op, result } => {
            if let Overlay::Plan(d) = &mut app.overlay {
                if d.op == op && d.state == PlanState::Planning {
                    d.state = match result {
                        Ok(plan) => PlanState::Ready(plan),
                        Err(Ok(refusal)) => PlanState::Refused(refusal),
                        Err(Err(error)) => PlanState::Failed(error),
                    };
                }
            }
            Vec::new()
        }
        Action::Progress(line) => {
            if let Overlay::Plan(PlanDialog {
                state: PlanState::Applying(lines),
                ..
            }) = &mut app.overlay
            {
                lines.push(line.clone());
            }
            app.message = Some(line.trim().to_string());
            Vec::new()
        }
        Action::Applied(result) => {
            app.busy = false;
            let summary = match &result {
                Ok((text, _)) => text.lines().next().unwrap_or_default().to_string(),
                Err(e) => e.clone(),
            };
            app.message = Some(summary);
            if let Overlay::Plan(d) = &mut app.overlay {
                let mut lines = match &d.state {
                    PlanState::Applying(l) => l.clone(),
                    _ => Vec::new(),
                };
                d.state = match result {
                    Ok((text, ok)) => {
                        lines.extend(text.lines().map(str::to_string));
                        PlanState::Done { lines, ok }
                    }
                    Err(e) => PlanState::Failed(e),
                };
            }
            vec![Effect::Refresh]
        }
        Action::Answered(result) => {
            app.message = Some(match &result {
                Ok(t) => t.clone(),
                Err(e) => format!("error: {e}"),
            });
            if let Overlay::Answer(d) = &mut app.overlay {
                d.result = Some(result);
            }
            Vec::new()
        }
    }
}

fn key(app: &mut App, k: KeyEvent) -> Vec<Effect> {
    let ctrl_c = k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
    if ctrl_c {
        return quit(app);
    }
    // A key typed right after Esc reaches us as Alt+key (the terminal's escape
    // prefix): Esc, then the key.
    if k.modifiers.contains(KeyModifiers::ALT) && matches!(k.code, KeyCode::Char(_)) {
        let mut effects = key(app, KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE));
        let plain = KeyEvent::new(k.code, k.modifiers - KeyModifiers::ALT);
        effects.extend(key(app, plain));
        return effects;
    }
    if app.editing_filter {
        return filter_key(app, k);
    }
    let close = match app.overlay {
        Overlay::Evidence { .. } => 'e',
        _ => 'd',
    };
    match &mut app.overlay {
        Overlay::None => main_key(app, k),
        Overlay::Help => {
            if matches!(k.code, KeyCode::Esc | KeyCode::Char('?' | 'q')) {
                app.overlay = Overlay::None;
            }
            Vec::new()
        }
        Overlay::Plan(_) => plan_key(app, k),
        Overlay::Evidence { scroll } | Overlay::Dependencies { scroll } => {
            match k.code {
                KeyCode::Esc | KeyCode::Char('q') => app.overlay = Overlay::None,
                KeyCode::Char(c) if c == close => app.overlay = Overlay::None,
                KeyCode::Down | KeyCode::Char('j') => *scroll = scroll.saturating_add(1),
                KeyCode::Up | KeyCode::Char('k') => *scroll = scroll.saturating_sub(1),
                _ => {}
            }
            Vec::new()
        }
        Overlay::Logs => {
            match k.code {
                KeyCode::Esc | KeyCode::Char('q' | 'l') => app.overlay = Overlay::None,
                _ => log_scroll(app, k.code),
            }
            Vec::new()
        }
        Overlay::Answer(_) => answer_key(app, k),
    }
}

/// `q`/Ctrl-C: quit, or while an operation runs, cancel it first.
fn quit(app: &mut App) -> Vec<Effect> {
    if app.busy {
        app.busy = false;
        app.message =
            Some("cancelling: stopping what this run started (q again quits as it is)".into());
        return vec![Effect::Cancel];
    }
    app.quit = true;
    Vec::new()
}

fn filter_key(app: &mut App, k: KeyEvent) -> Vec<Effect> {
    match k.code {
        KeyCode::Esc => {
            app.filter.clear();
            app.editing_filter = false;
        }
        KeyCode::Enter => app.editing_filter = false,
        KeyCode::Backspace => {
            app.filter.pop();
        }
        KeyCode::Char(c) if !c.is_control() => app.filter.push(c),
        _ => {}
    }
    app.cursor = 0;
    follow_if_changed(app)
}

fn main_key(app: &mut App, k: KeyEvent) -> Vec<Effect> {
    if app.focus == Focus::Questions {
        if let Some(effects) = questions_key(app, k) {
            return effects;
        }
    }
    let rows = app.visible().len();
    match k.code {
        KeyCode::Char('q') => return quit(app),
        KeyCode::Down | KeyCode::Char('j') => {
            app.cursor = (app.cursor + 1).min(rows.saturating_sub(1))
        }
        KeyCode::Up | KeyCode::Char('k') => app.cursor = app.cursor.saturating_sub(1),
        KeyCode::PageDown => app.cursor = (app.cursor + PAGE).min(rows.saturating_sub(1)),
        KeyCode::PageUp => app.cursor = app.cursor.saturating_sub(PAGE),
        KeyCode::Home | KeyCode::Char('g') => app.cursor = 0,
        KeyCode::End | KeyCode::Char('G') => app.cursor = rows.saturating_sub(1),
        KeyCode::Char('/') => {
            app.editing_filter = true;
        }
        KeyCode::Esc => {
            app.filter.clear();
            app.marked.clear();
            app.cursor = 0;
        }
        KeyCode::Char('?') => app.overlay = Overlay::Help,
        KeyCode::Char(' ') => {
            if let Some(name) = app.selected().map(|c| c.name.clone()) {
                if !app.marked.remove(&name) {
                    app.marked.insert(name);
                }
            }
        }
        KeyCode::Char(c @ ('s' | 'x' | 'r')) => {
            let verb = match c {
                's' => Verb::Start,
                'x' => Verb::Stop,
                _ => Verb::Restart,
            };
            return operate(app, verb);
        }
        KeyCode::Char('l') => app.overlay = Overlay::Logs,
        KeyCode::Char('e') if app.selected().is_some() => {
            app.overlay = Overlay::Evidence { scroll: 0 };
        }
        KeyCode::Char('d') if app.selected().is_some() => {
            if app.graph.is_some() {
                app.overlay = Overlay::Dependencies { scroll: 0 };
            } else {
                app.message =
                    Some("no inventory loaded: the dependency view needs it (-f FILE)".into());
            }
        }
        KeyCode::Tab if app.questions.is_some() => app.focus = Focus::Questions,
        KeyCode::Char('R') => return vec![Effect::Refresh],
        _ => {}
    }
    follow_if_changed(app)
}

/// Keys of the questions pane; `None` for keys it leaves to the main screen.
fn questions_key(app: &mut App, k: KeyEvent) -> Option<Vec<Effect>> {
    let n = app.questions.as_ref().map_or(0, Vec::len);
    match k.code {
        KeyCode::Tab | KeyCode::Esc => app.focus = Focus::Components,
        KeyCode::Down | KeyCode::Char('j') => {
            app.question_cursor = (app.question_cursor + 1).min(n.saturating_sub(1));
        }
        KeyCode::Up | KeyCode::Char('k') => {
            app.question_cursor = app.question_cursor.saturating_sub(1);
        }
        KeyCode::Char('a' | 'n') | KeyCode::Enter if n > 0 => {
            let decision = if k.code == KeyCode::Char('n') {
                "deny"
            } else {
                "allow"
            };
            let id = app.selected_question().map(|q| q.id)?;
            app.overlay = Overlay::Answer(AnswerDialog {
                id,
                decision,
                note: String::new(),
                result: None,
            });
        }
        _ => return None,
    }
    Some(Vec::new())
}

/// `s`/`x`/`r`: ask for the plan of `verb` on the selected component.
fn operate(app: &mut App, verb: Verb) -> Vec<Effect> {
    let Some(name) = app.selected().map(|c| c.name.clone()) else {
        return Vec::new();
    };
    if let Err(why) = &app.can_operate {
        app.message = Some(why.clone());
        return Vec::new();
    }
    if app.busy {
        app.message = Some("an operation is being applied: wait for it (or q to cancel)".into());
        return Vec::new();
    }
    let op = Operation::new(verb, name);
    app.overlay = Overlay::Plan(PlanDialog {
        op: op.clone(),
        state: PlanState::Planning,
        scroll: 0,
    });
    vec![Effect::Plan(op)]
}

fn plan_key(app: &mut App, k: KeyEvent) -> Vec<Effect> {
    let Overlay::Plan(d) = &mut app.overlay else {
        return Vec::new();
    };
    match (&d.state, k.code) {
        (PlanState::Ready(plan), KeyCode::Char('y' | 'Y')) => {
            let plan = plan.clone();
            d.state = PlanState::Applying(Vec::new());
            d.scroll = 0;
            app.busy = true;
            app.message = Some(format!("applying: {}", plan.operation));
            vec![Effect::Apply(plan)]
        }
        (PlanState::Applying(_), KeyCode::Esc) => {
            // It goes on; its progress shows in the footer.
            app.overlay = Overlay::None;
            Vec::new()
        }
        (PlanState::Applying(_), _) => Vec::new(),
        (_, KeyCode::Down | KeyCode::Char('j')) => {
            d.scroll = d.scroll.saturating_add(1);
            Vec::new()
        }
        (_, KeyCode::Up | KeyCode::Char('k')) => {
            d.scroll = d.scroll.saturating_sub(1);
            Vec::new()
        }
        (_, KeyCode::Esc | KeyCode::Enter | KeyCode::Char('n' | 'N' | 'q')) => {
            if let PlanState::Ready(p) = &d.state {
                app.message = Some(format!("not applied: {}", p.operation));
            }
            app.overlay = Overlay::None;
            Vec::new()
        }
        _ => Vec::new(),
    }
}

fn answer_key(app: &mut App, k: KeyEvent) -> Vec<Effect> {
    let Overlay::Answer(d) = &mut app.overlay else {
        return Vec::new();
    };
    if d.result.is_some() {
        if matches!(k.code, KeyCode::Esc | KeyCode::Enter) {
            app.overlay = Overlay::None;
        }
        return Vec::new();
    }
    match k.code {
        KeyCode::Esc => app.overlay = Overlay::None,
        KeyCode::Tab => {
            d.decision = if d.decision == "allow" {
                "deny"
            } else {
                "allow"
            }
        }
        KeyCode::Backspace => {
            d.note.pop();
        }
        KeyCode::Enter => {
            let note = d.note.trim();
            return vec![Effect::Answer {
                id: d.id,
                decision: d.decision.to_string(),
                note: (!note.is_empty()).then(|| note.to_string()),
            }];
        }
        KeyCode::Char(c) if !c.is_control() => d.note.push(c),
        _ => {}
    }
    Vec::new()
}

fn log_scroll(app: &mut App, code: KeyCode) {
    let logs = &mut app.logs;
    let max = logs.lines.len().saturating_sub(1);
    match code {
        KeyCode::Up | KeyCode::Char('k') => logs.back = (logs.back + 1).min(max),
        KeyCode::Down | KeyCode::Char('j') => logs.back = logs.back.saturating_sub(1),
        KeyCode::PageUp => logs.back = (logs.back + PAGE * 2).min(max),
        KeyCode::PageDown => logs.back = logs.back.saturating_sub(PAGE * 2),
        KeyCode::Home | KeyCode::Char('g') => logs.back = max,
        KeyCode::End | KeyCode::Char('G') => logs.back = 0,
        _ => {}
    }
    if logs.back == 0 {
        logs.unseen = 0;
    }
}

/// Keeps the cursor on a row.
fn clamp(app: &mut App) {
    let rows = app.visible().len();
    app.cursor = app.cursor.min(rows.saturating_sub(1));
}

/// When what the log pane should follow changed: a new generation, an empty pane,
/// and the effect that starts following it.
fn follow_if_changed(app: &mut App) -> Vec<Effect> {
    clamp(app);
    let wanted = app.wanted_logs();
    if wanted == app.logs.following {
        return Vec::new();
    }
    app.logs.generation += 1;
    app.logs.following = wanted.clone();
    app.logs.lines.clear();
    app.logs.back = 0;
    app.logs.unseen = 0;
    app.logs.error = None;
    vec![Effect::Follow {
        names: wanted,
        generation: app.logs.generation,
    }]
}

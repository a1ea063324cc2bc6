//! The terminal UI's state: what it shows (the last observation, the log pane, the
//! open questions), where the cursor is, and which overlay is open. Plain data: the
//! update function changes it, the components draw it; nothing here does IO.

use flotilla_api::sessions::QuestionDto;
use flotilla_model::status::{ComponentStatus, StatusReport};
use flotilla_plan::{Operation, Plan};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Where the data comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// This machine's inventory and state, observed here (like `flotilla status`).
    Local {
        /// The project.
        project: String,
    },
    /// The authority's view of its agents' reports (`GET /v1/status`).
    Server {
        /// The authority's URL.
        url: String,
    },
}

/// One observation: the status report and, from an authority, a line per host.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// The components' status, each signal with its evidence.
    pub report: StatusReport,
    /// Lines above the table: the selected revision and each host's observability
    /// (empty in local mode).
    pub notes: Vec<String>,
}

/// The dependency graph by component name: direct upstream (what it depends on) and
/// downstream (what depends on it), each in the topology's order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Graph {
    /// Name → what it depends on.
    pub upstream: BTreeMap<String, Vec<String>>,
    /// Name → what depends on it.
    pub downstream: BTreeMap<String, Vec<String>>,
}

/// Which list the cursor keys move in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Focus {
    /// The component table.
    Components,
    /// The questions pane (`--server`).
    Questions,
}

/// What a plan request came to.
#[derive(Debug, Clone, PartialEq)]
pub enum PlanState {
    /// Being computed (the same dry run as `flotilla start --dry-run`).
    Planning,
    /// Computed: shown and asked about.
    Ready(Plan),
    /// The planner refused: the CLI's text of it.
    Refused(String),
    /// Applying the plan: progress lines so far.
    Applying(Vec<String>),
    /// Finished: progress lines and the outcome's text; `ok` when it succeeded.
    Done {
        /// Progress and outcome, as the CLI prints them.
        lines: Vec<String>,
        /// Whether the operation succeeded.
        ok: bool,
    },
    /// It could not be planned or applied (lock held, stale plan, journal): the
    /// CLI's error text.
    Failed(String),
}

/// The plan dialog of `s`/`x`/`r`.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanDialog {
    /// The operation asked for.
    pub op: Operation,
    /// Where it is.
    pub state: PlanState,
    /// Lines scrolled past.
    pub scroll: u16,
}

/// The answer dialog of a question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnswerDialog {
    /// The question's id.
    pub id: u64,
    /// `allow` or `deny`.
    pub decision: &'static str,
    /// The note typed so far.
    pub note: String,
    /// Set once sent: the authority's answer or error.
    pub result: Option<Result<String, String>>,
}

/// What covers the main screen.
#[derive(Debug, Clone, PartialEq)]
pub enum Overlay {
    /// Nothing: the table over the log pane.
    None,
    /// `?`: every key.
    Help,
    /// `s`/`x`/`r`: the plan, asked about.
    Plan(PlanDialog),
    /// `e`: the selected row's evidence.
    Evidence {
        /// Lines scrolled past.
        scroll: u16,
    },
    /// `d`: the selected component's dependencies and dependents.
    Dependencies {
        /// Lines scrolled past.
        scroll: u16,
    },
    /// `l`: the log pane, full screen.
    Logs,
    /// Answering a question.
    Answer(AnswerDialog),
}

/// How many log lines the pane keeps.
pub const LOG_KEEP: usize = 5000;

/// The log pane: the followed components' lines, newest last.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogPane {
    /// The components followed.
    pub following: Vec<String>,
    /// Bumped at each change of what is followed: lines of an older follower are
    /// dropped.
    pub generation: u64,
    /// The lines (already prefixed and made printable), at most [`LOG_KEEP`].
    pub lines: VecDeque<String>,
    /// Lines scrolled back from the newest (0: following the end).
    pub back: usize,
    /// Lines that arrived while scrolled back.
    pub unseen: usize,
    /// Why the log cannot be read, when it cannot.
    pub error: Option<String>,
}

/// The whole state of the terminal UI.
#[derive(Debug, Clone)]
pub struct App {
    /// Local or `--server`.
    pub mode: Mode,
    /// The last observation, once there is one.
    pub snapshot: Option<Snapshot>,
    /// Why the last observation failed (the previous one stays shown).
    pub error: Option<String>,
    /// The dependency graph, when an inventory is loaded.
    pub graph: Option<Graph>,
    /// Whether `s`/`x`/`r` can plan (an inventory is loaded); else why not.
    pub can_operate: Result<(), String>,
    /// The cursor's row among the filtered components.
    pub cursor: usize,
    /// Components marked with space: the log pane follows them all.
    pub marked: BTreeSet<String>,
    /// The filter (`/`): a component is shown when a column contains it.
    pub filter: String,
    /// Whether keys are being typed into the filter.
    pub editing_filter: bool,
    /// What covers the screen.
    pub overlay: Overlay,
    /// Which list the cursor keys move.
    pub focus: Focus,
    /// The log pane.
    pub logs: LogPane,
    /// The open questions (`--server`; `None` in local mode).
    pub questions: Option<Vec<QuestionDto>>,
    /// The cursor in the questions pane.
    pub question_cursor: usize,
    /// A message for the footer (the last thing done, or why not).
    pub message: Option<String>,
    /// An operation is being applied.
    pub busy: bool,
    /// The UI should end.
    pub quit: bool,
}

impl App {
    /// A new UI in `mode`, nothing observed yet.
    pub fn new(mode: Mode, graph: Option<Graph>, can_operate: Result<(), String>) -> App {
        let questions = matches!(mode, Mode::Server { .. }).then(Vec::new);
        App {
            mode,
            snapshot: None,
            error: None,
            graph,
            can_operate,
            cursor: 0,
            marked: BTreeSet::new(),
            filter: String::new(),
            editing_filter: false,
            overlay: Overlay::None,
            focus: Focus::Components,
            logs: LogPane::default(),
            questions,
            question_cursor: 0,
            message: None,
            busy: false,
            quit: false,
        }
    }

    /// The components the filter lets through, in the report's (dependency) order.
    pub fn visible(&self) -> Vec<&ComponentStatus> {
        let Some(s) = &self.snapshot else {
            return Vec::new();
        };
        let needle = self.filter.to_lowercase();
        s.report
            .components
            .iter()
            .filter(|c| needle.is_empty() || matches_filter(c, &needle))
            .collect()
    }

    /// The component under the cursor.
    pub fn selected(&self) -> Option<&ComponentStatus> {
        self.visible().get(self.cursor).copied()
    }

    /// What the log pane should follow: the marked components, else the selected one.
    pub fn wanted_logs(&self) -> Vec<String> {
        if !self.marked.is_empty() {
            return self.marked.iter().cloned().collect();
        }
        self.selected()
            .map(|c| vec![c.name.clone()])
            .unwrap_or_default()
    }

    /// The question under the questions pane's cursor.
    pub fn selected_question(&self) -> Option<&QuestionDto> {
        self.questions.as_ref()?.get(self.question_cursor)
    }
}

/// Whether a column of `c` contains `needle` (lowercase).
fn matches_filter(c: &ComponentStatus, needle: &str) -> bool {
    use flotilla_exec::observe::value_name as name;
    [
        c.name.clone(),
        c.host.clone(),
        name(&c.lifecycle),
        name(&c.health),
        c.condition.as_str().to_string(),
    ]
    .iter()
    .any(|v| v.to_lowercase().contains(needle))
}

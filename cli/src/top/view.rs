//! The live view of `top`: what it draws, how keys change it, and the plain text of `--once`.
//!
//! Everything here is pure: the caller owns the terminal, the clock and the refreshes. The view
//! turns a [`Snapshot`] and a [`ViewState`] into a frame, and a key into an [`Action`]. The lists
//! it draws come from [`visible_semaphores`], [`visible_sessions`] and [`visible_resources`], so
//! the drawing and the tests see one ordering.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::time::Duration;

use ratatui::Frame;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, TableState};

use super::model::{ResourceRow, SemaphoreRow, SessionRow, Snapshot, UseRow, rfc3339};

/// The longest data shown on one line for a semaphore or an owner (the JSON view has all).
const DATA_SHOWN: usize = 80;

/// Rows PageUp and PageDown move the selection by.
const PAGE: usize = 10;
/// Notes shown in the footer at most; the rest are counted on the last line.
const MAX_NOTE_LINES: usize = 3;
/// Space between table columns.
const COLUMN_GAP: &str = "  ";

/// The list the view shows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Tab {
    /// Semaphores, with the owners and waiters of the selected one.
    #[default]
    Semaphores,
    /// Sessions.
    Sessions,
    /// Rate-limiter resources.
    Resources,
}

impl Tab {
    /// The tabs in the bar's order.
    const ALL: [Tab; 3] = [Tab::Semaphores, Tab::Sessions, Tab::Resources];

    /// The tab's name in the tab bar.
    fn title(self) -> &'static str {
        match self {
            Tab::Semaphores => "Semaphores",
            Tab::Sessions => "Sessions",
            Tab::Resources => "Resources",
        }
    }

    /// Where the tab is in the bar, from 0.
    fn index(self) -> usize {
        match self {
            Tab::Semaphores => 0,
            Tab::Sessions => 1,
            Tab::Resources => 2,
        }
    }

    /// The next one, round.
    fn next(self) -> Tab {
        Tab::ALL[(self.index() + 1) % Tab::ALL.len()]
    }

    /// The previous one, round.
    fn previous(self) -> Tab {
        Tab::ALL[(self.index() + Tab::ALL.len() - 1) % Tab::ALL.len()]
    }
}

/// How the semaphores are ordered. Numbers sort largest first, ties by name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum SemaphoreSort {
    /// By name, then node.
    #[default]
    Name,
    /// By units held.
    Held,
    /// By the number of waiters, then the units they ask for.
    Queue,
    /// By grants in the last minute.
    Grants,
    /// By how long the longest owner has held.
    LongestHeld,
}

impl SemaphoreSort {
    /// The next one, round.
    fn next(self) -> Self {
        match self {
            Self::Name => Self::Held,
            Self::Held => Self::Queue,
            Self::Queue => Self::Grants,
            Self::Grants => Self::LongestHeld,
            Self::LongestHeld => Self::Name,
        }
    }

    /// The name the header shows.
    fn label(self) -> &'static str {
        match self {
            Self::Name => "name",
            Self::Held => "held",
            Self::Queue => "queue",
            Self::Grants => "grants/min",
            Self::LongestHeld => "longest held",
        }
    }
}

/// How the sessions are ordered. Numbers sort largest first, ties by session id.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum SessionSort {
    /// By session id, then node.
    #[default]
    Id,
    /// By semaphores owned.
    Holds,
    /// By semaphores waited for.
    Waits,
    /// By description, the sessions without one last.
    Description,
}

impl SessionSort {
    /// The next one, round.
    fn next(self) -> Self {
        match self {
            Self::Id => Self::Holds,
            Self::Holds => Self::Waits,
            Self::Waits => Self::Description,
            Self::Description => Self::Id,
        }
    }

    /// The name the header shows.
    fn label(self) -> &'static str {
        match self {
            Self::Id => "session",
            Self::Holds => "holds",
            Self::Waits => "waits",
            Self::Description => "description",
        }
    }
}

/// How the resources are ordered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum ResourceSort {
    /// By path, then node.
    #[default]
    Path,
    /// By rate, largest first, inherited rates last.
    Rate,
}

impl ResourceSort {
    /// The next one, round.
    fn next(self) -> Self {
        match self {
            Self::Path => Self::Rate,
            Self::Rate => Self::Path,
        }
    }

    /// The name the header shows.
    fn label(self) -> &'static str {
        match self {
            Self::Path => "path",
            Self::Rate => "rate",
        }
    }
}

/// What the caller does after a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    /// Nothing changed.
    None,
    /// The state changed: draw again.
    Redraw,
    /// Leave the view.
    Quit,
    /// `D` on a semaphore: ask whether to force-delete it ([`ViewState::ask_delete`]).
    AskDelete,
    /// Confirmed: force-delete `name` on `node`.
    Delete { node: String, name: String },
}

/// A forced delete waiting for `y`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Confirm {
    pub(crate) node: String,
    pub(crate) name: String,
    /// The question, with what the delete would break.
    pub(crate) question: String,
}

/// What the user chose to see: the tab, the order, the filter, the selection, the pause.
#[derive(Debug, Clone, Default)]
pub(crate) struct ViewState {
    /// The list shown.
    pub(crate) tab: Tab,
    /// The order of the semaphores tab.
    pub(crate) semaphore_sort: SemaphoreSort,
    /// The order of the sessions tab.
    pub(crate) session_sort: SessionSort,
    /// The order of the resources tab.
    pub(crate) resource_sort: ResourceSort,
    /// The order is reversed.
    pub(crate) reversed: bool,
    /// Case-insensitive text the rows of the current tab must contain.
    pub(crate) filter: String,
    /// Keys go to the filter.
    pub(crate) typing: bool,
    /// Paused: the caller keeps drawing the snapshot it has instead of refreshing.
    pub(crate) paused: bool,
    /// The selected row of the current tab's list; [`draw`] clamps it to the list.
    pub(crate) selected: usize,
    /// The first row the table showed, so that it scrolls rather than jumps.
    offset: usize,
    /// A forced delete waiting for `y` (any other key cancels it).
    pub(crate) confirm: Option<Confirm>,
    /// A line for the footer, until the next key: what the last action did.
    pub(crate) message: Option<String>,
}

impl ViewState {
    /// Applies a key and says what the caller should do.
    ///
    /// `q`, Ctrl-C, and Esc without a filter quit; `p` or space pauses; `s` cycles the sort key
    /// and `r` reverses; `/` types the filter (Enter keeps it, Esc clears it, Ctrl-U empties
    /// it); arrows, `j`/`k`, PageUp/PageDown, Home/End and `g`/`G` move the selection; Tab,
    /// Shift-Tab and `1`-`3` pick the tab; Ctrl-L redraws. Key releases are ignored.
    pub(crate) fn on_key(&mut self, key: KeyEvent) -> Action {
        if key.kind == KeyEventKind::Release {
            return Action::None;
        }
        // The last action's line stays until the next key.
        self.message = None;
        if let Some(confirm) = self.confirm.take() {
            return match key.code {
                KeyCode::Char('y' | 'Y') => Action::Delete {
                    node: confirm.node,
                    name: confirm.name,
                },
                _ => {
                    self.message = Some("not deleted".to_string());
                    Action::Redraw
                }
            };
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        if ctrl {
            return match key.code {
                KeyCode::Char('c' | 'C') => Action::Quit,
                KeyCode::Char('l' | 'L') => Action::Redraw,
                KeyCode::Char('u' | 'U') if self.typing => {
                    self.set_filter(String::new());
                    Action::Redraw
                }
                _ => Action::None,
            };
        }
        if self.typing {
            return self.on_filter_key(key);
        }
        if let Some(action) = self.on_move_key(key) {
            return action;
        }
        match key.code {
            KeyCode::Char('q' | 'Q') => Action::Quit,
            KeyCode::Esc if self.filter.is_empty() => Action::Quit,
            KeyCode::Esc => {
                self.set_filter(String::new());
                Action::Redraw
            }
            KeyCode::Char('p' | ' ') => {
                self.paused = !self.paused;
                Action::Redraw
            }
            KeyCode::Char('s') => {
                match self.tab {
                    Tab::Semaphores => self.semaphore_sort = self.semaphore_sort.next(),
                    Tab::Sessions => self.session_sort = self.session_sort.next(),
                    Tab::Resources => self.resource_sort = self.resource_sort.next(),
                }
                Action::Redraw
            }
            KeyCode::Char('r') => {
                self.reversed = !self.reversed;
                Action::Redraw
            }
            KeyCode::Char('/') => {
                self.typing = true;
                Action::Redraw
            }
            KeyCode::Tab if key.modifiers.contains(KeyModifiers::SHIFT) => {
                self.set_tab(self.tab.previous())
            }
            KeyCode::Tab => self.set_tab(self.tab.next()),
            KeyCode::BackTab => self.set_tab(self.tab.previous()),
            KeyCode::Char('1') => self.set_tab(Tab::Semaphores),
            KeyCode::Char('2') => self.set_tab(Tab::Sessions),
            KeyCode::Char('3') => self.set_tab(Tab::Resources),
            KeyCode::Char('k') => self.select(self.selected.saturating_sub(1)),
            KeyCode::Char('j') => self.select(self.selected.saturating_add(1)),
            KeyCode::Char('g') => self.select(0),
            KeyCode::Char('G') => self.select(usize::MAX),
            KeyCode::Char('D') if self.tab == Tab::Semaphores => Action::AskDelete,
            _ => Action::None,
        }
    }

    /// After `D`: asks whether to force-delete the selected semaphore of `snapshot`, saying
    /// what that breaks; for an ephemeral one, which the server cannot delete, says who to
    /// stop instead.
    pub(crate) fn ask_delete(&mut self, snapshot: &Snapshot) {
        let rows = visible_semaphores(snapshot, self);
        let Some(s) = rows.get(self.selected) else {
            self.message = Some("no semaphore selected".to_string());
            return;
        };
        let holders: Vec<String> = s
            .owners
            .iter()
            .map(|o| {
                format!(
                    "session {}{}",
                    o.session_id,
                    who(snapshot, &s.node, o.session_id)
                )
            })
            .collect();
        if s.ephemeral {
            self.message = Some(format!(
                "{:?} is ephemeral: the server cannot delete it; it goes when its holders and \
                 waiters do ({}): stop them, or wait for their session timeout",
                clean(&s.name),
                if holders.is_empty() {
                    "none".to_string()
                } else {
                    holders.join(", ")
                }
            ));
            return;
        }
        self.confirm = Some(Confirm {
            node: s.node.clone(),
            name: s.name.clone(),
            question: format!(
                "force-delete {:?} on {}? {} owners (not told: {}), {} waiters (aborted). \
                 y deletes, any other key cancels",
                clean(&s.name),
                clean(&s.node),
                s.owners.len(),
                if holders.is_empty() {
                    "none".to_string()
                } else {
                    holders.join(", ")
                },
                s.waiters.len()
            ),
        });
    }

    /// A key while the filter is typed: text edits the filter, the arrows still move.
    fn on_filter_key(&mut self, key: KeyEvent) -> Action {
        if let Some(action) = self.on_move_key(key) {
            return action;
        }
        match key.code {
            KeyCode::Esc => {
                self.typing = false;
                self.set_filter(String::new());
                Action::Redraw
            }
            KeyCode::Enter => {
                self.typing = false;
                Action::Redraw
            }
            KeyCode::Backspace => {
                let mut filter = std::mem::take(&mut self.filter);
                filter.pop();
                self.set_filter(filter);
                Action::Redraw
            }
            KeyCode::Char(c) if !c.is_control() => {
                let mut filter = std::mem::take(&mut self.filter);
                filter.push(c);
                self.set_filter(filter);
                Action::Redraw
            }
            _ => Action::None,
        }
    }

    /// The movement keys that work in both modes (not the letters, which a filter may hold).
    fn on_move_key(&mut self, key: KeyEvent) -> Option<Action> {
        let to = match key.code {
            KeyCode::Up => self.selected.saturating_sub(1),
            KeyCode::Down => self.selected.saturating_add(1),
            KeyCode::PageUp => self.selected.saturating_sub(PAGE),
            KeyCode::PageDown => self.selected.saturating_add(PAGE),
            KeyCode::Home => 0,
            KeyCode::End => usize::MAX,
            _ => return None,
        };
        Some(self.select(to))
    }

    /// Moves the selection; [`draw`] clamps it to the list.
    fn select(&mut self, row: usize) -> Action {
        if row == self.selected {
            return Action::None;
        }
        self.selected = row;
        Action::Redraw
    }

    /// Shows another tab, from its first row.
    fn set_tab(&mut self, tab: Tab) -> Action {
        if tab == self.tab {
            return Action::None;
        }
        self.tab = tab;
        self.selected = 0;
        self.offset = 0;
        Action::Redraw
    }

    /// Replaces the filter; the selection goes back to the first row.
    fn set_filter(&mut self, filter: String) {
        self.filter = filter;
        self.selected = 0;
        self.offset = 0;
    }

    /// Keeps the selection (and the scroll) inside a list of `len` rows.
    fn clamp(&mut self, len: usize) {
        self.selected = self.selected.min(len.saturating_sub(1));
        self.offset = self.offset.min(self.selected);
    }

    /// The current tab's sort key, as the header shows it.
    fn sort_label(&self) -> &'static str {
        match self.tab {
            Tab::Semaphores => self.semaphore_sort.label(),
            Tab::Sessions => self.session_sort.label(),
            Tab::Resources => self.resource_sort.label(),
        }
    }
}

/// The semaphores the semaphores tab lists: those whose name holds the filter, in the chosen
/// order.
pub(crate) fn visible_semaphores<'a>(
    snapshot: &'a Snapshot,
    state: &ViewState,
) -> Vec<&'a SemaphoreRow> {
    let needle = state.filter.to_lowercase();
    let keep = |s: &SemaphoreRow| contains(&s.name, &needle);
    visible(&snapshot.semaphores, keep, state.reversed, |a, b| {
        let first = match state.semaphore_sort {
            SemaphoreSort::Name => Ordering::Equal,
            SemaphoreSort::Held => b.count.cmp(&a.count),
            SemaphoreSort::Queue => b
                .waiters
                .len()
                .cmp(&a.waiters.len())
                .then_with(|| b.queued_units().cmp(&a.queued_units())),
            SemaphoreSort::Grants => b.grants_per_minute.cmp(&a.grants_per_minute),
            SemaphoreSort::LongestHeld => longest_held(b).cmp(&longest_held(a)),
        };
        first
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| a.node.cmp(&b.node))
    })
}

/// The sessions the sessions tab lists: those whose id or description holds the filter, in the
/// chosen order.
pub(crate) fn visible_sessions<'a>(
    snapshot: &'a Snapshot,
    state: &ViewState,
) -> Vec<&'a SessionRow> {
    let needle = state.filter.to_lowercase();
    let keep = |s: &SessionRow| {
        contains(&s.session_id.to_string(), &needle)
            || contains(&s.description, &needle)
            || contains(&s.host, &needle)
            || contains(&s.tool, &needle)
    };
    visible(&snapshot.sessions, keep, state.reversed, |a, b| {
        let first = match state.session_sort {
            SessionSort::Id => Ordering::Equal,
            SessionSort::Holds => b.holds.cmp(&a.holds),
            SessionSort::Waits => b.waits.cmp(&a.waits),
            SessionSort::Description => (a.description.is_empty(), &a.description)
                .cmp(&(b.description.is_empty(), &b.description)),
        };
        first
            .then_with(|| a.session_id.cmp(&b.session_id))
            .then_with(|| a.node.cmp(&b.node))
    })
}

/// The resources the resources tab lists: those whose path holds the filter, in the chosen
/// order.
pub(crate) fn visible_resources<'a>(
    snapshot: &'a Snapshot,
    state: &ViewState,
) -> Vec<&'a ResourceRow> {
    let needle = state.filter.to_lowercase();
    let keep = |r: &ResourceRow| contains(&r.path, &needle);
    visible(&snapshot.resources, keep, state.reversed, |a, b| {
        let first = match state.resource_sort {
            ResourceSort::Path => Ordering::Equal,
            ResourceSort::Rate => match (a.rate, b.rate) {
                (Some(x), Some(y)) => y.total_cmp(&x),
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (None, None) => Ordering::Equal,
            },
        };
        first
            .then_with(|| a.path.cmp(&b.path))
            .then_with(|| a.node.cmp(&b.node))
    })
}

/// The rows `keep` takes, in `order` (or its reverse).
fn visible<T>(
    rows: &[T],
    keep: impl Fn(&T) -> bool,
    reversed: bool,
    order: impl Fn(&T, &T) -> Ordering,
) -> Vec<&T> {
    let mut out: Vec<&T> = rows.iter().filter(|r| keep(r)).collect();
    out.sort_by(|a, b| {
        let o = order(a, b);
        if reversed { o.reverse() } else { o }
    });
    out
}

/// The snapshot as plain text, for `top --once`: a header line, the nodes' health, then the
/// semaphores with their owners (who, since when, in a lock delay) and waiters, the sessions
/// (who they are, and what each holds and waits for), the resources and the notes. No
/// colours, no escape codes; sorted by name, session id and path.
pub(crate) fn text(snapshot: &Snapshot) -> String {
    let by_name = ViewState::default();
    let mut out = vec![header_counts(snapshot)];

    if !snapshot.nodes.is_empty() {
        out.push(String::new());
        out.push("NODES".to_string());
        let mut nodes = vec![vec![
            "NODE".to_string(),
            "RTT".to_string(),
            "ERRORS".to_string(),
            "LAST ERROR".to_string(),
        ]];
        for n in &snapshot.nodes {
            nodes.push(vec![
                clean(&n.path).into_owned(),
                n.rtt.map_or_else(|| "-".to_string(), rtt_text),
                n.errors.to_string(),
                n.last_error
                    .as_deref()
                    .map_or_else(String::new, |e| clean(e).into_owned()),
            ]);
        }
        out.extend(align(&nodes, &[false, true, true, false]));
    }

    let semaphores = visible_semaphores(snapshot, &by_name);
    let several = several_nodes(snapshot.semaphores.iter().map(|s| s.node.as_str()));
    out.push(String::new());
    out.push("SEMAPHORES".to_string());
    if semaphores.is_empty() {
        out.push("(none)".to_string());
    } else {
        let mut table = Vec::new();
        let mut header = vec!["NAME"];
        if several {
            header.push("NODE");
        }
        header.extend(["LIMIT", "COUNT", "QUEUE", "GRANTS/MIN"]);
        table.push(header.into_iter().map(String::from).collect::<Vec<_>>());
        // One aligned block for all owner and waiter lines, so their columns line up too.
        let mut details = Vec::new();
        let mut detail_counts = Vec::new();
        for s in &semaphores {
            let mut row = vec![clean(&s.name).into_owned()];
            if several {
                row.push(clean(&s.node).into_owned());
            }
            row.extend([
                units(s.limit),
                units(s.count),
                s.waiters.len().to_string(),
                s.grants_per_minute.to_string(),
            ]);
            table.push(row);
            for o in &s.owners {
                let mut line = vec![
                    "owner".to_string(),
                    format!("session {}", o.session_id),
                    format!("units {}", units(o.count)),
                    format!("held {}", format_duration(o.held_for, o.exact)),
                    format!("token {}", o.fencing_token),
                ];
                if let Some(t) = o.granted_ms {
                    line.push(format!("since {}", rfc3339(t)));
                }
                let by = who(snapshot, &s.node, o.session_id);
                if !by.is_empty() {
                    line.push(by.trim_start().to_string());
                }
                if let Some(until) = o.delay_until_ms {
                    line.push(format!("in lock delay until {}", rfc3339(until)));
                }
                if !o.data.is_empty() {
                    line.push(format!("data {}", shown_data(&o.data)));
                }
                details.push(line);
            }
            for w in &s.waiters {
                let mut line = vec![
                    "waiter".to_string(),
                    format!("session {}", w.session_id),
                    format!("units {}", units(w.count)),
                    format!("waiting {}", format_duration(w.waiting_for, w.exact)),
                ];
                let by = who(snapshot, &s.node, w.session_id);
                if !by.is_empty() {
                    line.push(by.trim_start().to_string());
                }
                details.push(line);
            }
            detail_counts.push(s.owners.len() + s.waiters.len());
        }
        let numeric_from = if several { 2 } else { 1 };
        let right: Vec<bool> = (0..table[0].len()).map(|i| i >= numeric_from).collect();
        let mut table = align(&table, &right).into_iter();
        let mut details = align(&details, &[]).into_iter();
        out.extend(table.next());
        for (row, count) in table.zip(detail_counts) {
            out.push(row);
            out.extend(details.by_ref().take(count).map(|d| format!("  {d}")));
        }
    }

    let sessions = visible_sessions(snapshot, &by_name);
    let rows = sessions.iter().map(|s| TextRow {
        head: s.session_id.to_string(),
        node: s.node.as_str(),
        cells: session_cells(s).into(),
        details: s.uses.iter().map(use_line).collect(),
    });
    plain_table(
        &mut out,
        "SESSIONS",
        ("SESSION", true),
        &SESSION_COLUMNS,
        rows.collect(),
    );

    let resources = visible_resources(snapshot, &by_name);
    let rows = resources.iter().map(|r| TextRow {
        head: clean(&r.path).into_owned(),
        node: r.node.as_str(),
        cells: vec![rate_text(r.rate)],
        details: Vec::new(),
    });
    let columns = [("RATE", true)];
    plain_table(
        &mut out,
        "RESOURCES",
        ("PATH", false),
        &columns,
        rows.collect(),
    );

    if !snapshot.notes.is_empty() {
        out.push(String::new());
        out.push("NOTES".to_string());
        out.extend(snapshot.notes.iter().map(|n| clean(n).into_owned()));
    }

    let mut text = out.join("\n");
    text.push('\n');
    text
}

/// The columns of [`session_cells`], and whether each is a number (aligned right).
const SESSION_COLUMNS: [(&str, bool); 10] = [
    ("HOST", false),
    ("PID", true),
    ("TOOL", false),
    ("AGE", true),
    ("TIMEOUT", true),
    ("CONTACT", true),
    ("HOLDS", true),
    ("WAITS", true),
    ("ANNOUNCED", false),
    ("DESCRIPTION", false),
];

/// The cells of a session after its id (and node): host, pid, program, age, timeout, last
/// contact, holds, waits, whether it announces, description.
fn session_cells(s: &SessionRow) -> [String; 10] {
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".to_string());
    [
        or_dash((!s.host.is_empty()).then(|| clean(&s.host).into_owned())),
        or_dash(s.pid.map(|p| p.to_string())),
        or_dash((!s.tool.is_empty()).then(|| clean(&s.tool).into_owned())),
        or_dash(s.age.map(|d| format_duration(d, true))),
        or_dash(s.timeout.map(|d| format_duration(d, true))),
        or_dash(
            s.contact
                .map(|d| format!("{} ago", format_duration(d, true))),
        ),
        s.holds.to_string(),
        s.waits.to_string(),
        yes_no(s.announced).to_string(),
        clean(&s.description).into_owned(),
    ]
}

/// One line of a session's drill-down: what it holds or waits for.
fn use_line(u: &UseRow) -> Vec<String> {
    let what = if u.held { "holds" } else { "waits for" };
    let mut line = vec![
        what.to_string(),
        clean(&u.name).into_owned(),
        format!("units {}", units(u.count)),
    ];
    match u.position {
        Some(p) => line.push(format!(
            "waiting {}, place {p} in the queue",
            format_duration(u.since, u.exact)
        )),
        None => line.push(format!("held {}", format_duration(u.since, u.exact))),
    }
    line
}

/// Who session `id` on `node` is, as its announcement says (` host pid 42 tool`), or
/// nothing.
fn who(snapshot: &Snapshot, node: &str, id: u64) -> String {
    let Some(s) = snapshot
        .sessions
        .iter()
        .find(|s| s.session_id == id && s.node == node)
    else {
        return String::new();
    };
    let mut out = String::new();
    if !s.host.is_empty() {
        out.push_str(&format!(" host {}", clean(&s.host)));
    }
    if let Some(pid) = s.pid {
        out.push_str(&format!(" pid {pid}"));
    }
    if !s.tool.is_empty() {
        out.push_str(&format!(" {}", clean(&s.tool)));
    }
    out
}

/// A round trip: `850µs`, `1.2ms`, `35ms`, `1.5s`.
fn rtt_text(d: Duration) -> String {
    let micros = d.as_micros();
    if micros < 1000 {
        format!("{micros}µs")
    } else if micros < 10_000 {
        format!("{:.1}ms", d.as_secs_f64() * 1000.0)
    } else if micros < 1_000_000 {
        format!("{}ms", d.as_millis())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// Data for one line of a table: text (lossy), line breaks as spaces, cut (the JSON view
/// has it whole, with its hex).
fn shown_data(data: &[u8]) -> String {
    let s = String::from_utf8_lossy(data);
    let mut out: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(DATA_SHOWN)
        .collect();
    if s.chars().count() > DATA_SHOWN {
        out.push('…');
    }
    out
}

/// A titled table of `text()`: the first column, a NODE column when the rows are on several
/// nodes, then `columns` (`true`: right-aligned); `(none)` without rows. Each row may have
/// detail lines under it, indented, aligned with all the others.
fn plain_table(
    out: &mut Vec<String>,
    title: &str,
    first: (&str, bool),
    columns: &[(&str, bool)],
    rows: Vec<TextRow<'_>>,
) {
    out.push(String::new());
    out.push(title.to_string());
    if rows.is_empty() {
        out.push("(none)".to_string());
        return;
    }
    let nodes = several_nodes(rows.iter().map(|r| r.node));
    let mut header = vec![first];
    if nodes {
        header.push(("NODE", false));
    }
    header.extend_from_slice(columns);
    let right: Vec<bool> = header.iter().map(|(_, r)| *r).collect();
    let mut table = vec![
        header
            .iter()
            .map(|(h, _)| h.to_string())
            .collect::<Vec<_>>(),
    ];
    let mut details = Vec::new();
    let mut counts = Vec::new();
    for r in rows {
        let mut row = vec![r.head];
        if nodes {
            row.push(clean(r.node).into_owned());
        }
        row.extend(r.cells);
        table.push(row);
        counts.push(r.details.len());
        details.extend(r.details);
    }
    let mut table = align(&table, &right).into_iter();
    let mut details = align(&details, &[]).into_iter();
    out.extend(table.next());
    for (row, count) in table.zip(counts) {
        out.push(row);
        out.extend(details.by_ref().take(count).map(|d| format!("  {d}")));
    }
}

/// A row of [`plain_table`].
struct TextRow<'a> {
    head: String,
    node: &'a str,
    cells: Vec<String>,
    details: Vec<Vec<String>>,
}

/// Draws the whole view into the frame. `state` is mutable only to keep the selection and the
/// scroll inside the list.
pub(crate) fn draw(frame: &mut Frame<'_>, snapshot: &Snapshot, state: &mut ViewState) {
    let area = frame.area();
    // Rows from the top: header, tab bar; from the bottom: help, notes; the list gets the rest.
    // Computed by hand so that a tiny terminal loses the list first, then the notes.
    let mut rest = area;
    let header = take_top(&mut rest, 1);
    let tabs = take_top(&mut rest, 1);
    let help = take_bottom(&mut rest, 1);
    let note_lines = snapshot.notes.len().min(MAX_NOTE_LINES);
    let note_height = to_u16(note_lines).min(rest.height / 2);
    let notes = take_bottom(&mut rest, note_height);
    let main = rest;

    let shown = match state.tab {
        Tab::Semaphores => visible_semaphores(snapshot, state).len(),
        Tab::Sessions => visible_sessions(snapshot, state).len(),
        Tab::Resources => visible_resources(snapshot, state).len(),
    };
    let header_line = header_line(snapshot, state, shown);
    frame.render_widget(Paragraph::new(header_line), header);
    frame.render_widget(Paragraph::new(tab_line(state.tab)), tabs);
    match state.tab {
        Tab::Semaphores => draw_semaphores(frame, main, snapshot, state),
        Tab::Sessions => draw_sessions(frame, main, snapshot, state),
        Tab::Resources => draw_resources(frame, main, snapshot, state),
    }
    frame.render_widget(
        Paragraph::new(note_lines_for(snapshot, notes.height)),
        notes,
    );
    frame.render_widget(Paragraph::new(help_line(state)), help);
}

/// The header: target, counts, pause, sort key and the filter with how many rows it lets through
/// (`shown`).
fn header_line(snapshot: &Snapshot, state: &ViewState, shown: usize) -> Line<'static> {
    let mut spans = vec![
        Span::styled(
            clean(&snapshot.target).into_owned(),
            Style::new().add_modifier(Modifier::BOLD),
        ),
        Span::raw(format!(
            "  {} semaphores  {} sessions  {} resources  {}",
            snapshot.semaphores.len(),
            snapshot.sessions.len(),
            snapshot.resources.len(),
            health(snapshot)
        )),
    ];
    if !snapshot.complete {
        spans.push(Span::raw("  "));
        spans.push(Span::styled(
            "INCOMPLETE",
            Style::new().fg(Color::Black).bg(Color::Red),
        ));
    }
    if state.paused {
        spans.push(Span::raw("  "));
        spans.push(Span::styled(
            "PAUSED",
            Style::new()
                .fg(Color::Black)
                .bg(Color::Yellow)
                .add_modifier(Modifier::BOLD),
        ));
    }
    let reversed = if state.reversed { ", reversed" } else { "" };
    spans.push(Span::raw(format!(
        "  sort: {}{reversed}",
        state.sort_label()
    )));
    if state.typing || !state.filter.is_empty() {
        spans.push(Span::raw("  filter: "));
        spans.push(Span::styled(
            clean(&state.filter).into_owned(),
            Style::new().add_modifier(Modifier::BOLD),
        ));
        if state.typing {
            spans.push(Span::styled(
                "_",
                Style::new().add_modifier(Modifier::SLOW_BLINK),
            ));
        }
        spans.push(Span::raw(format!(" ({shown} shown)")));
    }
    Line::from(spans)
}

/// `1 Semaphores  2 Sessions  3 Resources`, the current one highlighted.
fn tab_line(current: Tab) -> Line<'static> {
    let mut spans = Vec::new();
    for tab in Tab::ALL {
        if !spans.is_empty() {
            spans.push(Span::raw("  "));
        }
        let label = format!("{} {}", tab.index() + 1, tab.title());
        let style = if tab == current {
            Style::new().add_modifier(Modifier::BOLD | Modifier::REVERSED)
        } else {
            Style::new()
        };
        spans.push(Span::styled(label, style));
    }
    Line::from(spans)
}

/// The keys (those of the filter while it is typed), or the question of a forced delete, or
/// what the last action did.
fn help_line(state: &ViewState) -> Line<'static> {
    if let Some(confirm) = &state.confirm {
        return Line::styled(
            confirm.question.clone(),
            Style::new()
                .fg(Color::Black)
                .bg(Color::Yellow)
                .add_modifier(Modifier::BOLD),
        );
    }
    if let Some(message) = &state.message {
        return Line::styled(
            clean(message).into_owned(),
            Style::new().add_modifier(Modifier::BOLD),
        );
    }
    let help = if state.typing {
        "filter: type to narrow  Enter keep  Esc clear  ↑↓ select  Ctrl-C quit"
    } else if state.tab == Tab::Semaphores {
        "q quit  p pause  s sort  r reverse  / filter  ↑↓ PgUp PgDn select  D delete  Tab 1-3 view"
    } else {
        "q quit  p pause  s sort  r reverse  / filter  ↑↓ PgUp PgDn select  Tab 1-3 view"
    };
    Line::styled(help, Style::new().add_modifier(Modifier::DIM))
}

/// The notes that fit in `height` lines; the last line counts those that do not.
fn note_lines_for(snapshot: &Snapshot, height: u16) -> Vec<Line<'static>> {
    let height = usize::from(height);
    let style = Style::new().fg(Color::Yellow);
    let notes = &snapshot.notes;
    if notes.len() <= height {
        return notes
            .iter()
            .map(|n| Line::styled(clean(n).into_owned(), style))
            .collect();
    }
    if height == 0 {
        return Vec::new();
    }
    let mut lines: Vec<Line<'static>> = notes[..height - 1]
        .iter()
        .map(|n| Line::styled(clean(n).into_owned(), style))
        .collect();
    lines.push(Line::styled(
        format!(
            "… {} more notes (top --once shows them all)",
            notes.len() - (height - 1)
        ),
        style,
    ));
    lines
}

/// The semaphores tab: the table, and below it the detail pane of the selected semaphore.
fn draw_semaphores(frame: &mut Frame<'_>, area: Rect, snapshot: &Snapshot, state: &mut ViewState) {
    let rows = visible_semaphores(snapshot, state);
    state.clamp(rows.len());
    let nodes = several_nodes(snapshot.semaphores.iter().map(|s| s.node.as_str()));

    // The table gets three fifths, the detail pane the rest; too short for both, only the table.
    let mut table_area = area;
    let detail_area = if area.height >= 8 {
        take_bottom(&mut table_area, area.height * 2 / 5)
    } else {
        Rect::default()
    };

    let mut header = vec![("NAME", false)];
    if nodes {
        header.push(("NODE", false));
    }
    header.extend([
        ("LIMIT", true),
        ("HELD", true),
        ("QUEUE", true),
        ("GRANTS/MIN", true),
        ("OWNERS", false),
    ]);
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|s| {
            let mut row = vec![clean(&s.name).into_owned()];
            if nodes {
                row.push(clean(&s.node).into_owned());
            }
            row.extend([
                units(s.limit),
                units(s.count),
                s.waiters.len().to_string(),
                s.grants_per_minute.to_string(),
                owners_summary(s),
            ]);
            row
        })
        .collect();
    let queued = Style::new().fg(Color::Yellow);
    let styles: Vec<Style> = rows
        .iter()
        .map(|s| {
            if s.waiters.is_empty() {
                Style::new()
            } else {
                queued
            }
        })
        .collect();
    let empty = if snapshot.semaphores.is_empty() {
        "no semaphore in use"
    } else {
        "no semaphore name matches the filter"
    };
    draw_table(frame, table_area, state, &header, cells, &styles, empty);

    if detail_area.height > 0
        && let Some(selected) = rows.get(state.selected)
    {
        draw_detail(frame, detail_area, snapshot, selected, nodes);
    }
}

/// The sessions tab: the table, and below it what the selected session holds and waits for.
fn draw_sessions(frame: &mut Frame<'_>, area: Rect, snapshot: &Snapshot, state: &mut ViewState) {
    let rows = visible_sessions(snapshot, state);
    state.clamp(rows.len());
    let nodes = several_nodes(snapshot.sessions.iter().map(|s| s.node.as_str()));
    let mut table_area = area;
    let detail_area = if area.height >= 8 {
        take_bottom(&mut table_area, area.height * 2 / 5)
    } else {
        Rect::default()
    };
    let mut header = vec![("SESSION", true)];
    if nodes {
        header.push(("NODE", false));
    }
    header.extend(SESSION_COLUMNS);
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|s| {
            let mut row = vec![s.session_id.to_string()];
            if nodes {
                row.push(clean(&s.node).into_owned());
            }
            row.extend(session_cells(s));
            row
        })
        .collect();
    let styles: Vec<Style> = rows
        .iter()
        .map(|s| {
            if s.waits > 0 {
                Style::new().fg(Color::Yellow)
            } else {
                Style::new()
            }
        })
        .collect();
    let empty = if snapshot.sessions.is_empty() {
        "no sessions"
    } else {
        "no session id, host, program or description matches the filter"
    };
    draw_table(frame, table_area, state, &header, cells, &styles, empty);

    if detail_area.height > 0
        && let Some(selected) = rows.get(state.selected)
    {
        let title = format!(" session {} ", selected.session_id);
        let block = Block::new().borders(Borders::TOP).title(Span::styled(
            title,
            Style::new().add_modifier(Modifier::BOLD),
        ));
        let inner = block.inner(detail_area);
        frame.render_widget(block, detail_area);
        let lines: Vec<Line<'static>> = if selected.uses.is_empty() {
            vec![Line::styled(
                "holds and waits for nothing top describes",
                Style::new().add_modifier(Modifier::DIM),
            )]
        } else {
            let uses: Vec<Vec<String>> = selected.uses.iter().map(use_line).collect();
            align(&uses, &[]).into_iter().map(Line::raw).collect()
        };
        frame.render_widget(Paragraph::new(lines), inner);
    }
}

/// The resources tab.
fn draw_resources(frame: &mut Frame<'_>, area: Rect, snapshot: &Snapshot, state: &mut ViewState) {
    let rows = visible_resources(snapshot, state);
    state.clamp(rows.len());
    let nodes = several_nodes(snapshot.resources.iter().map(|r| r.node.as_str()));
    let mut header = vec![("PATH", false)];
    if nodes {
        header.push(("NODE", false));
    }
    header.push(("RATE", true));
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut row = vec![clean(&r.path).into_owned()];
            if nodes {
                row.push(clean(&r.node).into_owned());
            }
            row.push(rate_text(r.rate));
            row
        })
        .collect();
    let styles = vec![Style::new(); rows.len()];
    let empty = if snapshot.resources.is_empty() {
        "no rate-limiter resources"
    } else {
        "no resource path matches the filter"
    };
    draw_table(frame, area, state, &header, cells, &styles, empty);
}

/// Draws one list as a table: `header` names the columns and says which are numbers (aligned
/// right); the last column takes the width left over.
fn draw_table(
    frame: &mut Frame<'_>,
    area: Rect,
    state: &mut ViewState,
    header: &[(&str, bool)],
    cells: Vec<Vec<String>>,
    styles: &[Style],
    empty: &str,
) {
    let last = header.len().saturating_sub(1);
    let widths: Vec<Constraint> = header
        .iter()
        .enumerate()
        .map(|(i, (title, _))| {
            if i == last {
                return Constraint::Fill(1);
            }
            let widest = cells
                .iter()
                .filter_map(|row| row.get(i))
                .map(|c| Span::raw(c.as_str()).width())
                .max()
                .unwrap_or(0)
                .max(title.len());
            // Names may be long: cap them so that the numbers stay on screen.
            Constraint::Length(to_u16(widest.min(40)))
        })
        .collect();
    let cell = |text: String, right: bool| {
        let line = Line::from(text);
        Cell::from(if right { line.right_aligned() } else { line })
    };
    let header_row = Row::new(
        header
            .iter()
            .map(|(title, right)| cell((*title).to_string(), *right)),
    )
    .style(Style::new().add_modifier(Modifier::BOLD));
    let len = cells.len();
    let rows: Vec<Row<'static>> = cells
        .into_iter()
        .zip(
            styles
                .iter()
                .copied()
                .chain(std::iter::repeat(Style::new())),
        )
        .map(|(row, style)| {
            Row::new(
                row.into_iter()
                    .zip(header.iter())
                    .map(|(text, (_, right))| cell(text, *right)),
            )
            .style(style)
        })
        .collect();
    let table = Table::new(rows, widths)
        .header(header_row)
        .column_spacing(to_u16(COLUMN_GAP.len()))
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED));
    let mut table_state = TableState::new()
        .with_offset(state.offset)
        .with_selected((len > 0).then_some(state.selected));
    frame.render_stateful_widget(table, area, &mut table_state);
    state.offset = table_state.offset();

    if len == 0 {
        let mut below = area;
        take_top(&mut below, 1);
        let message = Line::styled(empty.to_string(), Style::new().add_modifier(Modifier::DIM));
        frame.render_widget(Paragraph::new(message), below);
    }
}

/// The detail pane: every owner and waiter of one semaphore, in the server's order, cut with a
/// count of the rest when they do not fit.
fn draw_detail(
    frame: &mut Frame<'_>,
    area: Rect,
    snapshot: &Snapshot,
    semaphore: &SemaphoreRow,
    nodes: bool,
) {
    let title = if nodes {
        format!(" {} on {} ", clean(&semaphore.name), clean(&semaphore.node))
    } else {
        format!(" {} ", clean(&semaphore.name))
    };
    let block = Block::new().borders(Borders::TOP).title(Span::styled(
        title,
        Style::new().add_modifier(Modifier::BOLD),
    ));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let lines = detail_lines(snapshot, semaphore, usize::from(inner.height));
    frame.render_widget(Paragraph::new(lines), inner);
}

/// The lines of the detail pane, at most `height`: a summary, the owners, then the waiters,
/// each with who its session is (from `snapshot`).
fn detail_lines(snapshot: &Snapshot, s: &SemaphoreRow, height: usize) -> Vec<Line<'static>> {
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let dim = Style::new().add_modifier(Modifier::DIM);

    let mut summary = format!(
        "limit {}  held {}  queue {} ({} units)  grants/min {}",
        units(s.limit),
        units(s.count),
        s.waiters.len(),
        units(s.queued_units()),
        s.grants_per_minute
    );
    if s.ephemeral {
        summary.push_str("  ephemeral");
    }
    if !s.data.is_empty() {
        summary.push_str("  data ");
        summary.push_str(&clean(&shown_data(&s.data)));
    }

    let owners_label = format!("OWNERS {}", s.owners.len());
    let waiters_label = format!("WAITERS {}", s.waiters.len());
    let label_width = owners_label.len().max(waiters_label.len());

    let mut owners = vec![vec![
        owners_label,
        "SESSION".to_string(),
        "UNITS".to_string(),
        "HELD".to_string(),
        "TOKEN".to_string(),
        "WHO".to_string(),
        "DATA".to_string(),
    ]];
    let now = snapshot.time_ms;
    owners.extend(s.owners.iter().map(|o| {
        let mut held = format_duration(o.held_for, o.exact);
        if let Some(until) = o.delay_until_ms {
            let left = Duration::from_millis(until.saturating_sub(now));
            held.push_str(&format!(
                " (lock delay, {} left)",
                format_duration(left, true)
            ));
        }
        vec![
            String::new(),
            o.session_id.to_string(),
            units(o.count),
            held,
            o.fencing_token.to_string(),
            who(snapshot, &s.node, o.session_id)
                .trim_start()
                .to_string(),
            clean(&shown_data(&o.data)).into_owned(),
        ]
    }));
    let mut waiters = vec![vec![
        waiters_label,
        "SESSION".to_string(),
        "UNITS".to_string(),
        "WAITING".to_string(),
        "WHO".to_string(),
    ]];
    waiters.extend(s.waiters.iter().enumerate().map(|(i, w)| {
        vec![
            format!("{}.", i + 1),
            w.session_id.to_string(),
            units(w.count),
            format_duration(w.waiting_for, w.exact),
            who(snapshot, &s.node, w.session_id)
                .trim_start()
                .to_string(),
        ]
    }));
    for table in [&mut owners, &mut waiters] {
        if let Some(label) = table.first_mut().and_then(|row| row.first_mut()) {
            *label = format!("{label:<label_width$}");
        }
    }
    let owners = align(&owners, &[false, true, true, false, true, false, false]);
    let waiters = align(&waiters, &[true, true, true, false, false]);

    // The two section headers first, then the summary unless space is short (the table's row
    // says most of it); the rows share what is left, at least half each when both are too
    // long, so that the queue stays in sight.
    let (owner_rows, waiter_rows) = (owners.len() - 1, waiters.len() - 1);
    let with_summary = height >= 6 || height >= 3 + owner_rows + waiter_rows;
    let body = height.saturating_sub(2 + usize::from(with_summary));
    let show_waiters = waiter_rows.min(body.div_ceil(2).max(body.saturating_sub(owner_rows)));
    let show_owners = owner_rows.min(body - show_waiters);

    let mut lines = Vec::new();
    if with_summary {
        lines.push(Line::raw(summary));
    }
    let mut section = |rows: Vec<String>, shown: usize, what: &str, empty: &str| {
        let mut rows = rows.into_iter();
        let total = rows.len() - 1;
        if total == 0 {
            lines.push(Line::styled(empty.to_string(), dim));
            return;
        }
        lines.extend(rows.next().map(|h| Line::styled(h, bold)));
        // Cut: the last line that fits counts the rest, unless it is the only one (the
        // header has the count).
        if shown < total && shown > 1 {
            lines.extend(rows.by_ref().take(shown - 1).map(Line::raw));
            let more = total - (shown - 1);
            lines.push(Line::styled(format!("… {more} more {what}"), dim));
        } else {
            lines.extend(rows.take(shown).map(Line::raw));
        }
    };
    section(owners, show_owners, "owners", "no owners");
    section(waiters, show_waiters, "waiters", "no waiters");
    lines.truncate(height);
    lines
}

/// The first owner of a semaphore (session, units, held for) and how many more there are.
fn owners_summary(s: &SemaphoreRow) -> String {
    let Some(first) = s.owners.first() else {
        return String::new();
    };
    let mut summary = format!(
        "{} x{} {}",
        first.session_id,
        units(first.count),
        format_duration(first.held_for, first.exact)
    );
    if s.owners.len() > 1 {
        summary.push_str(&format!(" +{}", s.owners.len() - 1));
    }
    summary
}

/// A number of units: `max` for the most a semaphore has (an exclusive lock of an
/// ephemeral semaphore takes them all).
fn units(n: u64) -> String {
    if n == u64::MAX {
        "max".to_string()
    } else {
        n.to_string()
    }
}

/// A duration as the view shows it: `850ms`, `12s`, `3m04s`, `2h05m`; with `≥` in front when it
/// is a lower bound.
pub(crate) fn format_duration(d: Duration, exact: bool) -> String {
    let at_least = if exact { "" } else { "≥" };
    let secs = d.as_secs();
    if secs < 1 {
        format!("{at_least}{}ms", d.subsec_millis())
    } else if secs < 60 {
        format!("{at_least}{secs}s")
    } else if secs < 3600 {
        format!("{at_least}{}m{:02}s", secs / 60, secs % 60)
    } else {
        format!("{at_least}{}h{:02}m", secs / 3600, secs % 3600 / 60)
    }
}

/// A resource's rate, or `inherited`.
fn rate_text(rate: Option<f64>) -> String {
    rate.map_or_else(|| "inherited".to_string(), per_second)
}

/// Units per second with at most three significant-looking digits after the point: `20/s`,
/// `2.5/s`, `0.33/s`.
fn per_second(units: f64) -> String {
    let decimals = if units.abs() >= 100.0 {
        0
    } else if units.abs() >= 10.0 {
        1
    } else {
        2
    };
    let mut number = format!("{units:.decimals$}");
    if number.contains('.') {
        let trimmed = number.trim_end_matches('0').trim_end_matches('.').len();
        number.truncate(trimmed);
    }
    format!("{number}/s")
}

/// `yes` or `no`.
fn yes_no(value: bool) -> &'static str {
    if value { "yes" } else { "no" }
}

/// The first line of [`text`]: the target and the counts.
fn header_counts(snapshot: &Snapshot) -> String {
    format!(
        "{}: {} semaphores, {} sessions, {} resources at {}{}",
        clean(&snapshot.target),
        snapshot.semaphores.len(),
        snapshot.sessions.len(),
        snapshot.resources.len(),
        rfc3339(snapshot.time_ms),
        if snapshot.complete {
            ""
        } else {
            " (incomplete: see the notes)"
        }
    )
}

/// The health of the nodes in a few words: the round trip of the last read (the slowest
/// node's), and the reads that failed.
fn health(snapshot: &Snapshot) -> String {
    let rtt = snapshot.nodes.iter().filter_map(|n| n.rtt).max();
    let errors: u64 = snapshot.nodes.iter().map(|n| n.errors).sum();
    let rtt = rtt.map_or_else(|| "-".to_string(), rtt_text);
    if snapshot.nodes.len() > 1 {
        format!(
            "{} nodes, rtt ≤ {rtt}, {errors} errors",
            snapshot.nodes.len()
        )
    } else {
        format!("rtt {rtt}, {errors} errors")
    }
}

/// The longest time any owner of the semaphore has held it.
fn longest_held(s: &SemaphoreRow) -> Duration {
    s.owners
        .iter()
        .map(|o| o.held_for)
        .max()
        .unwrap_or_default()
}

/// Whether `haystack` holds `needle`, ignoring case; `needle` is already lower case.
fn contains(haystack: &str, needle: &str) -> bool {
    needle.is_empty() || haystack.to_lowercase().contains(needle)
}

/// More than one distinct node: the lists then show which node each row is on.
fn several_nodes<'a>(nodes: impl Iterator<Item = &'a str>) -> bool {
    nodes.collect::<BTreeSet<_>>().len() > 1
}

/// Text from the server (names, data, descriptions) with control characters replaced, so that
/// none can move the cursor or colour the terminal.
fn clean(s: &str) -> Cow<'_, str> {
    if s.chars().any(unsafe_to_show) {
        Cow::Owned(
            s.chars()
                .map(|c| if unsafe_to_show(c) { '?' } else { c })
                .collect(),
        )
    } else {
        Cow::Borrowed(s)
    }
}

/// Control characters, and format characters (Unicode category Cf: bidirectional marks,
/// embeddings, overrides and isolates, zero-width joiners, …) with which server data could
/// reorder or hide the text around it.
fn unsafe_to_show(c: char) -> bool {
    c.is_control() || is_format(c)
}

/// Whether `c` is of Unicode general category Cf (format), as of Unicode 15.
fn is_format(c: char) -> bool {
    matches!(
        u32::from(c),
        0x00AD
            | 0x0600..=0x0605
            | 0x061C
            | 0x06DD
            | 0x070F
            | 0x0890..=0x0891
            | 0x08E2
            | 0x180E
            | 0x200B..=0x200F
            | 0x202A..=0x202E
            | 0x2060..=0x2064
            | 0x2066..=0x206F
            | 0xFEFF
            | 0xFFF9..=0xFFFB
            | 0x110BD
            | 0x110CD
            | 0x13430..=0x1343F
            | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A
            | 0xE0001
            | 0xE0020..=0xE007F
    )
}

/// Pads the cells of each row to the widest cell of their column (right-aligned where `right`
/// says so), joins them with two spaces and trims the end. Rows may have fewer cells.
fn align(rows: &[Vec<String>], right: &[bool]) -> Vec<String> {
    let width = |s: &str| Span::raw(s).width();
    let mut widths: Vec<usize> = Vec::new();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i == widths.len() {
                widths.push(0);
            }
            widths[i] = widths[i].max(width(cell));
        }
    }
    rows.iter()
        .map(|row| {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                if i > 0 {
                    line.push_str(COLUMN_GAP);
                }
                let pad = " ".repeat(widths[i].saturating_sub(width(cell)));
                if right.get(i).copied().unwrap_or(false) {
                    line.push_str(&pad);
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    line.push_str(&pad);
                }
            }
            line.truncate(line.trim_end().len());
            line
        })
        .collect()
}

/// Cuts `rows` rows (or what there is) off the top of `area`.
fn take_top(area: &mut Rect, rows: u16) -> Rect {
    let rows = rows.min(area.height);
    let top = Rect {
        height: rows,
        ..*area
    };
    area.y += rows;
    area.height -= rows;
    top
}

/// Cuts `rows` rows (or what there is) off the bottom of `area`.
fn take_bottom(area: &mut Rect, rows: u16) -> Rect {
    let rows = rows.min(area.height);
    area.height -= rows;
    Rect {
        y: area.y + area.height,
        height: rows,
        ..*area
    }
}

/// A count as terminal cells, saturating.
fn to_u16(n: usize) -> u16 {
    u16::try_from(n).unwrap_or(u16::MAX)
}

#[cfg(test)]
mod tests;

//! The view drawn into a headless terminal, its keys, and the text of `--once`.

use std::time::Duration;

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::*;
use crate::top::model::{
    NodeRow, OwnerRow, ResourceRow, SemaphoreRow, SessionRow, Snapshot, UseRow, WaiterRow,
};

const NODE: &str = "/local/app";

/// 49 semaphores `lock-00`..`lock-48` and `jobs` (one owner, a queue of three), 200 sessions,
/// three resources and a note. `lock-17` holds the most units, `lock-30` none.
fn snapshot() -> Snapshot {
    let mut semaphores: Vec<SemaphoreRow> = (0..49u64)
        .map(|i| {
            let count = match i {
                17 => 9,
                30 => 0,
                _ => 1 + i % 4,
            };
            SemaphoreRow {
                node: NODE.to_string(),
                name: format!("lock-{i:02}"),
                limit: if i == 17 { 10 } else { 5 },
                count,
                owners: (0..count)
                    .map(|k| OwnerRow {
                        session_id: 1000 + (i * 3 + k) % 200,
                        count: 1,
                        fencing_token: i * 10 + k,
                        data: Vec::new(),
                        held_for: Duration::from_secs(i * 7),
                        exact: i % 2 == 0,
                        ..OwnerRow::default()
                    })
                    .collect(),
                grants_per_minute: i % 7,
                ..SemaphoreRow::default()
            }
        })
        .collect();
    semaphores.push(SemaphoreRow {
        node: NODE.to_string(),
        name: "jobs".to_string(),
        limit: 1,
        count: 1,
        data: b"nightly".to_vec(),
        owners: vec![OwnerRow {
            session_id: 1100,
            count: 1,
            fencing_token: 42,
            data: b"worker-a".to_vec(),
            held_for: Duration::from_secs(184),
            exact: true,
            ..OwnerRow::default()
        }],
        // The server's queue order, which is not the order of the ids.
        waiters: vec![
            waiter(1107, Duration::from_secs(30), true),
            waiter(1102, Duration::from_secs(12), true),
            waiter(1105, Duration::from_millis(850), false),
        ],
        grants_per_minute: 3,
        ..SemaphoreRow::default()
    });
    Snapshot {
        target: NODE.to_string(),
        semaphores,
        sessions: (1000..1200u64)
            .map(|id| SessionRow {
                node: NODE.to_string(),
                session_id: id,
                description: if id % 2 == 0 {
                    format!("worker-{id}")
                } else {
                    String::new()
                },
                holds: id % 3,
                waits: u64::from(id == 1107),
                announced: id % 2 == 0,
                ..SessionRow::default()
            })
            .collect(),
        resources: vec![
            resource("search", Some(2.5)),
            resource("payments", Some(20.0)),
            resource("payments/eu", None),
        ],
        notes: vec!["could not describe ghost".to_string()],
        time_ms: 1_709_294_400_000,
        complete: true,
        nodes: vec![NodeRow {
            path: NODE.to_string(),
            rtt: Some(Duration::from_micros(1200)),
            errors: 0,
            last_error: None,
        }],
    }
}

fn waiter(session_id: u64, waiting_for: Duration, exact: bool) -> WaiterRow {
    WaiterRow {
        session_id,
        count: 1,
        waiting_for,
        exact,
    }
}

fn resource(path: &str, rate: Option<f64>) -> ResourceRow {
    ResourceRow {
        node: NODE.to_string(),
        path: path.to_string(),
        rate,
    }
}

/// The words of a session row that says nothing of who it is: its id, six dashes, its holds,
/// no waits, then `rest` (whether it announces, the description).
fn unannounced_row(id: &str, holds: &str, rest: &str) -> Vec<String> {
    let mut row = vec![id.to_string()];
    row.extend(std::iter::repeat_n("-".to_string(), 6));
    row.extend([holds.to_string(), "0".to_string()]);
    row.extend(rest.split_whitespace().map(String::from));
    row
}

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}

/// Presses each character of `keys` in turn; returns the last action.
fn type_keys(state: &mut ViewState, keys: &str) -> Action {
    let mut last = Action::None;
    for c in keys.chars() {
        last = state.on_key(key(KeyCode::Char(c)));
    }
    last
}

/// Draws into a `width` x `height` test terminal and returns its lines.
fn screen(snapshot: &Snapshot, state: &mut ViewState, width: u16, height: u16) -> Vec<String> {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal.draw(|f| draw(f, snapshot, state)).unwrap();
    let buffer = terminal.backend().buffer();
    let width = usize::from(buffer.area.width);
    if width == 0 {
        return Vec::new();
    }
    buffer
        .content
        .chunks(width)
        .map(|row| row.iter().map(|c| c.symbol()).collect::<String>())
        .collect()
}

/// The index of the table's header line, the one that starts with `title`.
fn table_header(lines: &[String], title: &str) -> usize {
    lines
        .iter()
        .position(|l| l.trim_start().starts_with(title))
        .unwrap_or_else(|| panic!("no table header {title:?} in\n{}", lines.join("\n")))
}

/// The first word of the table's first row.
fn first_row(lines: &[String], title: &str) -> String {
    let header = table_header(lines, title);
    first_word(&lines[header + 1])
}

fn first_word(line: &str) -> String {
    line.split_whitespace().next().unwrap_or("").to_string()
}

fn line_with(lines: &[String], needle: &str) -> usize {
    lines
        .iter()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle:?} in\n{}", lines.join("\n")))
}

#[test]
fn draws_the_header_counts_tabs_rows_and_notes() {
    let snapshot = snapshot();
    let lines = screen(&snapshot, &mut ViewState::default(), 120, 40);
    assert_eq!(lines.len(), 40);
    assert!(lines[0].starts_with("/local/app"), "{}", lines[0]);
    assert!(lines[0].contains("50 semaphores"), "{}", lines[0]);
    assert!(lines[0].contains("200 sessions"), "{}", lines[0]);
    assert!(lines[0].contains("3 resources"), "{}", lines[0]);
    assert!(lines[0].contains("sort: name"), "{}", lines[0]);
    assert!(!lines[0].contains("PAUSED"));
    assert!(lines[1].starts_with("1 Semaphores  2 Sessions  3 Resources"));

    let header = table_header(&lines, "NAME");
    for column in ["LIMIT", "HELD", "QUEUE", "GRANTS/MIN", "OWNERS"] {
        assert!(lines[header].contains(column), "{}", lines[header]);
    }
    assert!(!lines[header].contains("NODE"), "one node, no node column");
    let rows: Vec<String> = lines[header + 1..header + 5]
        .iter()
        .map(|l| first_word(l))
        .collect();
    assert_eq!(rows, ["jobs", "lock-00", "lock-01", "lock-02"]);
    // jobs: limit 1, held 1, queue 3, 3 grants/min, owner 1100 with one unit for 3m04s.
    let jobs = &lines[header + 1];
    assert_eq!(
        jobs.split_whitespace().take(8).collect::<Vec<_>>(),
        ["jobs", "1", "1", "3", "3", "1100", "x1", "3m04s"]
    );
    // lock-02 has three owners: the first, then +2.
    assert!(
        lines[header + 4].trim_end().ends_with("+2"),
        "{}",
        lines[header + 4]
    );

    assert!(
        lines[38].contains("could not describe ghost"),
        "{}",
        lines[38]
    );
    assert!(lines[39].contains("q quit"), "{}", lines[39]);
}

#[test]
fn sort_then_reverse_changes_the_first_row() {
    let snapshot = snapshot();
    let mut state = ViewState::default();
    assert_eq!(
        first_row(&screen(&snapshot, &mut state, 120, 40), "NAME"),
        "jobs"
    );

    assert_eq!(state.on_key(key(KeyCode::Char('s'))), Action::Redraw);
    let lines = screen(&snapshot, &mut state, 120, 40);
    assert!(lines[0].contains("sort: held"), "{}", lines[0]);
    assert_eq!(
        first_row(&lines, "NAME"),
        "lock-17",
        "most units held first"
    );

    assert_eq!(state.on_key(key(KeyCode::Char('r'))), Action::Redraw);
    let lines = screen(&snapshot, &mut state, 120, 40);
    assert!(lines[0].contains("sort: held, reversed"), "{}", lines[0]);
    assert_eq!(
        first_row(&lines, "NAME"),
        "lock-30",
        "fewest units held first"
    );

    // Queue: jobs is the only one with waiters, so it comes first again (reversal undone).
    state.on_key(key(KeyCode::Char('r')));
    state.on_key(key(KeyCode::Char('s')));
    let lines = screen(&snapshot, &mut state, 120, 40);
    assert!(lines[0].contains("sort: queue"), "{}", lines[0]);
    assert_eq!(first_row(&lines, "NAME"), "jobs");

    // Longest held: lock-48 has held for 48 * 7 s.
    state.on_key(key(KeyCode::Char('s')));
    state.on_key(key(KeyCode::Char('s')));
    let lines = screen(&snapshot, &mut state, 120, 40);
    assert!(lines[0].contains("sort: longest held"), "{}", lines[0]);
    assert_eq!(first_row(&lines, "NAME"), "lock-48");

    state.on_key(key(KeyCode::Char('s')));
    assert_eq!(state.semaphore_sort, SemaphoreSort::Name, "the keys cycle");
}

#[test]
fn the_filter_narrows_the_table_to_matching_names() {
    let snapshot = snapshot();
    let mut state = ViewState::default();
    type_keys(&mut state, "/LOCK-1");
    let lines = screen(&snapshot, &mut state, 120, 40);
    assert!(
        lines[0].contains("filter: LOCK-1_"),
        "cursor while typing: {}",
        lines[0]
    );
    state.on_key(key(KeyCode::Enter));
    let lines = screen(&snapshot, &mut state, 120, 40);
    assert!(lines[0].contains("filter: LOCK-1"), "{}", lines[0]);
    assert!(
        !lines[0].contains("LOCK-1_"),
        "no cursor once kept: {}",
        lines[0]
    );

    let header = table_header(&lines, "NAME");
    let rows: Vec<String> = lines[header + 1..]
        .iter()
        .map(|l| first_word(l))
        .take_while(|w| w.starts_with("lock-"))
        .collect();
    let expected: Vec<String> = std::iter::once("lock-01".to_string())
        .chain((10..20).map(|i| format!("lock-{i}")))
        .collect();
    // `lock-01` does not match `lock-1`: the rows are lock-1x only.
    assert_eq!(rows, expected[1..]);
    assert!(!lines.iter().any(|l| l.contains("jobs")));
    assert!(!lines.iter().any(|l| l.contains("lock-2")));
    let names: Vec<&str> = visible_semaphores(&snapshot, &state)
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(names, expected[1..]);

    // Nothing matches: a message instead of rows.
    type_keys(&mut state, "/zzz");
    let lines = screen(&snapshot, &mut state, 120, 40);
    let header = table_header(&lines, "NAME");
    assert!(
        lines[header + 1].contains("no semaphore name matches"),
        "{}",
        lines[header + 1]
    );
}

#[test]
fn the_filter_matches_session_ids_and_descriptions_and_resource_paths() {
    let snapshot = snapshot();
    let mut state = ViewState::default();
    state.on_key(key(KeyCode::Char('2')));
    type_keys(&mut state, "/WORKER-119");
    let ids: Vec<u64> = visible_sessions(&snapshot, &state)
        .iter()
        .map(|s| s.session_id)
        .collect();
    assert_eq!(ids, [1190, 1192, 1194, 1196, 1198]);
    state.on_key(key(KeyCode::Esc));
    type_keys(&mut state, "/1199");
    let ids: Vec<u64> = visible_sessions(&snapshot, &state)
        .iter()
        .map(|s| s.session_id)
        .collect();
    assert_eq!(ids, [1199]);

    state.on_key(key(KeyCode::Esc));
    state.on_key(key(KeyCode::Char('3')));
    type_keys(&mut state, "/pay");
    let paths: Vec<&str> = visible_resources(&snapshot, &state)
        .iter()
        .map(|r| r.path.as_str())
        .collect();
    assert_eq!(paths, ["payments", "payments/eu"]);
}

#[test]
fn pause_shows_paused_in_the_header() {
    let snapshot = snapshot();
    let mut state = ViewState::default();
    assert_eq!(state.on_key(key(KeyCode::Char('p'))), Action::Redraw);
    assert!(state.paused);
    let lines = screen(&snapshot, &mut state, 120, 40);
    assert!(lines[0].contains("PAUSED"), "{}", lines[0]);
    state.on_key(key(KeyCode::Char(' ')));
    assert!(!state.paused);
    let lines = screen(&snapshot, &mut state, 120, 40);
    assert!(!lines[0].contains("PAUSED"), "{}", lines[0]);
}

#[test]
fn the_detail_pane_lists_owners_and_waiters_in_queue_order() {
    let snapshot = snapshot();
    let mut state = ViewState::default();
    let lines = screen(&snapshot, &mut state, 120, 40);
    let title = line_with(&lines, " jobs ");
    assert!(title > table_header(&lines, "NAME") + 1);
    assert!(lines[title + 1].contains("limit 1  held 1  queue 3 (3 units)"));
    assert!(
        lines[title + 1].contains("data nightly"),
        "{}",
        lines[title + 1]
    );

    let owners = line_with(&lines, "OWNERS 1");
    let owner = &lines[owners + 1];
    for part in ["1100", "3m04s", "42", "worker-a"] {
        assert!(owner.contains(part), "{part:?} in {owner}");
    }
    let waiters = line_with(&lines, "WAITERS 3");
    assert!(waiters > owners);
    let queue: Vec<Vec<&str>> = lines[waiters + 1..waiters + 4]
        .iter()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        queue,
        [
            ["1.", "1107", "1", "30s"],
            ["2.", "1102", "1", "12s"],
            ["3.", "1105", "1", "≥850ms"],
        ]
    );

    // The selection moves the pane to the next semaphore.
    state.on_key(key(KeyCode::Down));
    let lines = screen(&snapshot, &mut state, 120, 40);
    line_with(&lines, " lock-00 ");
    line_with(&lines, "no waiters");
    assert!(!lines.iter().any(|l| l.contains("WAITERS")));
}

#[test]
fn a_long_queue_is_cut_with_a_count_and_keeps_the_first_waiters() {
    let mut snapshot = snapshot();
    let jobs = snapshot
        .semaphores
        .iter_mut()
        .find(|s| s.name == "jobs")
        .unwrap();
    jobs.limit = 100;
    jobs.count = 100;
    jobs.owners = (0..100)
        .map(|i| OwnerRow {
            session_id: 1000 + i,
            count: 1,
            fencing_token: i,
            ..OwnerRow::default()
        })
        .collect();
    jobs.waiters = (0..60)
        .map(|i| waiter(5000 + i, Duration::from_secs(i), true))
        .collect();
    let lines = screen(&snapshot, &mut ViewState::default(), 120, 40);
    let waiters = line_with(&lines, "WAITERS 60");
    assert!(
        lines[waiters + 1].contains("5000"),
        "{}",
        lines[waiters + 1]
    );
    assert!(
        lines[waiters + 2].contains("5001"),
        "{}",
        lines[waiters + 2]
    );
    line_with(&lines, "more owners");
    line_with(&lines, "more waiters");
    assert!(
        lines[39].contains("q quit"),
        "the footer stays: {}",
        lines[39]
    );
}

#[test]
fn a_short_detail_pane_keeps_the_queue_in_sight() {
    let snapshot = snapshot();
    let lines = screen(&snapshot, &mut ViewState::default(), 80, 14);
    let title = line_with(&lines, " jobs ");
    // Three lines inside: the owners' header, the waiters' header and the first waiter; the
    // summary (the table row says it) and the owner's row give way.
    assert!(
        lines[title + 1].starts_with("OWNERS 1"),
        "{}",
        lines[title + 1]
    );
    assert!(
        lines[title + 2].starts_with("WAITERS 3"),
        "{}",
        lines[title + 2]
    );
    assert!(lines[title + 3].contains("1107"), "{}", lines[title + 3]);
    assert!(!lines.iter().any(|l| l.contains("1102")));
}

#[test]
fn the_node_column_appears_only_with_several_nodes() {
    let mut snapshot = snapshot();
    let lines = screen(&snapshot, &mut ViewState::default(), 120, 40);
    assert!(!lines[table_header(&lines, "NAME")].contains("NODE"));
    let one = text(&snapshot);
    let header = |text: &str, first: &str| {
        text.lines()
            .find(|l| l.starts_with(first))
            .unwrap()
            .to_string()
    };
    assert!(!header(&one, "NAME ").contains("NODE"));
    assert!(!header(&one, "SESSION ").contains("NODE"));

    snapshot.semaphores[3].node = "/local/other".to_string();
    snapshot.sessions[5].node = "/local/other".to_string();
    let mut state = ViewState::default();
    let lines = screen(&snapshot, &mut state, 120, 40);
    let header = table_header(&lines, "NAME");
    assert!(lines[header].contains("NODE"), "{}", lines[header]);
    assert!(lines.iter().any(|l| l.contains("lock-03  /local/other")));

    state.on_key(key(KeyCode::Char('2')));
    let lines = screen(&snapshot, &mut state, 120, 40);
    assert!(lines[table_header(&lines, "SESSION")].contains("NODE"));
    // The resources are all on one node.
    state.on_key(key(KeyCode::Char('3')));
    let lines = screen(&snapshot, &mut state, 120, 40);
    assert!(!lines[table_header(&lines, "PATH")].contains("NODE"));

    let text = text(&snapshot);
    let semaphores_header = text.lines().find(|l| l.starts_with("NAME")).unwrap();
    assert!(semaphores_header.contains("NODE"), "{semaphores_header}");
}

#[test]
fn the_sessions_and_resources_tabs_draw_their_columns() {
    let snapshot = snapshot();
    let mut state = ViewState::default();
    state.on_key(key(KeyCode::Tab));
    let lines = screen(&snapshot, &mut state, 120, 40);
    let header = table_header(&lines, "SESSION");
    for column in [
        "HOST",
        "PID",
        "TOOL",
        "AGE",
        "TIMEOUT",
        "CONTACT",
        "HOLDS",
        "WAITS",
        "ANNOUNCED",
        "DESCRIPTION",
    ] {
        assert!(lines[header].contains(column), "{}", lines[header]);
    }
    assert_eq!(
        lines[header + 1].split_whitespace().collect::<Vec<_>>(),
        unannounced_row("1000", "1", "yes worker-1000")
    );
    assert_eq!(
        lines[header + 2].split_whitespace().collect::<Vec<_>>(),
        unannounced_row("1001", "2", "no")
    );
    // Sorted by holds: 1001 is the first with two.
    state.on_key(key(KeyCode::Char('s')));
    assert_eq!(
        first_row(&screen(&snapshot, &mut state, 120, 40), "SESSION"),
        "1001"
    );
    // Sorted by waits: 1107 is the only waiter.
    state.on_key(key(KeyCode::Char('s')));
    assert_eq!(
        first_row(&screen(&snapshot, &mut state, 120, 40), "SESSION"),
        "1107"
    );

    state.on_key(key(KeyCode::Tab));
    let lines = screen(&snapshot, &mut state, 120, 40);
    let header = table_header(&lines, "PATH");
    let rows: Vec<Vec<&str>> = lines[header + 1..header + 4]
        .iter()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            ["payments", "20/s"],
            ["payments/eu", "inherited"],
            ["search", "2.5/s"],
        ]
    );
    // Sorted by rate: the inherited one last.
    state.on_key(key(KeyCode::Char('s')));
    let names: Vec<&str> = visible_resources(&snapshot, &state)
        .iter()
        .map(|r| r.path.as_str())
        .collect();
    assert_eq!(names, ["payments", "search", "payments/eu"]);
}

#[test]
fn the_selection_scrolls_and_is_clamped_when_the_list_shrinks() {
    let mut snapshot = snapshot();
    let mut state = ViewState::default();
    state.on_key(key(KeyCode::End));
    let lines = screen(&snapshot, &mut state, 120, 40);
    assert_eq!(state.selected, 49);
    line_with(&lines, " lock-48 ");
    assert!(
        lines.iter().any(|l| l.starts_with("lock-48")),
        "scrolled to the end"
    );
    assert!(
        !lines.iter().any(|l| l.starts_with("jobs")),
        "the top scrolled away"
    );

    state.on_key(key(KeyCode::PageUp));
    screen(&snapshot, &mut state, 120, 40);
    assert_eq!(state.selected, 39);
    state.on_key(key(KeyCode::Char('k')));
    state.on_key(key(KeyCode::Char('j')));
    state.on_key(key(KeyCode::Char('j')));
    assert_eq!(state.selected, 40);

    snapshot.semaphores.truncate(3);
    let lines = screen(&snapshot, &mut state, 120, 40);
    assert_eq!(state.selected, 2);
    line_with(&lines, " lock-02 ");
    state.on_key(key(KeyCode::Home));
    assert_eq!(state.selected, 0);

    snapshot.semaphores.clear();
    let lines = screen(&snapshot, &mut state, 120, 40);
    assert_eq!(state.selected, 0);
    line_with(&lines, "no semaphore in use");
}

#[test]
fn tiny_and_empty_terminals_do_not_panic() {
    let full = snapshot();
    let mut noisy = snapshot();
    noisy.notes = (0..10).map(|i| format!("note {i}")).collect();
    let empty = Snapshot::default();
    let sizes = [
        (0, 0),
        (1, 0),
        (0, 1),
        (1, 1),
        (2, 2),
        (10, 3),
        (5, 2),
        (120, 0),
        (0, 40),
        (20, 4),
        (30, 7),
        (40, 8),
        (80, 9),
        (80, 12),
        (300, 100),
    ];
    for snapshot in [&full, &noisy, &empty] {
        for tab in [Tab::Semaphores, Tab::Sessions, Tab::Resources] {
            for (width, height) in sizes {
                let mut state = ViewState {
                    tab,
                    typing: true,
                    paused: true,
                    filter: "lock".to_string(),
                    selected: usize::MAX,
                    ..ViewState::default()
                };
                let lines = screen(snapshot, &mut state, width, height);
                assert_eq!(
                    lines.len(),
                    if width == 0 { 0 } else { usize::from(height) }
                );
            }
        }
    }
}

#[test]
fn narrow_terminals_cut_lines_rather_than_wrap() {
    let mut snapshot = snapshot();
    snapshot.target = "/local/a-very-long-database-path/with/a/node\u{1b}[31m".to_string();
    let lines = screen(&snapshot, &mut ViewState::default(), 30, 10);
    assert!(lines[0].starts_with("/local/a-very-long-database-pa"));
    assert!(lines[1].starts_with("1 Semaphores  2 Sessions  3 Re"));
    assert!(lines.iter().all(|l| !l.contains('\u{1b}')));
    assert!(lines[9].starts_with("q quit"), "{}", lines[9]);
}

#[test]
fn text_has_aligned_tables_with_owners_and_waiters() {
    let snapshot = snapshot();
    let out = text(&snapshot);
    assert!(!out.contains('\u{1b}'));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "/local/app: 50 semaphores, 200 sessions, 3 resources at 2024-03-01T12:00:00.000Z"
    );
    let nodes = lines.iter().position(|l| *l == "NODES").unwrap();
    assert_eq!(
        lines[nodes + 1].split_whitespace().collect::<Vec<_>>(),
        ["NODE", "RTT", "ERRORS", "LAST", "ERROR"]
    );
    assert_eq!(
        lines[nodes + 2].split_whitespace().collect::<Vec<_>>(),
        [NODE, "1.2ms", "0"]
    );

    let start = lines.iter().position(|l| *l == "SEMAPHORES").unwrap();
    let end = lines.iter().position(|l| *l == "SESSIONS").unwrap();
    let section = &lines[start + 1..end - 1];
    let header = section[0];
    assert_eq!(
        header.split_whitespace().collect::<Vec<_>>(),
        ["NAME", "LIMIT", "COUNT", "QUEUE", "GRANTS/MIN"]
    );
    let rows: Vec<&str> = section[1..]
        .iter()
        .copied()
        .filter(|l| !l.starts_with(' '))
        .collect();
    assert_eq!(rows.len(), 50);
    assert!(rows[0].starts_with("jobs "));
    assert!(rows[1].starts_with("lock-00 "));
    // Numbers are aligned right under their headings: every row ends where the header does,
    // and each heading's last letter sits above its number's last digit.
    for row in &rows {
        assert_eq!(row.chars().count(), header.chars().count(), "{row:?}");
        for heading in ["LIMIT", "COUNT", "QUEUE", "GRANTS/MIN"] {
            let last = header.find(heading).unwrap() + heading.len() - 1;
            assert!(
                row.as_bytes()[last].is_ascii_digit(),
                "{heading} in {row:?}"
            );
            assert_eq!(row.as_bytes().get(last + 1).copied().unwrap_or(b' '), b' ');
        }
    }

    // jobs, its owner, then its waiters in queue order.
    let jobs = section.iter().position(|l| l.starts_with("jobs ")).unwrap();
    let details: Vec<Vec<&str>> = section[jobs + 1..jobs + 5]
        .iter()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        details,
        [
            vec![
                "owner", "session", "1100", "units", "1", "held", "3m04s", "token", "42"
            ]
            .into_iter()
            .chain(["data", "worker-a"])
            .collect::<Vec<_>>(),
            vec!["waiter", "session", "1107", "units", "1", "waiting", "30s"],
            vec!["waiter", "session", "1102", "units", "1", "waiting", "12s"],
            vec![
                "waiter", "session", "1105", "units", "1", "waiting", "≥850ms"
            ],
        ]
    );
    assert!(section[jobs + 5].starts_with("lock-00"));
    // Owner and waiter lines are aligned with each other.
    let column = |line: &str, word: &str| line.chars().collect::<String>().find(word);
    let subs: Vec<&str> = section
        .iter()
        .copied()
        .filter(|l| l.starts_with("  "))
        .collect();
    assert!(subs.len() > 50);
    let units = column(subs[0], " units ").unwrap();
    let session = column(subs[0], " session ").unwrap();
    for line in &subs {
        assert_eq!(column(line, " units "), Some(units), "{line:?}");
        assert_eq!(column(line, " session "), Some(session), "{line:?}");
    }
    assert!(
        out.contains("held ≥7s "),
        "an inexact owner is at least:\n{out}"
    );

    // Sessions by id, resources by path, then the notes.
    let sessions = lines
        .iter()
        .position(|l| l.starts_with("SESSION "))
        .unwrap();
    assert_eq!(
        lines[sessions].split_whitespace().collect::<Vec<_>>(),
        [
            "SESSION",
            "HOST",
            "PID",
            "TOOL",
            "AGE",
            "TIMEOUT",
            "CONTACT",
            "HOLDS",
            "WAITS",
            "ANNOUNCED",
            "DESCRIPTION"
        ]
    );
    assert_eq!(
        lines[sessions + 1].split_whitespace().collect::<Vec<_>>(),
        unannounced_row("1000", "1", "yes worker-1000")
    );
    assert_eq!(
        lines[sessions + 200].split_whitespace().collect::<Vec<_>>(),
        unannounced_row("1199", "2", "no")
    );
    let resources = lines.iter().position(|l| *l == "RESOURCES").unwrap();
    assert_eq!(
        &lines[resources + 1..resources + 5],
        [
            "PATH              RATE",
            "payments          20/s",
            "payments/eu  inherited",
            "search           2.5/s",
        ]
    );
    assert_eq!(
        &lines[lines.len() - 2..],
        ["NOTES", "could not describe ghost"]
    );
}

#[test]
fn text_is_deterministic_and_handles_an_empty_snapshot() {
    let snapshot = snapshot();
    let mut shuffled = snapshot.clone();
    shuffled.semaphores.reverse();
    shuffled.sessions.reverse();
    shuffled.resources.reverse();
    assert_eq!(text(&snapshot), text(&shuffled));

    let empty = Snapshot {
        target: "/local/empty".to_string(),
        ..Snapshot::default()
    };
    assert_eq!(
        text(&empty),
        "/local/empty: 0 semaphores, 0 sessions, 0 resources at 1970-01-01T00:00:00.000Z \
         (incomplete: see the notes)\n\nSEMAPHORES\n(none)\n\n\
         SESSIONS\n(none)\n\nRESOURCES\n(none)\n"
    );
}

#[test]
fn typing_the_filter_takes_letters_not_commands() {
    let mut state = ViewState::default();
    assert_eq!(type_keys(&mut state, "/abc"), Action::Redraw);
    assert!(state.typing);
    assert_eq!(state.filter, "abc");

    // Letters that are commands outside the filter are text inside it.
    type_keys(&mut state, "spqr 12");
    assert_eq!(state.filter, "abcspqr 12");
    assert_eq!(state.semaphore_sort, SemaphoreSort::Name);
    assert!(!state.reversed && !state.paused);
    assert_eq!(state.tab, Tab::Semaphores);

    state.on_key(key(KeyCode::Backspace));
    state.on_key(key(KeyCode::Backspace));
    assert_eq!(state.filter, "abcspqr ");
    assert_eq!(state.on_key(key(KeyCode::Enter)), Action::Redraw);
    assert!(!state.typing);
    assert_eq!(state.filter, "abcspqr ", "Enter keeps the filter");

    // Now letters are commands again; Esc clears the filter before it quits.
    type_keys(&mut state, "s");
    assert_eq!(state.semaphore_sort, SemaphoreSort::Held);
    assert_eq!(state.on_key(key(KeyCode::Esc)), Action::Redraw);
    assert_eq!(state.filter, "");
    assert_eq!(state.on_key(key(KeyCode::Esc)), Action::Quit);
}

#[test]
fn esc_while_typing_cancels_and_clears_the_filter() {
    let mut state = ViewState::default();
    type_keys(&mut state, "/lock");
    assert_eq!(state.on_key(key(KeyCode::Esc)), Action::Redraw);
    assert!(!state.typing);
    assert_eq!(state.filter, "");

    // `/` again edits the kept filter.
    type_keys(&mut state, "/ab");
    state.on_key(key(KeyCode::Enter));
    type_keys(&mut state, "/c");
    assert_eq!(state.filter, "abc");
    state.on_key(KeyEvent::new(KeyCode::Char('u'), KeyModifiers::CONTROL));
    assert_eq!(state.filter, "");
    assert!(state.typing);
}

#[test]
fn q_ctrl_c_and_esc_quit() {
    assert_eq!(
        ViewState::default().on_key(key(KeyCode::Char('q'))),
        Action::Quit
    );
    assert_eq!(ViewState::default().on_key(key(KeyCode::Esc)), Action::Quit);
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    assert_eq!(ViewState::default().on_key(ctrl_c), Action::Quit);
    let mut typing = ViewState::default();
    type_keys(&mut typing, "/q");
    assert_eq!(typing.filter, "q", "q is text while typing");
    assert_eq!(
        typing.on_key(ctrl_c),
        Action::Quit,
        "Ctrl-C quits even then"
    );
    // A plain `c` does nothing; a key release is ignored.
    let mut state = ViewState::default();
    assert_eq!(state.on_key(key(KeyCode::Char('c'))), Action::None);
    let mut release = key(KeyCode::Char('q'));
    release.kind = KeyEventKind::Release;
    assert_eq!(state.on_key(release), Action::None);
}

#[test]
fn tab_keys_cycle_and_pick_the_tab_and_reset_the_selection() {
    let mut state = ViewState {
        selected: 7,
        ..ViewState::default()
    };
    state.on_key(key(KeyCode::Tab));
    assert_eq!(state.tab, Tab::Sessions);
    assert_eq!(state.selected, 0);
    state.on_key(key(KeyCode::Tab));
    assert_eq!(state.tab, Tab::Resources);
    state.on_key(key(KeyCode::Tab));
    assert_eq!(state.tab, Tab::Semaphores);
    state.on_key(KeyEvent::new(KeyCode::BackTab, KeyModifiers::SHIFT));
    assert_eq!(state.tab, Tab::Resources);
    state.on_key(key(KeyCode::Char('2')));
    assert_eq!(state.tab, Tab::Sessions);
    assert_eq!(state.on_key(key(KeyCode::Char('2'))), Action::None);
    state.on_key(key(KeyCode::Char('1')));
    assert_eq!(state.tab, Tab::Semaphores);

    let lines = screen(&snapshot(), &mut state, 120, 40);
    assert!(lines[1].starts_with("1 Semaphores"));
    state.on_key(key(KeyCode::Char('3')));
    let lines = screen(&snapshot(), &mut state, 120, 40);
    assert!(lines[0].contains("sort: path"), "{}", lines[0]);
    table_header(&lines, "PATH");
}

#[test]
fn durations_read_as_milliseconds_seconds_minutes_and_hours() {
    let cases = [
        (Duration::ZERO, true, "0ms"),
        (Duration::from_millis(850), true, "850ms"),
        (Duration::from_millis(12_400), true, "12s"),
        (Duration::from_secs(184), true, "3m04s"),
        (Duration::from_secs(2 * 3600 + 5 * 60 + 59), true, "2h05m"),
        (Duration::from_secs(59), false, "≥59s"),
        (Duration::from_secs(3600), false, "≥1h00m"),
    ];
    for (duration, exact, expected) in cases {
        assert_eq!(format_duration(duration, exact), expected);
    }
}

#[test]
fn an_exclusive_lock_of_an_ephemeral_semaphore_reads_max_not_a_20_digit_number() {
    let mut s = snapshot();
    let row = &mut s.semaphores[0];
    row.limit = u64::MAX;
    row.count = u64::MAX;
    row.ephemeral = true;
    for o in &mut row.owners {
        o.count = u64::MAX;
    }
    for w in &mut row.waiters {
        w.count = u64::MAX;
    }
    let name = row.name.clone();
    let text = text(&s);
    assert!(!text.contains(&u64::MAX.to_string()), "{text}");
    let line = text.lines().find(|l| l.starts_with(&name)).unwrap();
    assert_eq!(line.split_whitespace().nth(1), Some("max"), "{line}");
    let mut state = ViewState::default();
    let lines = screen(&s, &mut state, 160, 40);
    assert!(lines.iter().all(|l| !l.contains(&u64::MAX.to_string())));
}

#[test]
fn format_characters_from_the_server_cannot_reorder_a_row() {
    for c in [
        '\u{202E}', '\u{200E}', '\u{200F}', '\u{2066}', '\u{2069}', '\u{FEFF}',
    ] {
        let name = format!("a{c}b");
        assert_eq!(clean(&name), "a?b", "U+{:04X}", u32::from(c));
    }
    assert!(matches!(clean("plain é ✓"), Cow::Borrowed(_)));
    assert_eq!(clean("a\u{1b}[2Jb"), "a?[2Jb");
}

/// The snapshot with session 1100 (the owner of `jobs`) announcing who it is and what it
/// uses, and `jobs` persistent.
fn with_who() -> Snapshot {
    let mut snapshot = snapshot();
    let jobs = snapshot
        .semaphores
        .iter_mut()
        .find(|s| s.name == "jobs")
        .unwrap();
    jobs.owners[0].granted_ms = Some(1_709_294_216_000);
    jobs.owners[0].delay_until_ms = Some(1_709_294_409_000);
    let row = snapshot
        .sessions
        .iter_mut()
        .find(|s| s.session_id == 1100)
        .unwrap();
    row.host = "web-3".to_string();
    row.pid = Some(4411);
    row.tool = "ydb-coord".to_string();
    row.age = Some(Duration::from_secs(3 * 3600));
    row.timeout = Some(Duration::from_secs(10));
    row.contact = Some(Duration::from_secs(2));
    row.uses = vec![
        UseRow {
            name: "jobs".to_string(),
            held: true,
            count: 1,
            since: Duration::from_secs(184),
            exact: true,
            position: None,
        },
        UseRow {
            name: "lock-07".to_string(),
            held: false,
            count: 1,
            since: Duration::from_secs(9),
            exact: true,
            position: Some(2),
        },
    ];
    snapshot
}

#[test]
fn the_sessions_tab_drills_down_into_what_the_selected_session_holds_and_waits_for() {
    let snapshot = with_who();
    let mut state = ViewState::default();
    type_keys(&mut state, "2/web-3");
    state.on_key(key(KeyCode::Enter));
    let lines = screen(&snapshot, &mut state, 140, 40);
    let header = table_header(&lines, "SESSION");
    assert_eq!(
        lines[header + 1].split_whitespace().collect::<Vec<_>>(),
        [
            "1100",
            "web-3",
            "4411",
            "ydb-coord",
            "3h00m",
            "10s",
            "2s",
            "ago",
            "2",
            "0",
            "yes",
            "worker-1100"
        ]
    );
    let pane = line_with(&lines, " session 1100 ");
    let holds = lines[pane + 1].split_whitespace().collect::<Vec<_>>();
    assert_eq!(holds, ["holds", "jobs", "units", "1", "held", "3m04s"]);
    let waits = lines[pane + 2].split_whitespace().collect::<Vec<_>>();
    assert_eq!(
        waits,
        [
            "waits", "for", "lock-07", "units", "1", "waiting", "9s,", "place", "2", "in", "the",
            "queue"
        ]
    );
}

#[test]
fn owners_say_who_holds_since_when_and_a_lock_delay() {
    let snapshot = with_who();
    let out = text(&snapshot);
    let owner = out
        .lines()
        .find(|l| l.trim_start().starts_with("owner") && l.contains("1100"))
        .unwrap();
    for part in [
        "since 2024-03-01T11:56:56.000Z",
        "host web-3 pid 4411 ydb-coord",
        "in lock delay until 2024-03-01T12:00:09.000Z",
    ] {
        assert!(owner.contains(part), "{part} in {owner}");
    }
    // The drill-down under the session's row.
    let lines: Vec<&str> = out.lines().collect();
    let row = lines
        .iter()
        .position(|l| l.trim_start().starts_with("1100 "))
        .unwrap();
    assert!(
        lines[row + 1].trim_start().starts_with("holds"),
        "{}",
        lines[row + 1]
    );
    assert!(lines[row + 2].trim_start().starts_with("waits for"));
    // The live view's detail pane says it too.
    let mut state = ViewState::default();
    type_keys(&mut state, "/jobs");
    state.on_key(key(KeyCode::Enter));
    let lines = screen(&snapshot, &mut state, 160, 40);
    let owner = lines[line_with(&lines, "OWNERS 1") + 1].clone();
    assert!(owner.contains("(lock delay, 9s left)"), "{owner}");
    assert!(owner.contains("host web-3 pid 4411"), "{owner}");
}

#[test]
fn d_asks_before_a_forced_delete_and_any_other_key_cancels() {
    let snapshot = with_who();
    let mut state = ViewState::default();
    type_keys(&mut state, "/jobs");
    state.on_key(key(KeyCode::Enter));
    assert_eq!(type_keys(&mut state, "D"), Action::AskDelete);
    state.ask_delete(&snapshot);
    let lines = screen(&snapshot, &mut state, 200, 40);
    let question = lines.last().unwrap();
    assert!(
        question.starts_with("force-delete \"jobs\" on /local/app? 1 owners"),
        "{question}"
    );
    assert!(
        question.contains("session 1100 host web-3 pid 4411"),
        "{question}"
    );
    assert_eq!(
        type_keys(&mut state, "y"),
        Action::Delete {
            node: NODE.to_string(),
            name: "jobs".to_string()
        }
    );
    assert!(state.confirm.is_none());
    // Asked again, then declined: nothing happens.
    state.on_key(key(KeyCode::Char('D')));
    state.ask_delete(&snapshot);
    assert_eq!(type_keys(&mut state, "n"), Action::Redraw);
    assert!(state.confirm.is_none());
    assert_eq!(state.message.as_deref(), Some("not deleted"));
}

#[test]
fn an_ephemeral_semaphore_cannot_be_deleted_and_the_view_says_who_to_stop() {
    let mut snapshot = with_who();
    for s in &mut snapshot.semaphores {
        s.ephemeral = true;
    }
    let mut state = ViewState::default();
    type_keys(&mut state, "/jobs");
    state.on_key(key(KeyCode::Enter));
    state.on_key(key(KeyCode::Char('D')));
    state.ask_delete(&snapshot);
    assert!(state.confirm.is_none());
    let message = state.message.clone().unwrap();
    assert!(message.contains("ephemeral"), "{message}");
    assert!(
        message.contains("session 1100 host web-3 pid 4411"),
        "{message}"
    );
}

//! The live view drawn into ratatui's test backend: sorting, filtering, pausing and
//! drilling into a lock, from summaries built here.

use std::sync::Arc;

use ratatui::{
    Terminal,
    backend::TestBackend,
    crossterm::event::{KeyCode, KeyEvent, KeyModifiers},
};

use super::app::{Action, App};
use crate::{
    engine::{Summary, summary::ObjectSummary},
    model::{WaitsForView, dist::DistSummary},
};

fn object(name: &str, addr: u64, acquisitions: u64, wait_ns: u64) -> ObjectSummary {
    ObjectSummary {
        pid: 10,
        kind: "mutex".into(),
        addr,
        name: Some(name.into()),
        threads: 2,
        acquisitions,
        contended: acquisitions / 2,
        wait_ns,
        wait_max_ns: Some(wait_ns / 2),
        wait_p99_ns: None,
        hold_ns: 0,
    }
}

fn summary(seq: u64, waited: u64) -> Arc<Summary> {
    Arc::new(Summary {
        seq,
        elapsed_ns: seq * 1_000_000_000,
        objects: vec![
            object("big_wait", 0x10, 5, waited),
            object("many_acq", 0x20, 9_000, 1_000),
            object("evil\x1b[2J", 0x30, 1, 1),
        ],
        waits_for: vec![WaitsForView {
            pid: 10,
            waiter: 11,
            waker_pid: 10,
            outside: false,
            waker: 12,
            object: 0x10,
            object_name: Some("big_wait".into()),
            count: 3,
            wait: DistSummary {
                count: 3,
                total_ns: 900,
                ..DistSummary::default()
            },
            at_exit: false,
        }],
        ..Summary::default()
    })
}

fn screen(app: &App) -> String {
    let mut t = Terminal::new(TestBackend::new(140, 24)).unwrap();
    t.draw(|f| app.draw(f)).unwrap();
    let buf = t.backend().buffer().clone();
    (0..buf.area.height)
        .map(|y| {
            (0..buf.area.width)
                .map(|x| buf[(x, y)].symbol().to_string())
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn press(app: &mut App, code: KeyCode) -> Action {
    app.key(KeyEvent::new(code, KeyModifiers::NONE))
}

/// The row (screen line) a text is on.
fn line_of(screen: &str, text: &str) -> usize {
    screen
        .lines()
        .position(|l| l.contains(text))
        .unwrap_or_else(|| panic!("{text} not on screen:\n{screen}"))
}

#[test]
fn sorting_filtering_pausing_and_drilling_in() {
    let mut app = App::new(summary(1, 5_000_000));
    let s = screen(&app);
    // Sorted by time waited: big_wait first.
    assert!(line_of(&s, "big_wait") < line_of(&s, "many_acq"), "{s}");
    // Target text is escaped on screen.
    assert!(s.contains("evil\\x1b[2J"), "{s}");
    // Two columns left: sorted by acquisitions.
    press(&mut app, KeyCode::Left);
    press(&mut app, KeyCode::Left);
    let s = screen(&app);
    assert!(line_of(&s, "many_acq") < line_of(&s, "big_wait"), "{s}");
    assert!(s.contains("acquired v"), "the sorted column is marked: {s}");
    press(&mut app, KeyCode::Char('r'));
    let s = screen(&app);
    assert!(
        line_of(&s, "big_wait") < line_of(&s, "many_acq"),
        "reversed: {s}"
    );

    // Filter.
    press(&mut app, KeyCode::Char('/'));
    for c in "many".chars() {
        press(&mut app, KeyCode::Char(c));
    }
    press(&mut app, KeyCode::Enter);
    let s = screen(&app);
    assert!(s.contains("many_acq") && !s.contains("big_wait"), "{s}");
    press(&mut app, KeyCode::Char('/'));
    press(&mut app, KeyCode::Esc);

    // Paused: new summaries are not shown, and the state says so.
    press(&mut app, KeyCode::Char('p'));
    app.update(summary(2, 9_000_000));
    let s = screen(&app);
    assert!(s.contains("[PAUSED]"), "{s}");
    assert!(s.contains("5.00 ms"), "still the first summary: {s}");
    press(&mut app, KeyCode::Char('p'));
    app.update(summary(3, 12_000_000));
    let s = screen(&app);
    assert!(!s.contains("[PAUSED]") && s.contains("12.00 ms"), "{s}");

    // Drill into the first lock (by time waited): its history (5, 4, 3 ms per interval)
    // and who woke its waiters.
    for _ in 0..2 {
        press(&mut app, KeyCode::Right);
    }
    press(&mut app, KeyCode::Char('r'));
    press(&mut app, KeyCode::Enter);
    let s = screen(&app);
    assert!(s.contains("big_wait (pid 10)"), "{s}");
    assert!(s.contains("last 3 intervals (latest 3.00 ms)"), "{s}");
    assert!(
        s.contains("11") && s.contains("12"),
        "waiter and waker: {s}"
    );
    press(&mut app, KeyCode::Esc);
    assert!(screen(&app).contains("top locks"));

    // Other tables, and quitting.
    press(&mut app, KeyCode::Tab);
    press(&mut app, KeyCode::Tab);
    assert!(screen(&app).contains("who waited for whom"));
    assert_eq!(press(&mut app, KeyCode::Char('q')), Action::Quit);
    assert_eq!(
        app.key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
        Action::Quit
    );
}

/// A name longer than its column keeps its start and its end (a call site's line, a
/// `#N`), and in the waits-for table the names share the width: the object's column
/// is not cut to a figure's width behind a wide first column.
#[test]
fn long_names_are_cut_in_the_middle_and_name_columns_share_the_width() {
    let long = format!(
        "in {} (server.c:1234) #3",
        "very_long_function_name_".repeat(5)
    );
    let mut s = (*summary(1, 100)).clone();
    s.waits_for[0].object_name = Some(long.clone());
    let mut app = App::new(Arc::new(s));
    press(&mut app, KeyCode::Char('3'));
    let screen = screen(&app);
    let row = screen
        .lines()
        .find(|l| l.contains("#3"))
        .unwrap_or_else(|| panic!("no #3 on screen:\n{screen}"));
    assert!(row.contains('…') && row.contains("in very_long"), "{row}");
    assert!(row.contains("server.c:1234) #3"), "{row}");
    // The object's column is about a third of what the figures leave, not 12.
    let cut = row
        .split_whitespace()
        .find(|w| w.contains('…'))
        .map_or(0, |_| {
            row.find("#3").unwrap() - row.find("in very").unwrap()
        });
    assert!(cut > 24, "{cut}: {row}");
}

#[test]
fn middle_keeps_both_ends() {
    assert_eq!(super::app::middle("abcdefghij", 5), "ab…ij");
    assert_eq!(super::app::middle("abc", 5), "abc");
    assert_eq!(super::app::middle("abcdef", 6), "abcdef");
}

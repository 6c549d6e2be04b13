//! The live view's state and drawing, apart from the terminal: fed summaries and keys,
//! it draws into any ratatui backend (the tests use the test backend).

use std::collections::{HashMap, VecDeque};

use ratatui::{
    Frame,
    crossterm::event::{KeyCode, KeyEvent, KeyModifiers},
    layout::{Constraint, Layout},
    style::{Modifier, Style, Stylize},
    text::Line,
    widgets::{Block, Cell, Paragraph, Row, Sparkline, Table, TableState},
};

use crate::{
    engine::Summary,
    output::{
        format::{count, ns, opt_ns},
        text::escape,
    },
};

/// Intervals of history kept per lock.
const HISTORY: usize = 120;
/// Locks whose history is kept (those in the latest summaries).
const MAX_TRACKED: usize = 1_000;

/// Which table is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tab {
    /// The most contended objects.
    Locks,
    /// The threads that waited most.
    Threads,
    /// Waiter -> waker edges.
    WaitsFor,
}

/// What a key asks of the caller.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing beyond redrawing.
    None,
    /// Stop tracing (write the results).
    Quit,
}

/// One lock's recent history: time waited per interval.
#[derive(Debug, Default)]
struct History {
    last_total: u64,
    waited: VecDeque<u64>,
}

/// The live view.
pub struct App {
    shown: std::sync::Arc<Summary>,
    /// The shown summary is frozen (new ones still feed the history).
    pub paused: bool,
    /// The table shown.
    pub tab: Tab,
    /// Sort column of each table, and whether ascending.
    sort: [(usize, bool); 3],
    /// Rows shown contain this text (case-insensitive).
    pub filter: String,
    typing: bool,
    selected: usize,
    /// The lock drilled into: (pid, addr).
    pub drill: Option<(u32, u64)>,
    history: HashMap<(u32, u64), History>,
}

const LOCK_COLS: [&str; 8] = [
    "object",
    "pid",
    "acquired",
    "contended",
    "waited",
    "max wait",
    "p99 wait",
    "held",
];
const THREAD_COLS: [&str; 6] = [
    "thread",
    "pid",
    "acquired",
    "contended",
    "waited",
    "waiting",
];
const EDGE_COLS: [&str; 5] = ["waiter", "woken by", "on", "waits", "waited"];

/// The width of a column of figures.
const NUMBER_WIDTH: usize = 12;
/// The narrowest a column of names gets.
const MIN_TEXT_WIDTH: usize = 12;

/// How many of a table's first columns are names (the rest are figures).
fn text_columns(tab: Tab) -> usize {
    match tab {
        Tab::Locks | Tab::Threads => 1,
        // The waiter, the thread that woke it, and the object.
        Tab::WaitsFor => 3,
    }
}

/// The width each of `texts` name columns gets in a bordered table `width` wide with
/// `cols` columns: what the figures leave, shared equally.
fn text_width(width: u16, cols: usize, texts: usize) -> usize {
    let inner = usize::from(width).saturating_sub(2 + cols.saturating_sub(1));
    let figures = (cols - texts) * NUMBER_WIDTH;
    (inner.saturating_sub(figures) / texts.max(1)).max(MIN_TEXT_WIDTH)
}

/// `s` in at most `width` characters: a longer one keeps its start and its end (where
/// a call site's line and a `#N` number are) around an ellipsis.
pub(super) fn middle(s: &str, width: usize) -> String {
    let n = s.chars().count();
    if n <= width {
        return s.to_owned();
    }
    let keep = width.saturating_sub(1);
    let head = keep.div_ceil(2);
    let tail = keep - head;
    let mut out: String = s.chars().take(head).collect();
    out.push('…');
    out.extend(s.chars().skip(n - tail));
    out
}

/// A row: its cells as shown and the values they sort by.
struct TableRow {
    cells: Vec<String>,
    keys: Vec<SortKey>,
    id: Option<(u32, u64)>,
}

#[derive(PartialEq, PartialOrd)]
enum SortKey {
    Text(String),
    Num(f64),
}

impl App {
    /// A view of `first`.
    pub fn new(first: std::sync::Arc<Summary>) -> Self {
        let mut a = Self {
            shown: first.clone(),
            paused: false,
            tab: Tab::Locks,
            sort: [(4, false), (4, false), (4, false)],
            filter: String::new(),
            typing: false,
            selected: 0,
            drill: None,
            history: HashMap::new(),
        };
        a.update(first);
        a
    }

    /// A new summary: remembered in the locks' history always, shown unless paused.
    pub fn update(&mut self, s: std::sync::Arc<Summary>) {
        for o in &s.objects {
            let key = (o.pid, o.addr);
            if !self.history.contains_key(&key) && self.history.len() >= MAX_TRACKED {
                continue;
            }
            let h = self.history.entry(key).or_default();
            h.waited.push_back(o.wait_ns.saturating_sub(h.last_total));
            h.last_total = o.wait_ns;
            if h.waited.len() > HISTORY {
                h.waited.pop_front();
            }
        }
        if !self.paused {
            self.shown = s;
        }
    }

    /// A key.
    pub fn key(&mut self, k: KeyEvent) -> Action {
        if k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL) {
            return Action::Quit;
        }
        if self.typing {
            match k.code {
                KeyCode::Enter => self.typing = false,
                KeyCode::Esc => {
                    self.typing = false;
                    self.filter.clear();
                }
                KeyCode::Backspace => {
                    self.filter.pop();
                }
                KeyCode::Char(c) if self.filter.len() < 64 => self.filter.push(c),
                _ => {}
            }
            self.selected = 0;
            return Action::None;
        }
        let t = self.tab as usize;
        let cols = [LOCK_COLS.len(), THREAD_COLS.len(), EDGE_COLS.len()][t];
        match k.code {
            KeyCode::Char('q') => return Action::Quit,
            KeyCode::Char('p') | KeyCode::Char(' ') => self.paused = !self.paused,
            KeyCode::Tab => {
                self.tab = match self.tab {
                    Tab::Locks => Tab::Threads,
                    Tab::Threads => Tab::WaitsFor,
                    Tab::WaitsFor => Tab::Locks,
                };
                self.selected = 0;
                self.drill = None;
            }
            KeyCode::Char('1') => self.tab = Tab::Locks,
            KeyCode::Char('2') => self.tab = Tab::Threads,
            KeyCode::Char('3') => self.tab = Tab::WaitsFor,
            KeyCode::Right | KeyCode::Char('>') => self.sort[t].0 = (self.sort[t].0 + 1) % cols,
            KeyCode::Left | KeyCode::Char('<') => {
                self.sort[t].0 = (self.sort[t].0 + cols - 1) % cols
            }
            KeyCode::Char('r') => self.sort[t].1 = !self.sort[t].1,
            KeyCode::Char('/') => self.typing = true,
            KeyCode::Down | KeyCode::Char('j') => self.selected = self.selected.saturating_add(1),
            KeyCode::Up | KeyCode::Char('k') => self.selected = self.selected.saturating_sub(1),
            KeyCode::Enter if self.tab == Tab::Locks => {
                self.drill = self.rows().get(self.selected).and_then(|r| r.id);
            }
            KeyCode::Esc => self.drill = None,
            _ => {}
        }
        Action::None
    }

    fn thread_name(&self, pid: u32, tid: u32) -> String {
        match self
            .shown
            .top_threads
            .iter()
            .find(|t| t.pid == pid && t.tid == tid)
            .and_then(|t| t.name.as_deref())
        {
            Some(n) => format!("{tid} {n}"),
            None => tid.to_string(),
        }
    }

    /// The current table's rows: filtered, sorted.
    fn rows(&self) -> Vec<TableRow> {
        let s = &self.shown;
        let num = |v: u64| SortKey::Num(v as f64);
        let mut rows: Vec<TableRow> = match self.tab {
            Tab::Locks => s
                .objects
                .iter()
                .map(|o| {
                    let label = o
                        .name
                        .clone()
                        .unwrap_or_else(|| format!("{} {:#x}", o.kind, o.addr));
                    TableRow {
                        cells: vec![
                            label.clone(),
                            o.pid.to_string(),
                            count(o.acquisitions),
                            count(o.contended),
                            ns(o.wait_ns),
                            opt_ns(o.wait_max_ns),
                            opt_ns(o.wait_p99_ns),
                            ns(o.hold_ns),
                        ],
                        keys: vec![
                            SortKey::Text(label),
                            num(u64::from(o.pid)),
                            num(o.acquisitions),
                            num(o.contended),
                            num(o.wait_ns),
                            num(o.wait_max_ns.unwrap_or(0)),
                            num(o.wait_p99_ns.unwrap_or(0)),
                            num(o.hold_ns),
                        ],
                        id: Some((o.pid, o.addr)),
                    }
                })
                .collect(),
            Tab::Threads => s
                .top_threads
                .iter()
                .map(|t| {
                    let label = self.thread_name(t.pid, t.tid);
                    TableRow {
                        cells: vec![
                            label.clone(),
                            t.pid.to_string(),
                            count(t.acquisitions),
                            count(t.contended),
                            ns(t.wait.total_ns),
                            format!("{:.1}%", t.wait_share * 100.0),
                        ],
                        keys: vec![
                            SortKey::Text(label),
                            num(u64::from(t.pid)),
                            num(t.acquisitions),
                            num(t.contended),
                            num(t.wait.total_ns),
                            SortKey::Num(t.wait_share),
                        ],
                        id: None,
                    }
                })
                .collect(),
            Tab::WaitsFor => s
                .waits_for
                .iter()
                .map(|w| {
                    let waiter = self.thread_name(w.pid, w.waiter);
                    let waker = if w.outside {
                        format!("process {} (not traced)", w.waker_pid)
                    } else {
                        self.thread_name(w.waker_pid, w.waker)
                    };
                    let on = w
                        .object_name
                        .clone()
                        .unwrap_or_else(|| format!("{:#x}", w.object));
                    TableRow {
                        cells: vec![
                            waiter.clone(),
                            waker.clone(),
                            on.clone(),
                            count(w.count),
                            ns(w.wait.total_ns),
                        ],
                        keys: vec![
                            SortKey::Text(waiter),
                            SortKey::Text(waker),
                            SortKey::Text(on),
                            num(w.count),
                            num(w.wait.total_ns),
                        ],
                        id: None,
                    }
                })
                .collect(),
        };
        if !self.filter.is_empty() {
            let f = self.filter.to_lowercase();
            rows.retain(|r| r.cells.iter().any(|c| c.to_lowercase().contains(&f)));
        }
        let (col, asc) = self.sort[self.tab as usize];
        rows.sort_by(|a, b| {
            let o = a.keys[col]
                .partial_cmp(&b.keys[col])
                .unwrap_or(std::cmp::Ordering::Equal);
            if asc { o } else { o.reverse() }
        });
        rows
    }

    /// Draws the view.
    pub fn draw(&self, f: &mut Frame) {
        let [head, body, foot] = Layout::vertical([
            Constraint::Length(3),
            Constraint::Min(3),
            Constraint::Length(1),
        ])
        .areas(f.area());
        let s = &self.shown;
        let lost = s.losses.ring_full + s.losses.pending_full;
        let mut status = format!(
            "rtm-trace live  {} traced  {} threads  {} events  lost {}",
            ns(s.elapsed_ns),
            count(s.threads as u64),
            count(s.reader.records),
            count(lost)
        );
        if self.paused {
            status.push_str("  [PAUSED]");
        }
        let targets: Vec<String> = s
            .targets
            .iter()
            .map(|t| format!("{} {}", t.pid, t.comm.as_deref().unwrap_or("?")))
            .collect();
        f.render_widget(
            Paragraph::new(vec![
                Line::from(status).bold(),
                Line::from(escape(&format!("targets: {}", targets.join(", "))).into_owned()),
                Line::from(
                    escape(&format!(
                        "finding: {}",
                        s.finding.as_deref().unwrap_or("none yet")
                    ))
                    .into_owned(),
                ),
            ]),
            head,
        );
        if let Some(id) = self.drill {
            self.draw_drill(f, body, id);
        } else {
            self.draw_table(f, body);
        }
        let help = if self.typing {
            format!(
                "filter: {}_   (Enter apply, Esc clear)",
                escape(&self.filter)
            )
        } else {
            "q quit  p pause  Tab/1-3 table  </> sort column  r reverse  / filter  Enter drill in  Esc back".to_owned()
        };
        f.render_widget(Paragraph::new(help).dim(), foot);
    }

    fn draw_table(&self, f: &mut Frame, area: ratatui::layout::Rect) {
        let (title, cols): (&str, &[&str]) = match self.tab {
            Tab::Locks => ("top locks", &LOCK_COLS),
            Tab::Threads => ("threads", &THREAD_COLS),
            Tab::WaitsFor => ("who waited for whom", &EDGE_COLS),
        };
        let (sorted, asc) = self.sort[self.tab as usize];
        let header = Row::new(cols.iter().enumerate().map(|(i, c)| {
            let mark = if i == sorted {
                if asc { " ^" } else { " v" }
            } else {
                ""
            };
            Cell::from(format!("{c}{mark}"))
        }))
        .style(Style::new().add_modifier(Modifier::BOLD | Modifier::REVERSED));
        let rows = self.rows();
        let selected = self.selected.min(rows.len().saturating_sub(1));
        let texts = text_columns(self.tab);
        let text_width = text_width(area.width, cols.len(), texts);
        let widths: Vec<Constraint> = (0..cols.len())
            .map(|i| {
                Constraint::Length(if i < texts {
                    text_width as u16
                } else {
                    NUMBER_WIDTH as u16
                })
            })
            .collect();
        let filter = if self.filter.is_empty() {
            String::new()
        } else {
            format!(" (filter: {})", escape(&self.filter))
        };
        let table = Table::new(
            rows.into_iter().map(|r| {
                Row::new(r.cells.into_iter().enumerate().map(|(i, c)| {
                    let c = escape(&c);
                    Cell::from(if i < texts {
                        middle(&c, text_width)
                    } else {
                        c.into_owned()
                    })
                }))
            }),
            widths,
        )
        .header(header)
        .block(Block::bordered().title(format!(" {title}{filter} ")))
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED));
        let mut state = TableState::default().with_selected(Some(selected));
        f.render_stateful_widget(table, area, &mut state);
    }

    fn draw_drill(&self, f: &mut Frame, area: ratatui::layout::Rect, id: (u32, u64)) {
        let s = &self.shown;
        let o = s.objects.iter().find(|o| (o.pid, o.addr) == id);
        let label = o.map_or_else(
            || format!("{:#x}", id.1),
            |o| {
                o.name
                    .clone()
                    .unwrap_or_else(|| format!("{} {:#x}", o.kind, o.addr))
            },
        );
        let [top, spark, rest] = Layout::vertical([
            Constraint::Length(3),
            Constraint::Length(6),
            Constraint::Min(3),
        ])
        .areas(area);
        let facts = o.map_or_else(String::new, |o| {
            format!(
                "acquired {}  contended {}  waited {}  max {}  held {}  threads {}",
                count(o.acquisitions),
                count(o.contended),
                ns(o.wait_ns),
                opt_ns(o.wait_max_ns),
                ns(o.hold_ns),
                o.threads
            )
        });
        f.render_widget(
            Paragraph::new(facts).block(Block::bordered().title(format!(
                " {} (pid {}) ",
                escape(&label),
                id.0
            ))),
            top,
        );
        let hist: Vec<u64> = self
            .history
            .get(&id)
            .map_or_else(Vec::new, |h| h.waited.iter().copied().collect());
        let last = hist.last().copied().unwrap_or(0);
        f.render_widget(
            Sparkline::default()
                .data(&hist)
                .block(Block::bordered().title(format!(
                    " time waited per interval, last {} intervals (latest {}) ",
                    hist.len(),
                    ns(last)
                ))),
            spark,
        );
        let rows: Vec<Row> = s
            .waits_for
            .iter()
            .filter(|w| w.pid == id.0 && w.object == id.1)
            .map(|w| {
                Row::new(vec![
                    Cell::from(escape(&self.thread_name(w.pid, w.waiter)).into_owned()),
                    Cell::from(escape(&self.thread_name(w.waker_pid, w.waker)).into_owned()),
                    Cell::from(count(w.count)),
                    Cell::from(ns(w.wait.total_ns)),
                ])
            })
            .collect();
        f.render_widget(
            Table::new(
                rows,
                [
                    Constraint::Min(24),
                    Constraint::Min(24),
                    Constraint::Length(10),
                    Constraint::Length(12),
                ],
            )
            .header(Row::new(["waiter", "woken by", "waits", "waited"]).bold())
            .block(Block::bordered().title(" who woke the waiters (Esc: back) ")),
            rest,
        );
    }
}

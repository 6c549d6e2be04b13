//! `/debug/pprof/contention`: the traced processes' contended waits as a pprof profile
//! (like Go's `/debug/pprof/mutex` and `/debug/pprof/block`), built from the sampled
//! stacks the engines count. Without `seconds` it covers the waits since the agent
//! started (of the processes it still remembers: an exited one's go with its series);
//! with `seconds=N` (1 to [`MAX_SECONDS`]) the engines count a window of their own for
//! N seconds and the answer is that window's. `by=waker` locates the samples at the
//! waker's stack (where a mutex was unlocked) rather than the waiter's. Sample types `contentions`/`count` and
//! `delay`/`nanoseconds`, the waiter's stack as the location, the lock's name, wait
//! kind and waker as labels (see `output/pprof.rs`). Bounded: at most
//! [`MAX_STACK_ROWS`] samples (the rest in one `[other_stacks]` sample), at most
//! [`MAX_WINDOWS`] profiles taken at once (503 beyond), and a client that goes away
//! ends its window.

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use hyper::{Request, StatusCode};
use tokio::sync::Semaphore;

use crate::{
    engine::{EngineHandle, ProfileAsk, ProfileData, ProfileRefused},
    model::{
        stacks::{MAX_STACK_ROWS, MAX_WINDOWS, StacksView},
        wait_kind::WaitKind,
    },
    output::pprof::Keyed,
};

/// The path served.
pub const PATH: &str = "/debug/pprof/contention";

/// The longest window a request may ask for, s (a connection lasts a minute at most).
pub const MAX_SECONDS: u64 = 50;

/// The engines to ask, and what bounds the requests.
pub struct Profiles {
    engines: Vec<EngineHandle>,
    next_window: AtomicU64,
    slots: Arc<Semaphore>,
    started: Instant,
    started_unix_ns: u64,
}

/// An answer: its status and body (a gzip-compressed profile, or a plain-text reason).
pub struct Answer {
    /// The HTTP status.
    pub status: StatusCode,
    /// True when the body is a profile.
    pub profile: bool,
    /// The body.
    pub body: Vec<u8>,
}

impl Answer {
    fn text(status: StatusCode, s: impl Into<String>) -> Self {
        Self {
            status,
            profile: false,
            body: s.into().into_bytes(),
        }
    }
}

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// What a request's query asks for: `seconds` (None: since the start) and `by=waiter`
/// (the default) or `by=waker`; Err: what is wrong with it.
pub fn query(query: Option<&str>) -> Result<(Option<u64>, Keyed), String> {
    let (mut secs, mut keyed) = (None, Keyed::Waiter);
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "seconds" => {
                let n: u64 = v
                    .parse()
                    .map_err(|_| "seconds must be a whole number of seconds".to_owned())?;
                if !(1..=MAX_SECONDS).contains(&n) {
                    return Err(format!(
                        "seconds must be from 1 to {MAX_SECONDS} (a connection lasts a minute at most); leave it out for every wait since the agent started"
                    ));
                }
                secs = Some(n);
            }
            "by" => {
                keyed = match v {
                    "waiter" => Keyed::Waiter,
                    "waker" => Keyed::Waker,
                    _ => {
                        return Err(
                            "by must be waiter (where threads waited, the default) or waker (the code that woke them: for a mutex, its unlock)".into(),
                        );
                    }
                }
            }
            _ => {}
        }
    }
    Ok((secs, keyed))
}

/// Closes its window in every engine when dropped (the answer was made, or the client
/// went away mid-window).
struct Window<'a> {
    engines: &'a [EngineHandle],
    id: u64,
    open: bool,
}

impl Drop for Window<'_> {
    fn drop(&mut self) {
        if self.open {
            for e in self.engines {
                e.close_window(self.id);
            }
        }
    }
}

impl Profiles {
    /// Profiles of what `engines` trace.
    pub fn new(engines: Vec<EngineHandle>) -> Self {
        Self {
            engines,
            next_window: AtomicU64::new(1),
            slots: Arc::new(Semaphore::new(MAX_WINDOWS)),
            started: Instant::now(),
            started_unix_ns: unix_ns(),
        }
    }

    /// Answers a GET of [`PATH`].
    pub async fn answer<B>(&self, req: &Request<B>) -> Answer {
        let (secs, keyed) = match query(req.uri().query()) {
            Ok(q) => q,
            Err(why) => return Answer::text(StatusCode::BAD_REQUEST, format!("{why}\n")),
        };
        let Ok(_slot) = self.slots.clone().try_acquire_owned() else {
            return Answer::text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("{MAX_WINDOWS} profiles are being taken already; try again later\n"),
            );
        };
        let (parts, start_ns, duration_ns) = match secs {
            None => {
                let mut parts = Vec::new();
                for e in &self.engines {
                    match e.profile(ProfileAsk::SinceStart).await {
                        Ok(Some(p)) => parts.push(p),
                        Ok(None) => {}
                        Err(e) => return refused(e),
                    }
                }
                let d = self.started.elapsed().as_nanos() as u64;
                (parts, self.started_unix_ns, d)
            }
            Some(n) => {
                let id = self.next_window.fetch_add(1, Ordering::Relaxed);
                let mut window = Window {
                    engines: &self.engines,
                    id,
                    open: true,
                };
                for e in &self.engines {
                    if let Err(e) = e.profile(ProfileAsk::Open(id)).await {
                        return refused(e);
                    }
                }
                let (start, at) = (unix_ns(), Instant::now());
                tokio::time::sleep(Duration::from_secs(n)).await;
                let mut parts = Vec::new();
                for e in &self.engines {
                    match e.profile(ProfileAsk::Close(id)).await {
                        Ok(Some(p)) => parts.push(p),
                        Ok(None) => {}
                        Err(e) => return refused(e),
                    }
                }
                window.open = false;
                (parts, start, at.elapsed().as_nanos() as u64)
            }
        };
        let merged = merge(parts);
        let kind_of =
            |pid: u32, addr: u64| merged.kinds.get(&(pid, addr)).copied().unwrap_or_default();
        let raw =
            crate::output::pprof::encode(&merged.view, keyed, &kind_of, start_ns, duration_ns);
        Answer {
            status: StatusCode::OK,
            profile: true,
            body: crate::output::pprof::gzip(&raw),
        }
    }
}

fn refused(e: Option<ProfileRefused>) -> Answer {
    match e {
        Some(ProfileRefused::StacksOff) => Answer::text(
            StatusCode::NOT_FOUND,
            "no contention profiles: call stacks are off in the agent's config ([stacks] enabled = false or rate = 0)\n",
        ),
        Some(ProfileRefused::Busy) => Answer::text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{MAX_WINDOWS} profiles are being taken already; try again later\n"),
        ),
        Some(e @ ProfileRefused::NoWindow) => {
            Answer::text(StatusCode::SERVICE_UNAVAILABLE, format!("{e}; try again\n"))
        }
        None => Answer::text(StatusCode::SERVICE_UNAVAILABLE, "the agent is stopping\n"),
    }
}

/// The engines' profiles as one: their rows side by side, most wait first, at most
/// [`MAX_STACK_ROWS`] (the rest summed).
fn merge(parts: Vec<ProfileData>) -> ProfileData {
    let mut view = StacksView::default();
    let mut kinds: HashMap<(u32, u64), WaitKind> = HashMap::new();
    for p in parts {
        view.rows.extend(p.view.rows);
        view.rows_total += p.view.rows_total;
        view.other_waits += p.view.other_waits;
        view.other_wait_ns = view.other_wait_ns.saturating_add(p.view.other_wait_ns);
        kinds.extend(p.kinds);
    }
    view.rows.sort_by_key(|r| std::cmp::Reverse(r.edge.wait_ns));
    if view.rows.len() > MAX_STACK_ROWS {
        for r in view.rows.drain(MAX_STACK_ROWS..) {
            view.other_waits += r.edge.waits;
            view.other_wait_ns = view.other_wait_ns.saturating_add(r.edge.wait_ns);
        }
    }
    ProfileData { view, kinds }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::stacks::{StackEdge, StackRowView};

    #[test]
    fn the_query_is_checked() {
        let secs = |q| query(Some(q)).map(|q| q.0);
        assert_eq!(query(None), Ok((None, Keyed::Waiter)));
        assert_eq!(secs("debug=0"), Ok(None));
        assert_eq!(secs("seconds=5&debug=0"), Ok(Some(5)));
        assert_eq!(
            query(Some("by=waker&seconds=2")),
            Ok((Some(2), Keyed::Waker))
        );
        for bad in [
            "seconds=0",
            "seconds=51",
            "seconds=x",
            "seconds=-1",
            "by=lock",
        ] {
            assert!(query(Some(bad)).is_err(), "{bad}");
        }
    }

    fn row(pid: u32, wait_ns: u64) -> StackRowView {
        StackRowView {
            pid,
            object: 0x10,
            object_name: None,
            waker_pid: pid,
            edge: StackEdge {
                waits: 1,
                wait_ns,
                ..StackEdge::default()
            },
            waiter: vec!["f+0x1 (a.c:1)".into()],
            waker: Vec::new(),
        }
    }

    #[test]
    fn engines_rows_merge_most_wait_first_and_the_rest_are_summed() {
        let part = |pid, n: u64, base| ProfileData {
            view: StacksView {
                rows: (0..n).map(|i| row(pid, base + i)).collect(),
                rows_total: n as usize,
                other_waits: 2,
                other_wait_ns: 7,
                ..StacksView::default()
            },
            kinds: HashMap::new(),
        };
        let m = merge(vec![part(1, 400, 0), part(2, 400, 1_000)]);
        assert_eq!(m.view.rows.len(), MAX_STACK_ROWS);
        assert_eq!(m.view.rows[0].pid, 2);
        assert_eq!(m.view.rows[0].edge.wait_ns, 1_399);
        assert_eq!(m.view.rows_total, 800);
        // 300 rows summed, plus each part's own.
        assert_eq!(m.view.other_waits, 300 + 4);
        let summed: u64 = (0..300).sum::<u64>() + 14;
        assert_eq!(m.view.other_wait_ns, summed);
    }
}

//! Basic auth for the endpoint: bcrypt hashes checked off the endpoint's thread, with
//! the checks that passed remembered and the checks running at once bounded.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    sync::{Arc, Mutex},
};

use base64::Engine as _;

/// Most bcrypt cost taken: 2^16 rounds is ~4 s a check.
pub(super) const MAX_COST: u32 = 16;

/// Basic auth against bcrypt hashes. A bcrypt check costs tens of milliseconds by
/// design, so each user and password that passed is remembered (as a keyed hash, never
/// the password), at most CACHE_ENTRIES of them: a scraper every 15 s pays it once.
/// Checks run off the endpoint's thread (two at once on its blocking threads), at most
/// MAX_CHECKS running or waiting, counted until each ends even when its client has gone:
/// a stream of wrong passwords neither stalls `/healthz` nor queues work without bound
/// (past it, 503 until a check ends).
pub struct BasicAuth {
    pub(super) users: HashMap<String, String>,
    key: ring::hmac::Key,
    passed: Mutex<Passed>,
    pub(super) checks: Arc<tokio::sync::Semaphore>,
}

/// Most bcrypt checks running or waiting at once.
pub const MAX_CHECKS: usize = 8;

/// Most users and passwords remembered as passed.
pub const CACHE_ENTRIES: usize = 64;

#[derive(Default)]
struct Passed {
    set: HashSet<[u8; 32]>,
    order: VecDeque<[u8; 32]>,
}

impl Passed {
    fn insert(&mut self, k: [u8; 32]) {
        if !self.set.insert(k) {
            return;
        }
        self.order.push_back(k);
        while self.order.len() > CACHE_ENTRIES {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
    }
}

/// What an `Authorization` header came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Let in.
    Pass,
    /// Refused: 401.
    Fail,
    /// Too many checks under way: 503.
    Busy,
}

impl BasicAuth {
    pub(super) fn new(users: HashMap<String, String>) -> Self {
        let rng = ring::rand::SystemRandom::new();
        let key = ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &rng)
            .expect("the system's random source");
        Self {
            users,
            key,
            passed: Mutex::new(Passed::default()),
            checks: Arc::new(tokio::sync::Semaphore::new(MAX_CHECKS)),
        }
    }

    pub(super) fn tag(&self, user: &str, password: &[u8]) -> [u8; 32] {
        let mut ctx = ring::hmac::Context::with_key(&self.key);
        ctx.update(&(user.len() as u64).to_le_bytes());
        ctx.update(user.as_bytes());
        ctx.update(password);
        let mut out = [0; 32];
        out.copy_from_slice(ctx.sign().as_ref());
        out
    }

    /// Splits `Basic base64(user:password)`; None when it is not that.
    pub(super) fn credentials(header: Option<&[u8]>) -> Option<(String, Vec<u8>)> {
        let h = std::str::from_utf8(header?).ok()?.trim();
        let (scheme, b64) = h.split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("basic") {
            return None;
        }
        let raw = base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .ok()?;
        let colon = raw.iter().position(|&b| b == b':')?;
        let user = String::from_utf8(raw[..colon].to_vec()).ok()?;
        Some((user, raw[colon + 1..].to_vec()))
    }

    /// Checks an `Authorization` header at once when it can be (absent, malformed, or a
    /// user and password that passed before); None when a bcrypt check is needed.
    pub fn quick(&self, header: Option<&[u8]>) -> Option<Verdict> {
        let Some((user, password)) = Self::credentials(header) else {
            return Some(Verdict::Fail);
        };
        let tag = self.tag(&user, &password);
        let passed = self.passed.lock().unwrap_or_else(|e| e.into_inner());
        passed.set.contains(&tag).then_some(Verdict::Pass)
    }

    /// The full check (bcrypt; slow by design): to run off the endpoint's thread.
    pub fn slow(&self, header: Option<&[u8]>) -> Verdict {
        let Some((user, password)) = Self::credentials(header) else {
            return Verdict::Fail;
        };
        let ok = match self.users.get(&user) {
            Some(hash) => bcrypt::verify(&password, hash).unwrap_or(false),
            None => {
                // As long as for a known user: the time does not tell who exists.
                if let Some(hash) = self.users.values().next() {
                    let _ = bcrypt::verify(b"\0not a password", hash);
                }
                false
            }
        };
        if !ok {
            return Verdict::Fail;
        }
        let tag = self.tag(&user, &password);
        self.passed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(tag);
        Verdict::Pass
    }

    /// Checks a header: the quick way, else bcrypt on the runtime's blocking threads.
    pub async fn check(self: &Arc<Self>, header: Option<Vec<u8>>) -> Verdict {
        if let Some(v) = self.quick(header.as_deref()) {
            return v;
        }
        let Ok(permit) = self.checks.clone().try_acquire_owned() else {
            return Verdict::Busy;
        };
        let me = self.clone();
        tokio::task::spawn_blocking(move || {
            let v = me.slow(header.as_deref());
            drop(permit);
            v
        })
        .await
        .unwrap_or(Verdict::Fail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_of_passed_checks_is_bounded() {
        let mut p = Passed::default();
        for i in 0..(CACHE_ENTRIES as u8 + 10) {
            p.insert([i; 32]);
            p.insert([i; 32]);
        }
        assert_eq!(p.set.len(), CACHE_ENTRIES);
        assert_eq!(p.order.len(), CACHE_ENTRIES);
        assert!(!p.set.contains(&[0; 32]), "the oldest went first");
        assert!(p.set.contains(&[CACHE_ENTRIES as u8 + 9; 32]));
    }
}

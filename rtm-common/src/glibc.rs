//! Decoding a glibc `pthread_mutex_t` read at a futex wait's word: its holder.

/// Bytes of a glibc `pthread_mutex_t` read at a futex wait's word to find its holder:
/// `int __lock; unsigned __count; int __owner; unsigned __nusers; int __kind`.
pub const MUTEX_HEAD_WORDS: usize = 5;

/// The holder of the glibc mutex whose head (`words`, read at the futex word) a thread
/// waits on with futex command `cmd` (`op & FUTEX_CMD_MASK`): every mutex type keeps its
/// owner's TID in `__owner`; a normal, recursive, error-checking or adaptive mutex's
/// waiters sleep on `__lock` with the value 2; a robust one's `__lock` holds the owner
/// (with the waiters bit); a priority-inheritance one is waited on with FUTEX_LOCK_PI
/// (or LOCK_PI2), its word holding the owner. 0 for anything else: not a mutex, or an
/// owner that died. An owner past the largest TID Linux gives (`PID_MAX_LIMIT`) is no
/// owner: glibc's stdio lock (`_IO_lock_t`) also sleeps on a word of 2, with a pointer
/// where a mutex has `__owner`. A locked glibc mutex also counts its user in `__nusers`
/// (set with `__owner`, cleared after it) and keeps `__count` 0 unless it is recursive
/// or robust:
/// a word that is no glibc mutex (a Rust `std::sync::Mutex`, whose protected value sits
/// where `__owner` would be) fails those and says no holder rather than inventing one.
/// The layout is checked against the installed glibc by a test.
pub const fn mutex_holder(cmd: u32, words: [u32; MUTEX_HEAD_WORDS]) -> u32 {
    const TID_MASK: u32 = 0x3fff_ffff;
    /// The kernel's PID_MAX_LIMIT on 64-bit: pid_max cannot be raised past it.
    const PID_MAX_LIMIT: u32 = 4 * 1024 * 1024;
    const KNOWN_KIND: u32 = 3 | 16 | 32 | 64 | 128 | 256 | 512;
    const KIND_ROBUST: u32 = 16;
    const KIND_PI_PP: u32 = 32 | 64;
    const LOCK_PI: u32 = 6;
    const LOCK_PI2: u32 = 13;
    const KIND_RECURSIVE: u32 = 1;
    let (lock, count, owner, users, kind) = (words[0], words[1], words[2], words[3], words[4]);
    if cmd == LOCK_PI || cmd == LOCK_PI2 {
        let tid = lock & TID_MASK;
        return if tid <= PID_MAX_LIMIT { tid } else { 0 };
    }
    if kind & !KNOWN_KIND != 0 || kind & KIND_PI_PP != 0 || owner == 0 || owner > PID_MAX_LIMIT {
        return 0;
    }
    // Held: one user at least (no more than there are threads), and a count only when
    // recursive or robust (glibc counts a robust mutex's one hold).
    let counted = kind & 3 == KIND_RECURSIVE || kind & KIND_ROBUST != 0;
    if users == 0 || users > PID_MAX_LIMIT || (!counted && count != 0) {
        return 0;
    }
    let fits = if kind & KIND_ROBUST != 0 {
        lock & TID_MASK == owner
    } else {
        lock == 2
    };
    if fits { owner } else { 0 }
}

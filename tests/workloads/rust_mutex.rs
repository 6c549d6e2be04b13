//! A Rust program whose lock is `std::sync::Mutex`: a futex word that is no glibc
//! mutex. The protected counter sits where glibc keeps `__owner`, so a tracer that reads
//! the word's neighbours as a glibc mutex invents holders from the counter's values.
//!
//!   rust_mutex THREADS ROUNDS
//!
//! Each thread takes the lock ROUNDS times and holds it ~20 us, so waiters sleep.
//! Prints `lock=ADDR` (the futex word), then `counter=N` at the end.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

fn main() {
    let mut args = std::env::args().skip(1);
    let threads: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(4);
    let rounds: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(2_000);
    // Starts high, as a long-running program's counters are: every value is below the
    // largest TID Linux gives, as a thread id would be.
    let lock = Arc::new(Mutex::new(1_000_000u64));
    println!("lock={:#x}", Arc::as_ptr(&lock) as usize);
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let lock = Arc::clone(&lock);
            std::thread::spawn(move || {
                for _ in 0..rounds {
                    let mut c = lock.lock().expect("not poisoned");
                    *c += 1;
                    let t0 = Instant::now();
                    while t0.elapsed() < Duration::from_micros(20) {
                        std::hint::spin_loop();
                    }
                    drop(c);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    println!("counter={}", *lock.lock().expect("not poisoned"));
}

//! `rtm-trace`: the binary's edge. Parses the command line, runs a session, and turns
//! errors into a message on stderr and an exit code.
use std::process::ExitCode;

use rtm::{Action, Cli};

fn main() -> ExitCode {
    // While the probes load, large blocks (parsing the kernel's BTF takes ~19 MiB for a
    // moment) are mapped on their own and unmapped when freed. By default glibc raises
    // this threshold each time such a block is freed, after which the next ones come
    // from the heap and stay resident: the BTF parsed a second time at load raised the
    // tracer's peak memory from 23 to 37 MiB. The session raises it once loaded
    // (session::trace), so the model's growing tables reuse heap memory.
    // SAFETY: mallopt only tunes the allocator; no other thread exists yet.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024) };
    let result = match Cli::parse_action() {
        Action::Trace(cli) => {
            init_logging(if cli.verbose { "debug" } else { "warn" });
            rtm::trace(*cli)
        }
        Action::Report(cli) => {
            init_logging("warn");
            rtm::report(cli)
        }
        Action::Merge(cli) => {
            init_logging("warn");
            rtm::merge(cli)
        }
        Action::Check(cli) => {
            init_logging("warn");
            rtm::check(cli)
        }
        Action::Agent(cli) => {
            init_logging("warn");
            rtm::agent(cli)
        }
        Action::Generate(cli) => {
            return match rtm::generate(&cli) {
                Ok(_) => ExitCode::SUCCESS,
                Err(e) => {
                    rtm::say(&format!("rtm-trace: error: {e}"));
                    ExitCode::FAILURE
                }
            };
        }
    };
    match result {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            // One line each (see `say`): the error, then each cause not already said.
            let first = format!("rtm-trace: error: {e}");
            rtm::say(&first);
            let mut said = first;
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                let text = s.to_string();
                if !said.contains(&text) {
                    rtm::say(&format!("  caused by: {text}"));
                    said.push_str(&text);
                }
                source = s.source();
            }
            ExitCode::from(e.exit_code() as u8)
        }
    }
}

/// Minimal stderr logger for `log` records (aya logs through `log`).
fn init_logging(level: &str) {
    struct Stderr(log::LevelFilter);
    impl log::Log for Stderr {
        fn enabled(&self, m: &log::Metadata) -> bool {
            // aya's own debug output (relocations, BTF) is for aya developers.
            let cap = if m.target().starts_with("aya") {
                self.0.min(log::LevelFilter::Info)
            } else {
                self.0
            };
            m.level() <= cap
        }
        fn log(&self, r: &log::Record) {
            if self.enabled(r.metadata()) {
                rtm::say!(
                    "rtm-trace: {}: {}",
                    r.level().as_str().to_lowercase(),
                    r.args()
                );
            }
        }
        fn flush(&self) {}
    }
    let filter = level.parse().unwrap_or(log::LevelFilter::Warn);
    if log::set_boxed_logger(Box::new(Stderr(filter))).is_ok() {
        log::set_max_level(filter);
    }
}

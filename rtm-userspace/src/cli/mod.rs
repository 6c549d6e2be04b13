//! Command line: parsed and checked by clap, then turned into a [`TraceConfig`] (over
//! the one `--config` gives, if any). Nothing below the front end sees these types.
//!
//! `rtm-trace [trace]` is the default subcommand: with none, the trace's options are
//! taken at the top level, so `rtm-trace -p PID` and `rtm-trace -- ./app` need no word
//! before them. Everything after `--` is the command to launch, never a subcommand
//! (`rtm-trace -- top` launches top).
//!
//! [`TraceConfig`]: crate::config::TraceConfig

mod commands;
pub mod generate;
mod trace;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

pub use commands::{AgentCli, BlockedCli, CheckCli, MergeCli, ReportCli};
pub use generate::GenerateCli;
pub use trace::{TraceCli, UsageError, check_targets};

/// The examples under the top-level help (and in the man page).
const EXAMPLES: &str = "EXAMPLES:\n  \
    sudo rtm-trace --pid 1234                 trace PID 1234 until Ctrl-C\n  \
    sudo rtm-trace -p 1234 -d 10 --json out.json   10 seconds, graph to out.json\n  \
    sudo rtm-trace -i 1 -- ./app --threads 8    launch ./app, summary every second\n  \
    sudo rtm-trace top -p 1234                live view: top locks, threads, wakers\n  \
    sudo rtm-trace blocked -p 1234            who blocks whom now, any deadlock\n  \
    sudo rtm-trace -m full --html r.html --timeline t.pftrace -- ./app\n  \
    rtm-trace report out.json --html r.html   render a saved trace (no root)\n  \
    rtm-trace merge a.json b.json             join MPI parts written on several nodes\n  \
    rtm-trace help agent                      one subcommand's options\n\n\
    Needs root (or CAP_BPF and CAP_PERFMON) and a kernel with BPF and uprobes.\n\
    The report goes to stdout (or --output); messages go to stderr.";

/// Attach to running processes (or launch one) and show where their threads wait on each
/// other: which locks are contended, for how long, by whom, and who they waited for.
#[derive(Debug, Parser)]
#[command(
    name = "rtm-trace",
    version,
    propagate_version = true,
    args_conflicts_with_subcommands = true,
    subcommand_value_name = "SUBCOMMAND",
    subcommand_help_heading = "Subcommands",
    after_help = EXAMPLES
)]
pub struct Cli {
    /// The trace's options, when no subcommand is given (`trace` is the default).
    #[command(flatten)]
    pub trace: TraceCli,

    /// What to do, when not a trace.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Trace processes (the default: `rtm-trace -p PID` is `rtm-trace trace -p PID`)
    Trace(TraceCli),
    /// Trace with a live view in the terminal (`--live`): top locks, threads, wakers
    Top(TraceCli),
    /// Show which threads are blocked now, on what, held by whom, and any deadlock
    /// (`--blocked`: a snapshot, nothing is traced)
    Blocked(BlockedCli),
    /// Render a trace saved with --json: the text report, and the HTML report and
    /// Graphviz graphs, without tracing again (no root needed)
    Report(ReportCli),
    /// Join the task graphs several nodes wrote (rtm-trace --json) for one MPI job into
    /// one cluster-wide task graph and report
    Merge(MergeCli),
    /// Load every eBPF program as each mode would and say which features work on this
    /// kernel, and why not where one does not (nothing is traced)
    Check(CheckCli),
    /// Watch the processes a config selects, all the time, and serve their lock
    /// contention as Prometheus metrics (/metrics, /healthz, /readyz)
    Agent(AgentCli),
}

/// What a command line asks for, once the default subcommand is resolved.
#[derive(Debug)]
pub enum Action {
    /// Trace (or, with `blocked`, take a snapshot of blocked threads).
    Trace(Box<TraceCli>),
    /// `rtm-trace report`.
    Report(ReportCli),
    /// `rtm-trace merge`.
    Merge(MergeCli),
    /// `rtm-trace check`.
    Check(CheckCli),
    /// `rtm-trace agent`.
    Agent(AgentCli),
    /// `rtm-trace __generate`.
    Generate(GenerateCli),
}

/// The packaging hook's name: not a subcommand of the documented command line.
const GENERATE: &str = "__generate";

impl Cli {
    /// The command line the man pages and completions describe: the binary's, less
    /// its packaging hook.
    pub fn clap_command() -> clap::Command {
        Self::command()
    }

    /// Parses the process's arguments; on a usage error (or --help), says it and exits.
    pub fn parse_action() -> Action {
        Self::try_parse_action(std::env::args_os()).unwrap_or_else(|e| e.exit())
    }

    /// Parses `args` (the program's name first): [`Cli`], or the hidden packaging hook
    /// `rtm-trace __generate man|completions DIR`, added here only so that the pages
    /// and completions generated from [`Cli::clap_command`] do not offer it.
    pub fn try_parse_action<I, T>(args: I) -> Result<Action, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let hook = GenerateCli::augment_args(clap::Command::new(GENERATE).hide(true));
        let matches = Self::command()
            .subcommand(hook)
            .try_get_matches_from(args)?;
        if let Some(m) = matches.subcommand_matches(GENERATE) {
            return GenerateCli::from_arg_matches(m).map(Action::Generate);
        }
        Self::from_arg_matches(&matches).map(Self::action)
    }

    /// What to do: the subcommand, or a trace with the top-level options.
    pub fn action(self) -> Action {
        match self.command {
            None => Action::Trace(Box::new(self.trace)),
            Some(Command::Trace(t)) => Action::Trace(Box::new(t)),
            Some(Command::Top(mut t)) => {
                t.live = true;
                Action::Trace(Box::new(t))
            }
            Some(Command::Blocked(b)) => Action::Trace(Box::new(b.into())),
            Some(Command::Report(r)) => Action::Report(r),
            Some(Command::Merge(m)) => Action::Merge(m),
            Some(Command::Check(c)) => Action::Check(c),
            Some(Command::Agent(a)) => Action::Agent(a),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn action(args: &[&str]) -> Result<Action, clap::Error> {
        Cli::try_parse_action(std::iter::once("rtm-trace").chain(args.iter().copied()))
    }

    fn trace(args: &[&str]) -> TraceCli {
        match action(args).unwrap() {
            Action::Trace(t) => *t,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn the_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn trace_is_the_default_subcommand() {
        assert_eq!(trace(&["-p", "5"]).pids, vec![5]);
        assert_eq!(trace(&["trace", "-p", "5"]).pids, vec![5]);
        assert!(trace(&["--live", "-p", "5"]).live);
        assert!(trace(&["top", "-p", "5"]).live);
        assert!(trace(&["--blocked", "-p", "5"]).blocked);
        let b = trace(&["blocked", "-p", "5", "--json", "b.json"]);
        assert!(b.blocked && b.pids == vec![5] && b.json.is_some());
        assert!(
            trace(&[]).pids.is_empty(),
            "no target is the trace's usage error"
        );
    }

    #[test]
    fn after_the_separator_everything_is_the_command() {
        for word in [
            "top", "report", "merge", "agent", "check", "blocked", "help",
        ] {
            let t = trace(&["--", word, "report"]);
            assert_eq!(t.command, vec![word, "report"], "{word}");
            let t = trace(&["-v", "--", word]);
            assert_eq!(t.command, vec![word], "{word}");
            let t = trace(&["trace", "--", word]);
            assert_eq!(t.command, vec![word], "{word}");
        }
    }

    #[test]
    fn subcommands_take_their_own_options() {
        assert!(matches!(
            action(&["report", "x.json", "--top", "3"]).unwrap(),
            Action::Report(r) if r.top == 3
        ));
        assert!(matches!(
            action(&["merge", "a.json", "b.json"]).unwrap(),
            Action::Merge(m) if m.parts.len() == 2
        ));
        assert!(matches!(
            action(&["agent", "--check-config", "--config", "a.toml"]).unwrap(),
            Action::Agent(a) if a.check_config
        ));
        assert!(matches!(action(&["check", "-v"]).unwrap(), Action::Check(c) if c.verbose));
        // A trace option before a subcommand is refused, not silently dropped.
        assert!(action(&["-p", "1", "report", "x.json"]).is_err());
        assert!(action(&["report"]).is_err());
    }

    #[test]
    fn sub_help_names_the_subcommand() {
        for (args, usage) in [
            (&["help", "agent"][..], "Usage: rtm-trace agent "),
            (&["agent", "--help"], "Usage: rtm-trace agent "),
            (&["help", "blocked"], "Usage: rtm-trace blocked "),
            (&["--help"], "Usage: rtm-trace [OPTIONS]"),
        ] {
            let e = action(args).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::DisplayHelp, "{args:?}");
            let text = e.to_string();
            assert!(text.contains(usage), "{args:?}: {text}");
        }
        let top = Cli::command().render_help().to_string();
        for heading in [
            "Targets:",
            "Mode:",
            "Outputs:",
            "Stacks:",
            "Limits:",
            "Subcommands:",
        ] {
            assert!(top.contains(heading), "{heading}: {top}");
        }
        assert!(!top.contains("__generate"), "{top}");
    }

    #[test]
    fn the_packaging_hook_parses_but_is_not_documented() {
        assert!(matches!(
            action(&["__generate", "man", "/tmp/x"]).unwrap(),
            Action::Generate(g) if matches!(g.what, generate::Generated::Man)
        ));
        assert!(Cli::clap_command().find_subcommand(GENERATE).is_none());
        let help = action(&["--help"]).unwrap_err().to_string();
        assert!(help.contains("agent") && !help.contains(GENERATE), "{help}");
    }
}

//! Man pages and shell completions, generated from the command line the binary parses
//! (`rtm-trace __generate man|completions DIR`, run by `cargo xtask dist`), so the
//! package's documentation of the options cannot drift from them.

use std::{fs, io, path::PathBuf};

use clap::{Args, ValueEnum};
use clap_complete::Shell;

/// What `__generate` writes.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Generated {
    /// rtm-trace.8 and a page per subcommand (rtm-trace-agent.8, ...).
    Man,
    /// rtm-trace.bash, _rtm-trace (zsh) and rtm-trace.fish.
    Completions,
}

/// `rtm-trace __generate`: write the man pages or the completions into a directory.
#[derive(Debug, Args)]
pub struct GenerateCli {
    /// What to write.
    #[arg(value_enum)]
    pub what: Generated,

    /// The directory to write into (created if missing).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

/// The section of the manual the pages go to: system administration, as for perf's
/// and bpftrace's privileged commands.
const SECTION: &str = "8";

/// Writes what `cli` asks for; returns the exit code.
pub fn run(cli: &GenerateCli) -> io::Result<i32> {
    fs::create_dir_all(&cli.dir)?;
    let mut cmd = super::Cli::clap_command();
    match cli.what {
        Generated::Man => man_pages(&mut cmd, &cli.dir)?,
        Generated::Completions => {
            for shell in [Shell::Zsh, Shell::Fish] {
                clap_complete::generate_to(shell, &mut cmd, "rtm-trace", &cli.dir)?;
            }
            fs::write(cli.dir.join("rtm-trace.bash"), bash(&mut cmd))?;
        }
    }
    Ok(0)
}

/// The bash completion script. clap_complete (4.6) spells the state of a subcommand
/// of a hyphenated program two ways, `rtm__trace__subcmd__agent` where it walks the
/// words and `rtm__subcmd__trace__subcmd__agent` in the arms that complete, so no
/// subcommand's options completed (clap-rs/clap#6421): the arms are spelled as the walk.
fn bash(cmd: &mut clap::Command) -> Vec<u8> {
    let mut out = Vec::new();
    clap_complete::generate(Shell::Bash, cmd, "rtm-trace", &mut out);
    String::from_utf8_lossy(&out)
        .replace("rtm__subcmd__trace", "rtm__trace")
        .into_bytes()
}

/// rtm-trace.8, and rtm-trace-NAME.8 for each subcommand a user runs.
fn man_pages(cmd: &mut clap::Command, dir: &std::path::Path) -> io::Result<()> {
    // Building gives each subcommand its full name (`rtm-trace agent`, shown in its
    // synopsis) and its page name (`rtm-trace-agent`).
    cmd.build();
    let page = |c: &clap::Command, name: &str| -> io::Result<()> {
        let mut out = Vec::new();
        clap_mangen::Man::new(c.clone())
            .section(SECTION)
            .render(&mut out)?;
        fs::write(dir.join(format!("{name}.{SECTION}")), out)
    };
    page(cmd, "rtm-trace")?;
    for sub in cmd.get_subcommands() {
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        page(sub, &format!("rtm-trace-{}", sub.get_name()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bash_completes_a_subcommands_options() {
        let script = String::from_utf8(bash(&mut super::super::Cli::clap_command())).unwrap();
        // The word walk reaches this state, and an arm completes it.
        assert!(script.contains("cmd=\"rtm__trace__subcmd__agent\""));
        assert!(
            script.contains("\n        rtm__trace__subcmd__agent)"),
            "{script}"
        );
        assert!(!script.contains("__generate"));
    }
}

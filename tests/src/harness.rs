//! The end-to-end tests' harness: one test binary (`tests/tests/main.rs`, run by
//! libtest-mimic) whose tests each declare what they need besides the tracer: root,
//! a tool, a package. A test whose needs are not met here is not run: it is reported as
//! `ignored`, with the reason on its line; with CI=true it fails instead, so CI never
//! passes a test it did not run.
//!
//! Each test file lists its tests in a `TESTS` table with [`e2e!`](crate::e2e), and
//! the binary's `main` hands every table to [`main`]. The file's test functions are
//! private, so one missing from its table is dead code, which clippy -D warnings refuses.

use std::{
    collections::{BTreeSet, HashMap},
    fmt,
    path::{Path, PathBuf},
    process::{Command, ExitCode},
    sync::Mutex,
};

use libtest_mimic::{Arguments, Completion, Failed, Trial};

/// Something a test needs besides the tracer. Checked before the test runs; each
/// answer is kept for the rest of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Need {
    /// Root: to load eBPF programs, switch users, install packages.
    Root,
    /// The Python with Perfetto's trace schema, in `$RTM_TOOLS_DIR/pyenv`.
    PerfettoSchema,
    /// A headless Chromium (Debian's `chromium`, or `chromium-browser`).
    Chromium,
    /// An executable on PATH (its name), and the Debian package that has it.
    Tool(&'static str, &'static str),
    /// Python 3 with its yaml module (Debian's python3-yaml).
    PyYaml,
    /// The Debian package `cargo xtask dist` built.
    Package,
}

impl Need {
    /// Whether it is met here.
    fn met(self) -> bool {
        match self {
            Need::Root => is_root(),
            Need::PerfettoSchema => perfetto_python_path().exists(),
            Need::Chromium => chromium().is_some(),
            Need::Tool(cmd, _) => on_path(cmd).is_some(),
            Need::PyYaml => Command::new("python3")
                .args(["-c", "import yaml"])
                .output()
                .is_ok_and(|o| o.status.success()),
            Need::Package => deb_package().is_some(),
        }
    }

    /// Whether it is met here, asked once a run.
    fn met_cached(self) -> bool {
        static ANSWERS: Mutex<Option<HashMap<Need, bool>>> = Mutex::new(None);
        let mut answers = ANSWERS.lock().unwrap_or_else(|e| e.into_inner());
        *answers
            .get_or_insert_with(HashMap::new)
            .entry(self)
            .or_insert_with(|| self.met())
    }
}

impl fmt::Display for Need {
    /// Why a test did not run, and what to do.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Need::Root => write!(
                f,
                "needs root to load eBPF programs: sudo -E cargo xtask test"
            ),
            Need::PerfettoSchema => write!(
                f,
                "needs Perfetto's trace schema in {}: cargo xtask setup installs it",
                perfetto_python_path().display()
            ),
            Need::Chromium => write!(f, "needs chromium: cargo xtask setup installs it"),
            Need::Tool(cmd, package) => write!(
                f,
                "needs {cmd}: apt-get install {package} (cargo xtask setup does)"
            ),
            Need::PyYaml => write!(
                f,
                "needs python3 with PyYAML: apt-get install python3-yaml (cargo xtask setup does)"
            ),
            Need::Package => write!(
                f,
                "needs the Debian package: RTM_TRACE_DEB is unset and target/dist has none \
                 (cargo xtask dist builds it)"
            ),
        }
    }
}

/// One end-to-end test: a function of a test file and what it needs. Made by
/// [`e2e!`](crate::e2e).
#[derive(Debug, Clone, Copy)]
pub struct E2e {
    /// The module path where the test was listed; its last part names the file.
    pub module: &'static str,
    /// The function's name.
    pub name: &'static str,
    /// The test: it passes unless it panics.
    pub run: fn(),
    /// What it needs besides the tracer.
    pub needs: &'static [Need],
}

impl E2e {
    /// The test file's name, without `.rs`.
    fn file(&self) -> &'static str {
        self.module.rsplit("::").next().unwrap_or(self.module)
    }

    /// `file::function`, the name it is run and filtered by.
    fn full_name(&self) -> String {
        format!("{}::{}", self.file(), self.name)
    }
}

/// An entry of a test file's `TESTS` table: `e2e!(function, Need, ...)`, the needs
/// named by their variants of [`Need`](crate::harness::Need).
#[macro_export]
macro_rules! e2e {
    ($test:ident $(, $need:ident $(($($arg:expr),*))?)* $(,)?) => {
        $crate::harness::E2e {
            module: module_path!(),
            name: stringify!($test),
            run: $test,
            needs: &[$($crate::harness::Need::$need $(($($arg),*))?),*],
        }
    };
}

/// Whether this run is CI's (CI=true), where a test that cannot run fails.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Runs the tests of `files` (each file's `TESTS`) as libtest does, with its command
/// line (filters, `--exact`, `--skip`, `--test-threads`, `--list`, ...). `dir` is the
/// folder of the test files: each of its `.rs` files but `main.rs` must have tests here.
pub fn main(dir: &Path, files: &[&[E2e]]) -> ExitCode {
    let (args, filters) = arguments();
    let mut tests: Vec<E2e> = files.iter().flat_map(|f| f.iter().copied()).collect();
    let mut names = BTreeSet::new();
    for t in &tests {
        assert!(
            names.insert(t.full_name()),
            "{} is listed twice",
            t.full_name()
        );
    }
    let modules: BTreeSet<String> = tests.iter().map(|t| t.file().to_owned()).collect();
    let dir = dir.to_owned();
    let mut trials = vec![Trial::test(
        "harness::every_test_file_is_built_into_this_binary",
        move || every_file_is_a_module(&dir, &modules),
    )];
    // Several filters (libtest takes any number, libtest-mimic one): a test any of them
    // selects runs.
    if !filters.is_empty() {
        let selects = |name: &str| {
            filters.iter().any(|f| {
                if args.exact {
                    name == f
                } else {
                    name.contains(f.as_str())
                }
            })
        };
        trials.retain(|t| selects(t.name()));
        tests.retain(|t| selects(&t.full_name()));
    }
    trials.extend(tests.into_iter().map(|t| {
        Trial::ignorable_test(t.full_name(), move || {
            if let Some(need) = t.needs.iter().find(|n| !n.met_cached()) {
                if in_ci() {
                    return Err(Failed::from(format!(
                        "NOT RUN: {need} (with CI=true a test that cannot run fails)"
                    )));
                }
                return Ok(Completion::ignored_with(need));
            }
            (t.run)();
            Ok(Completion::Completed)
        })
    }));
    libtest_mimic::run(&args, trials).exit_code()
}

/// The command line for libtest-mimic, and the filters when there are several (which it
/// would refuse; with one or none, it applies the filter itself).
fn arguments() -> (Arguments, Vec<String>) {
    // libtest's options that take a value, as a separate argument or after `=`.
    const VALUED: [&str; 6] = [
        "--test-threads",
        "--logfile",
        "--skip",
        "--color",
        "--format",
        "-Z",
    ];
    let mut options = Vec::new();
    let mut filters = Vec::new();
    let mut args = std::env::args();
    options.extend(args.next());
    while let Some(a) = args.next() {
        if VALUED.contains(&a.as_str()) {
            options.push(a);
            options.extend(args.next());
        } else if a.starts_with('-') {
            options.push(a);
        } else {
            filters.push(a);
        }
    }
    if filters.len() < 2 {
        options.append(&mut filters);
    }
    (Arguments::from_iter(options), filters)
}

/// Fails when a test file of `dir` has no test in this binary: with `autotests = false`
/// such a file would be built by nothing, its tests never run.
fn every_file_is_a_module(dir: &Path, modules: &BTreeSet<String>) -> Result<(), Failed> {
    let files: BTreeSet<String> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            Some(name.strip_suffix(".rs")?.to_owned())
        })
        .filter(|f| f != "main")
        .collect();
    let missing: Vec<&String> = files.difference(modules).collect();
    if !missing.is_empty() {
        return Err(format!(
            "{missing:?} in {} have no test in this binary: declare each as a module of \
             main.rs and list its tests in its TESTS table",
            dir.display()
        )
        .into());
    }
    Ok(())
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// `cmd` found on PATH.
pub fn on_path(cmd: &str) -> Option<PathBuf> {
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|d| d.join(cmd))
        .find(|p| p.is_file())
}

/// The Python that has Perfetto's published trace schema (PyPI's `perfetto`), which
/// `cargo xtask setup` installs in `$RTM_TOOLS_DIR/pyenv`.
pub fn perfetto_python_path() -> PathBuf {
    let tools = std::env::var_os("RTM_TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(&std::env::var_os("HOME").unwrap_or_else(|| "/root".into()))
                .join(".local/share/rtm-trace")
        });
    tools.join("pyenv/bin/python")
}

/// Debian's `chromium`, or `chromium-browser` elsewhere.
pub fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser"]
        .into_iter()
        .find(|c| on_path(c).is_some())
}

/// The package to install: $RTM_TRACE_DEB (set by `cargo xtask test`), else the newest
/// one `cargo xtask dist` left in target/dist.
pub fn deb_package() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("RTM_TRACE_DEB") {
        return Some(p.into());
    }
    let dist = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/dist");
    std::fs::read_dir(&dist)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            name.starts_with("rtm-trace_") && name.ends_with(".deb")
        })
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
}

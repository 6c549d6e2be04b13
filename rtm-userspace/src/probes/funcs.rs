//! `--func SPEC`: which functions of a target to time, and where their probes go.
//!
//! A spec is `SYMBOL`, `SYMBOL@MODULE` or a glob of either (`cache_*@libfoo`). It is
//! looked up in the symbol tables (dynamic and static; the caller adds a stripped
//! file's debug file's) of the executable and the libraries the target maps (or, for a
//! command about to run, the program and the libraries it needs). Each function's probe
//! goes on its first instruction the kernel emulates, as for the pthread probes; what
//! cannot be probed safely is refused with the reason.

use std::path::{Path, PathBuf};

use super::placement::{self, Placement};
use crate::proc::{
    elf::{ElfError, ElfSymbols, read_object_file},
    process,
};

/// Most functions timed by default (`--max-funcs`).
pub const DEFAULT_MAX_FUNCS: usize = 64;
/// How many matches an error lists.
const SHOWN: usize = 8;

/// One `--func` argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuncSpec {
    /// The symbol, or a glob of it.
    pub symbol: String,
    /// The module (file name, its start, or a glob of it); None: any.
    pub module: Option<String>,
}

impl FuncSpec {
    /// Parses `SYMBOL` or `SYMBOL@MODULE`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let (symbol, module) = match s.split_once('@') {
            Some((sym, m)) => (sym, Some(m)),
            None => (s, None),
        };
        let ok = |t: &str| {
            !t.is_empty()
                && t.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_.*?$:+-[]<>,~ ".contains(c))
        };
        if !ok(symbol) || module.is_some_and(|m| !ok(m) || m.contains('/')) {
            return Err(format!(
                "`{s}` is not a function: give SYMBOL or SYMBOL@MODULE (a glob such as \
                 cache_*@libfoo matches several)"
            ));
        }
        Ok(Self {
            symbol: symbol.to_owned(),
            module: module.map(str::to_owned),
        })
    }

    fn is_glob(&self) -> bool {
        self.symbol.contains(['*', '?'])
    }
}

impl std::fmt::Display for FuncSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.module {
            Some(m) => write!(f, "{}@{m}", self.symbol),
            None => write!(f, "{}", self.symbol),
        }
    }
}

/// Whether `text` matches the glob `pattern` (`*`: any run, `?`: any one character).
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Whether a module's file name is what `pattern` names: the name itself, its start up
/// to a `.` or `-` (`libfoo` for `libfoo.so.1`, `libc` for `libc.so.6`), or a glob.
fn module_matches(pattern: &str, path: &Path) -> bool {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if pattern.contains(['*', '?']) {
        return glob_match(pattern, &name);
    }
    name == pattern
        || name
            .strip_prefix(pattern)
            .is_some_and(|rest| rest.starts_with(['.', '-']))
}

/// A file whose functions may be timed.
#[derive(Debug)]
pub struct ModuleFile {
    /// Its path as the target names it.
    pub path: PathBuf,
    /// A path naming the very file, for the probes.
    pub host_path: PathBuf,
    /// Its symbols (with its debug file's when it is stripped and one was found).
    pub symbols: ElfSymbols,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

impl ModuleFile {
    /// The executable files `pid` maps.
    pub fn of_process(pid: u32) -> Result<Vec<Self>, FuncError> {
        let modules = process::modules(pid).map_err(|e| FuncError::Process(e.to_string()))?;
        let mut out = Vec::new();
        for m in modules.iter().filter(|m| m.executable) {
            match ElfSymbols::open_mapped(&m.mapped_file(pid)) {
                Ok((symbols, bytes, host_path)) => out.push(Self {
                    path: m.path.clone(),
                    host_path,
                    symbols,
                    bytes,
                }),
                Err(e) => log::debug!("--func: skipping {}: {e}", m.path.display()),
            }
        }
        Ok(out)
    }

    /// A program about to run and the libraries it needs.
    pub fn of_program(program: &Path) -> Result<Vec<Self>, FuncError> {
        let mut out = Vec::new();
        for path in super::pthread::needed_closure(program) {
            let bytes = read_object_file(&path).map_err(|source| {
                FuncError::Elf(ElfError::Read {
                    path: path.display().to_string(),
                    source,
                })
            });
            let bytes = match bytes {
                Ok(b) => b,
                Err(e) if path == program => return Err(e),
                Err(e) => {
                    log::debug!("--func: skipping {}: {e}", path.display());
                    continue;
                }
            };
            let Ok(symbols) = ElfSymbols::parse(&bytes) else {
                continue;
            };
            out.push(Self {
                path: path.clone(),
                host_path: path,
                symbols,
                bytes,
            });
        }
        Ok(out)
    }
}

/// A function to time, and where its probes go.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// Its symbol.
    pub name: String,
    /// The file that defines it, as the target names it.
    pub module: String,
    /// Its address in that file.
    pub address: u64,
    /// The file the probes go in.
    pub host_path: PathBuf,
    /// The file offset of the probe point.
    pub probe_at: u64,
    /// Why there.
    pub placement: Placement,
}

/// Why a spec cannot be timed.
#[derive(Debug, thiserror::Error)]
pub enum FuncError {
    /// /proc could not be read.
    #[error("cannot read the target's mappings: {0}")]
    Process(String),
    /// A file could not be read.
    #[error(transparent)]
    Elf(#[from] ElfError),
    /// Nothing matched.
    #[error(
        "--func {spec}: no function matches in {looked}{stripped}; list a file's functions with \
         `nm -D FILE` or `nm FILE`"
    )]
    NotFound {
        /// The spec.
        spec: String,
        /// The files looked in.
        looked: String,
        /// A note naming the stripped files among them.
        stripped: String,
    },
    /// One symbol, defined in several files.
    #[error(
        "--func {spec}: {symbol} is defined in several files ({modules}): say which, as \
         {symbol}@MODULE"
    )]
    Ambiguous {
        /// The spec.
        spec: String,
        /// The symbol.
        symbol: String,
        /// The files.
        modules: String,
    },
    /// More matches than the cap.
    #[error(
        "--func {spec}: {count} functions match, more than the {max} that may be timed \
         (--max-funcs): {first}, ...; narrow the pattern"
    )]
    TooMany {
        /// The spec.
        spec: String,
        /// How many matched.
        count: usize,
        /// The cap.
        max: usize,
        /// The first few.
        first: String,
    },
    /// A match that cannot be probed safely.
    #[error("--func {spec}: {name} in {module} cannot be timed: {why}")]
    Unsafe {
        /// The spec.
        spec: String,
        /// The function.
        name: String,
        /// Its file.
        module: String,
        /// Why.
        why: String,
    },
}

/// Why `name` (at `address`, `size` bytes, in `m`) cannot be probed, if it cannot.
fn refusal(m: &ModuleFile, name: &str, size: u64) -> Option<String> {
    if m.symbols.is_ifunc(name) {
        return Some(
            "it is an indirect function (its symbol is the resolver the loader runs once); \
             time the implementation it picks instead"
                .into(),
        );
    }
    if size == 0 {
        return Some(
            "its symbol has no size (an assembly label?), so where it ends and whether it \
             is a whole function is unknown"
                .into(),
        );
    }
    if size < 2 {
        return Some(format!(
            "it is {size} byte long: too short to hold a probe and return"
        ));
    }
    None
}

/// The functions `specs` name in `modules`: each spec's matches, refused as a whole
/// when one cannot be probed safely, or when there are more than `max` in all.
pub fn resolve(
    specs: &[FuncSpec],
    modules: &[ModuleFile],
    max: usize,
) -> Result<Vec<Resolved>, FuncError> {
    let mut out: Vec<Resolved> = Vec::new();
    for spec in specs {
        let candidates: Vec<&ModuleFile> = modules
            .iter()
            .filter(|m| {
                spec.module
                    .as_deref()
                    .is_none_or(|p| module_matches(p, &m.path))
            })
            .collect();
        // (module, name, address, size)
        let mut matches: Vec<(&ModuleFile, String, u64, u64)> = Vec::new();
        for m in &candidates {
            let mut found: Vec<(String, u64, u64)> = if spec.is_glob() {
                m.symbols
                    .functions()
                    .filter(|(n, _, _)| glob_match(&spec.symbol, n))
                    .map(|(n, a, s)| (n.to_owned(), a, s))
                    .collect()
            } else {
                m.symbols
                    .function(&spec.symbol)
                    .map(|a| {
                        let size = m.symbols.function_size(&spec.symbol).unwrap_or(0);
                        vec![(spec.symbol.clone(), a, size)]
                    })
                    .unwrap_or_default()
            };
            // Aliases (one address, several names): timed once, by its first name.
            found.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
            found.dedup_by_key(|f| f.1);
            matches.extend(found.into_iter().map(|(n, a, s)| (*m, n, a, s)));
        }
        if matches.is_empty()
            && !spec.is_glob()
            && let Some(m) = candidates.iter().find(|m| m.symbols.is_ifunc(&spec.symbol))
            && let Some(why) = refusal(m, &spec.symbol, 0)
        {
            return Err(FuncError::Unsafe {
                spec: spec.to_string(),
                name: spec.symbol.clone(),
                module: m.path.display().to_string(),
                why,
            });
        }
        if matches.is_empty() {
            let looked: Vec<String> = candidates
                .iter()
                .map(|m| m.path.display().to_string())
                .collect();
            let stripped: Vec<&str> = candidates
                .iter()
                .filter(|m| !m.symbols.has_symtab())
                .map(|m| m.path.to_str().unwrap_or("?"))
                .collect();
            return Err(FuncError::NotFound {
                spec: spec.to_string(),
                looked: if looked.is_empty() {
                    format!(
                        "no file (no mapped file is named {})",
                        spec.module.as_deref().unwrap_or("?")
                    )
                } else {
                    looked.join(", ")
                },
                stripped: if stripped.is_empty() {
                    String::new()
                } else {
                    format!(
                        " ({} stripped: only exported functions are known there, unless \
                         a debug file is installed, e.g. the -dbgsym package)",
                        stripped.join(", ")
                    )
                },
            });
        }
        if !spec.is_glob() {
            let mut files: Vec<String> = matches
                .iter()
                .map(|m| m.0.path.display().to_string())
                .collect();
            files.dedup();
            if files.len() > 1 {
                return Err(FuncError::Ambiguous {
                    spec: spec.to_string(),
                    symbol: spec.symbol.clone(),
                    modules: files.join(", "),
                });
            }
        }
        let total = out.len() + matches.len();
        if total > max {
            let first: Vec<String> = matches
                .iter()
                .take(SHOWN)
                .map(|m| format!("{}@{}", m.1, file_name(&m.0.path)))
                .collect();
            return Err(FuncError::TooMany {
                spec: spec.to_string(),
                count: matches.len(),
                max: max.saturating_sub(out.len()),
                first: first.join(", "),
            });
        }
        for (m, name, address, size) in matches {
            if let Some(why) = refusal(m, &name, size) {
                return Err(FuncError::Unsafe {
                    spec: spec.to_string(),
                    name,
                    module: m.path.display().to_string(),
                    why,
                });
            }
            let Some(offset) = m.symbols.file_offset(address) else {
                return Err(FuncError::Unsafe {
                    spec: spec.to_string(),
                    name,
                    module: m.path.display().to_string(),
                    why: "its address is in no loaded segment of the file".into(),
                });
            };
            if out
                .iter()
                .any(|r| r.host_path == m.host_path && r.probe_at - r.placement.offset == offset)
            {
                continue;
            }
            let start = offset as usize;
            let code = m
                .bytes
                .get(start..start.saturating_add(size as usize).min(m.bytes.len()))
                .unwrap_or(&[]);
            // No argument is read, and stores may come first: only the stack pointer
            // must be as at entry (the return probe takes the return address there).
            let p = placement::place(code, offset, &[], true);
            out.push(Resolved {
                name,
                module: m.path.display().to_string(),
                address,
                host_path: m.host_path.clone(),
                probe_at: offset + p.offset,
                placement: p,
            });
        }
    }
    Ok(out)
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_refuse_junk() {
        assert_eq!(
            FuncSpec::parse("cache_*@libfoo").unwrap(),
            FuncSpec {
                symbol: "cache_*".into(),
                module: Some("libfoo".into())
            }
        );
        assert_eq!(FuncSpec::parse("main").unwrap().module, None);
        for bad in ["", "@libc", "f@", "a/b", "f@/lib/libc.so.6", "f;rm"] {
            assert!(FuncSpec::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn globs_match_like_a_shell() {
        assert!(glob_match("cache_*", "cache_get"));
        assert!(glob_match("*", ""));
        assert!(glob_match("a?c", "abc"));
        assert!(glob_match("*_lock*", "pthread_mutex_lock"));
        assert!(!glob_match("cache_*", "xcache_get"));
        assert!(!glob_match("a?c", "ac"));
        assert!(glob_match("a*b*c", "axxbyyc"));
        assert!(!glob_match("a*b*c", "axxbyy"));
    }

    #[test]
    fn modules_match_by_name_or_its_start() {
        let p = Path::new("/usr/lib/x86_64-linux-gnu/libc.so.6");
        assert!(module_matches("libc", p));
        assert!(module_matches("libc.so.6", p));
        assert!(module_matches("libc.*", p));
        assert!(!module_matches("lib", p));
        assert!(!module_matches("libcrypto", p));
    }

    #[test]
    fn this_programs_functions_resolve_and_globs_are_capped() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let modules = ModuleFile::of_process(std::process::id()).unwrap();
        assert!(modules.iter().any(|m| m.path == exe));
        // In libc: found, placed, and named by its file.
        let r = resolve(&[FuncSpec::parse("getppid@libc").unwrap()], &modules, 8).unwrap();
        assert_eq!(r.len(), 1);
        assert!(r[0].module.contains("libc"), "{r:?}");
        // Not there.
        let e = resolve(&[FuncSpec::parse("no_such_fn_xyz").unwrap()], &modules, 8);
        assert!(matches!(e, Err(FuncError::NotFound { .. })), "{e:?}");
        // Too many.
        let e = resolve(&[FuncSpec::parse("*@libc").unwrap()], &modules, 8).unwrap_err();
        assert!(matches!(e, FuncError::TooMany { .. }), "{e}");
        assert!(e.to_string().contains("narrow the pattern"), "{e}");
        // One symbol in two files: which one is asked.
        let twice = ["/a/app", "/b/app"].map(|p| ModuleFile {
            path: p.into(),
            host_path: exe.clone(),
            symbols: ElfSymbols::open(&exe).unwrap(),
            bytes: Vec::new(),
        });
        let e = resolve(&[FuncSpec::parse("main").unwrap()], &twice, 8).unwrap_err();
        assert!(matches!(e, FuncError::Ambiguous { .. }), "{e}");
        assert!(e.to_string().contains("main@MODULE"), "{e}");
        // An indirect function is refused with the reason.
        for f in ["memcpy@libc", "strlen@libc"] {
            let e = resolve(&[FuncSpec::parse(f).unwrap()], &modules, 8).unwrap_err();
            assert!(e.to_string().contains("indirect function"), "{e}");
        }
    }
}

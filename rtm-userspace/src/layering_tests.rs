//! The architecture, checked: each module imports only modules to its left in
//! format -> proc -> probes -> readers -> model -> symbolize -> config -> analyses ->
//! output -> engine -> cli -> session (and `interrupt`, a leaf anyone may use): the
//! engine drives the layers, the one-shot front end (`session`, over its command line
//! `cli`) drives the engine. A file that reaches to its right fails this test, so the
//! arrows stay one way.

use std::path::Path;

/// The layers, left to right.
const ORDER: &[&str] = &[
    "format",
    "proc",
    "probes",
    "readers",
    "model",
    "symbolize",
    "config",
    "analyses",
    "output",
    "engine",
    "cli",
    "live",
    "session",
    "agent",
];

/// Modules anyone may import.
const SHARED: &[&str] = &["interrupt", "say", "EBPF_OBJECT"];

/// The top-level modules a source text names after `crate::`, including the members of
/// `use crate::{a::..., b, ...}` groups.
fn crate_uses(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("crate::") {
        let start = i + at + "crate::".len();
        // `$crate::` in macros and `rtm_crate::` are not ours.
        let before = text[..i + at].chars().last();
        i = start;
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        if bytes.get(start) == Some(&b'{') {
            let mut depth = 0;
            let mut word = String::new();
            let mut at_top = true;
            for &b in &bytes[start..] {
                match b {
                    b'{' => {
                        depth += 1;
                        if depth == 1 {
                            at_top = true;
                        }
                    }
                    b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                let c = b as char;
                if depth == 1 && (c.is_alphanumeric() || c == '_') {
                    if at_top {
                        word.push(c);
                    }
                } else if !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                    at_top = false;
                }
                if depth == 1 && c == ',' {
                    at_top = true;
                }
            }
        } else {
            let name: String = text[start..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.push(name);
        }
    }
    out
}

fn rank(module: &str) -> Option<usize> {
    ORDER.iter().position(|m| *m == module)
}

fn visit(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            visit(&p, files);
        } else if p.extension().is_some_and(|x| x == "rs") {
            files.push(p);
        }
    }
}

#[test]
fn every_module_imports_only_to_its_left() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    visit(&src, &mut files);
    let mut wrong = Vec::new();
    let mut checked = 0;
    for f in files {
        let rel = f.strip_prefix(&src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_owned();
        let Some(mine) = rank(&top) else { continue };
        let text = std::fs::read_to_string(&f).unwrap();
        for used in crate_uses(&text) {
            if used == top || SHARED.contains(&used.as_str()) {
                continue;
            }
            checked += 1;
            match rank(&used) {
                Some(r) if r < mine => {}
                _ => wrong.push(format!("{}: crate::{used}", rel.display())),
            }
        }
    }
    assert!(checked > 100, "the scan found only {checked} imports");
    assert!(
        wrong.is_empty(),
        "imports against the arrows:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_scan_sees_grouped_and_plain_imports() {
    let uses = crate_uses(
        "use crate::{a::b, c, d::{e, f}};\nlet x = crate::g::h();\n$crate::no; rtm_crate::no",
    );
    assert_eq!(uses, ["a", "c", "d", "g"]);
}

/// The module path of a source file (`model/sync/graph.rs` -> `model::sync::graph`).
fn module_of(rel: &Path) -> String {
    let s = rel.with_extension("").to_string_lossy().replace('/', "::");
    s.strip_suffix("::mod").map(str::to_owned).unwrap_or(s)
}

/// The modules a file's code (tests left out) refers to by `crate::` or `super::` paths,
/// resolved to the longest path that is a module.
fn module_deps(
    module: &str,
    text: &str,
    modules: &std::collections::HashSet<String>,
) -> Vec<String> {
    let code = text.split("#[cfg(test)]").next().unwrap_or(text);
    let code: String = code
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let parent: Vec<&str> = module.split("::").collect();
    let parent = &parent[..parent.len().saturating_sub(1)];
    let mut out = Vec::new();
    let resolve = |base: &[&str], path: &[&str], out: &mut Vec<String>| {
        for k in (1..=path.len()).rev() {
            let cand: Vec<&str> = base.iter().chain(&path[..k]).copied().collect();
            let cand = cand.join("::");
            if modules.contains(&cand) {
                out.push(cand);
                return;
            }
        }
    };
    for (prefix, base) in [("crate::", &[][..]), ("super::", parent)] {
        let mut rest = code.as_str();
        while let Some(at) = rest.find(prefix) {
            let before = rest[..at].chars().last();
            rest = &rest[at + prefix.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$' || c == ':') {
                continue;
            }
            if let Some(group) = rest.strip_prefix('{') {
                // Top-level names of a group: `super::{a, b::c}`.
                let end = group.find("};").unwrap_or(group.len());
                let mut depth = 0;
                let mut item = String::new();
                for c in group[..end].chars().chain([',']) {
                    match c {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            let path: Vec<&str> = item
                                .split("::")
                                .map(str::trim)
                                .take_while(|p| !p.is_empty() && !p.starts_with('{'))
                                .collect();
                            resolve(base, &path, &mut out);
                            item.clear();
                            continue;
                        }
                        _ => {}
                    }
                    if depth == 0 {
                        item.push(c);
                    }
                }
            } else {
                let path: Vec<&str> = rest
                    .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .next()
                    .unwrap_or("")
                    .split("::")
                    .filter(|p| !p.is_empty())
                    .collect();
                resolve(base, &path, &mut out);
            }
        }
    }
    out.retain(|d| d != module && !module.starts_with(&format!("{d}::")));
    out
}

#[test]
fn modules_import_each_other_without_cycles() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    visit(&src, &mut files);
    let modules: std::collections::HashSet<String> = files
        .iter()
        .map(|f| module_of(f.strip_prefix(&src).unwrap()))
        .collect();
    let mut graph: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for f in &files {
        let m = module_of(f.strip_prefix(&src).unwrap());
        let text = std::fs::read_to_string(f).unwrap();
        let deps = module_deps(&m, &text, &modules);
        graph.insert(m, deps);
    }
    assert!(graph.values().map(Vec::len).sum::<usize>() > 100);
    // Depth-first search; a module met again on the current path closes a cycle.
    fn walk(
        m: &str,
        graph: &std::collections::BTreeMap<String, Vec<String>>,
        path: &mut Vec<String>,
        done: &mut std::collections::HashSet<String>,
        cycles: &mut Vec<String>,
    ) {
        if let Some(i) = path.iter().position(|p| p == m) {
            cycles.push(format!("{} -> {m}", path[i..].join(" -> ")));
            return;
        }
        if !done.insert(m.to_owned()) {
            return;
        }
        path.push(m.to_owned());
        for d in graph.get(m).into_iter().flatten() {
            walk(d, graph, path, done, cycles);
        }
        path.pop();
    }
    let mut cycles = Vec::new();
    let mut done = Default::default();
    for m in graph.keys() {
        walk(m, &graph, &mut Vec::new(), &mut done, &mut cycles);
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_cycle_check_sees_a_cycle() {
    let modules: std::collections::HashSet<String> = ["m::a", "m::b", "m"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(
        module_deps(
            "m::a",
            "use super::{b::X, c};\nfn f() { crate::m::b::g() }",
            &modules
        ),
        ["m::b", "m::b"]
    );
    assert_eq!(module_deps("m::b", "use super::a::Y;", &modules), ["m::a"]);
}

//! `--func`: resolves the functions to time in each target and attaches their probes;
//! the table of timed functions (the probes' cookies index it) grows as targets come.

use super::Settings;
use crate::{
    analyses::functions::TimedFunction,
    engine::{EngineError, Target},
    probes::{
        Probes,
        funcs::{self, ModuleFile},
    },
};

/// Resolves the settings' functions in `target` and attaches their probes, adding new
/// functions to `table`. A spec that matches nothing, too much, or something unsafe to
/// probe stops the run with the reason.
pub(super) fn attach(
    probes: &mut Probes,
    settings: &Settings,
    table: &mut Vec<TimedFunction>,
    target: &Target,
) -> Result<(), EngineError> {
    if settings.funcs.is_empty() {
        return Ok(());
    }
    let (mut modules, root) = match &target.launched {
        Some(l) => (ModuleFile::of_program(&l.program)?, None),
        None => (
            ModuleFile::of_process(target.pid)?,
            crate::proc::mapped::open_root(target.pid).ok(),
        ),
    };
    // A stripped file's static functions, from its debug file when one is installed.
    for m in modules.iter_mut().filter(|m| !m.symbols.has_symtab()) {
        if let Some(d) = crate::symbolize::debuginfo::find(root.as_ref(), &m.path, &m.symbols) {
            m.symbols.add_debug_symbols(d.symbols);
        }
    }
    let resolved = funcs::resolve(&settings.funcs, &modules, settings.max_funcs)?;
    let mut points = Vec::with_capacity(resolved.len());
    for r in &resolved {
        let known = table
            .iter()
            .position(|f| f.module == r.module && f.address == r.address);
        let index = known.unwrap_or_else(|| {
            table.push(TimedFunction {
                name: r.name.clone(),
                module: r.module.clone(),
                address: r.address,
                probe_offset: r.placement.offset,
            });
            table.len() - 1
        });
        if settings.verbose {
            crate::say!(
                "rtm-trace: timing {} in {} ({}): {}",
                r.name,
                r.module,
                target.pid,
                r.placement.reason
            );
        }
        points.push((
            r.host_path.as_path(),
            r.probe_at,
            index as u64,
            r.name.as_str(),
        ));
    }
    // A launched command's forks run the same files: probed for every process that
    // maps them, left to the in-kernel filter. An attached process alone otherwise.
    let scope = (!target.follow_forks).then_some(target.pid);
    probes.attach_funcs(scope, &points)?;
    Ok(())
}

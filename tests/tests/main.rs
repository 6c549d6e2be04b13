//! The end-to-end tests: one binary, a module per file of this folder, run by the
//! harness of `rtm_tests::harness` (libtest-mimic), which reports a test whose needs
//! (root, a tool, the package) are not met here as ignored, with the reason, and fails
//! it with CI=true. `cargo test -p rtm-tests --test e2e -- FILE::NAME` runs one test;
//! `cargo xtask test` runs them all, one at a time.

use std::{path::Path, process::ExitCode};

/// Declares each test file as a module and hands its `TESTS` table to the harness.
macro_rules! test_files {
    ($($file:ident),* $(,)?) => {
        $(mod $file;)*

        fn main() -> ExitCode {
            rtm_tests::harness::main(
                &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests"),
                &[$($file::TESTS),*],
            )
        }
    };
}

test_files!(
    agent_e2e,
    agent_modes_e2e,
    agent_mpi_e2e,
    agent_profile_e2e,
    agent_short_lived_e2e,
    agent_targets_e2e,
    agent_tls_e2e,
    ambient_e2e,
    blocked_e2e,
    deploy_files,
    engine_e2e,
    errors_e2e,
    fidelity_e2e,
    findings_e2e,
    func_e2e,
    kernel_e2e,
    live_e2e,
    mixin,
    modes_e2e,
    mpi_attach_e2e,
    mpi_e2e,
    mpi_layout,
    mutex_e2e,
    one_document_e2e,
    package_e2e,
    pprof_e2e,
    primitives_e2e,
    production_e2e,
    report_e2e,
    safety_e2e,
    stacks_e2e,
    timeline_e2e,
    trust_e2e,
    whatif_e2e,
);

//! Compiles the C workloads the end-to-end tests trace; their directory is passed to the
//! tests as RTM_WORKLOADS.
use std::{env, path::PathBuf, process::Command};

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let src =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("manifest dir")).join("workloads");
    let builds: [(&str, &[&str]); 25] = [
        // Call-stack tests: without frame pointers, with them, and static.
        (
            "stack_workload",
            &["-O2", "-g", "-pthread", "-fomit-frame-pointer"],
        ),
        (
            "stack_workload_fp",
            &["-O2", "-g", "-pthread", "-fno-omit-frame-pointer"],
        ),
        (
            "stack_workload_stripped",
            &["-O2", "-pthread", "-fomit-frame-pointer", "-s"],
        ),
        (
            "stack_workload_static",
            &["-O2", "-g", "-pthread", "-fomit-frame-pointer", "-static"],
        ),
        // Functions named with letters that are C++ type codes.
        ("short_names", &["-O2", "-g", "-pthread"]),
        ("idle_threads", &["-O2", "-g", "-pthread"]),
        ("fork_children", &["-O2", "-g", "-pthread"]),
        ("pingpong", &["-O2", "-g", "-pthread"]),
        ("hostile_names", &["-O2", "-g", "-pthread"]),
        ("main_exits", &["-O2", "-g", "-pthread"]),
        ("load_workload", &["-O2", "-g", "-pthread"]),
        ("mutex_workload", &["-O2", "-g", "-pthread"]),
        ("sync_workload", &["-O2", "-g", "-pthread"]),
        (
            "sync_workload_static",
            &["-O2", "-g", "-pthread", "-static"],
        ),
        ("demo", &["-O2", "-g", "-pthread"]),
        ("whatif", &["-O2", "-g", "-pthread"]),
        ("deadlock", &["-O2", "-g", "-pthread"]),
        // The glibc mutex layout rtm-trace reads, from the installed headers.
        ("layout_probe", &["-O2", "-g", "-pthread"]),
        ("many_locks", &["-O2", "-g", "-pthread"]),
        // Production mode: sampled stacks against known call sites, and real software
        // shapes.
        ("two_sites", &["-O2", "-g", "-pthread", "-fno-inline"]),
        ("timer_expiries", &["-O2", "-g", "-pthread"]),
        ("fork_owned", &["-O2", "-g", "-pthread"]),
        ("thread_pool", &["-O2", "-g", "-pthread"]),
        ("bench_shapes", &["-O2", "-g", "-pthread"]),
        (
            "nolibc",
            &["-O2", "-static", "-nostdlib", "-fno-stack-protector"],
        ),
    ];
    for (name, flags) in builds {
        let base = ["_static", "_fp", "_stripped"]
            .iter()
            .fold(name, |n, s| n.trim_end_matches(s));
        let c = src.join(format!("{base}.c"));
        println!("cargo:rerun-if-changed={}", c.display());
        let st = Command::new("cc")
            .args(flags)
            .arg("-Wall")
            .arg("-o")
            .arg(out.join(name))
            .arg(&c)
            .status()
            .expect("running cc (cargo xtask setup installs gcc)");
        assert!(st.success(), "cc failed for {}", c.display());
    }
    // The function-timing workload and the library it calls (found next to it through
    // its run path), and a stripped copy.
    let lib = src.join("libfuncs.c");
    let funcs = src.join("func_workload.c");
    println!("cargo:rerun-if-changed={}", lib.display());
    println!("cargo:rerun-if-changed={}", funcs.display());
    let cc = |args: &[&std::ffi::OsStr]| {
        let st = Command::new("cc")
            .args(args)
            .status()
            .expect("running cc (cargo xtask setup installs gcc)");
        assert!(st.success(), "cc failed: {args:?}");
    };
    let os = |s: &'static str| std::ffi::OsStr::new(s);
    cc(&[
        os("-O2"),
        os("-g"),
        os("-fPIC"),
        os("-shared"),
        os("-Wall"),
        os("-o"),
        out.join("libfuncs.so").as_os_str(),
        lib.as_os_str(),
    ]);
    for (name, extra) in [("func_workload", "-g"), ("func_workload_stripped", "-s")] {
        cc(&[
            os("-O2"),
            os(extra),
            os("-pthread"),
            os("-Wall"),
            os("-fno-optimize-sibling-calls"),
            os("-o"),
            out.join(name).as_os_str(),
            funcs.as_os_str(),
            os("-L"),
            out.as_os_str(),
            os("-lfuncs"),
            os("-Wl,-rpath,$ORIGIN"),
        ]);
    }
    // A Go program (Debian's golang-go, which cargo xtask setup installs): its build
    // cache in OUT_DIR, so the build needs no home directory. The Go test says so and
    // fails if it was missing.
    let go = src.join("go_mutex.go");
    println!("cargo:rerun-if-changed={}", go.display());
    // Also stripped, as distributions ship Go programs (their own function table stays).
    let built = [
        ("go_mutex", None),
        ("go_mutex_stripped", Some("-ldflags=-s -w")),
    ]
    .into_iter()
    .all(|(name, flags)| {
        Command::new("go")
            .arg("build")
            .args(flags)
            .arg("-o")
            .arg(out.join(name))
            .arg(&go)
            .env("GOCACHE", out.join("go-cache"))
            .env("GOPATH", out.join("go-path"))
            .env("GO111MODULE", "off")
            .status()
            .is_ok_and(|s| s.success())
    });
    if !built {
        println!(
            "cargo:warning=go missing or failed: the Go test will fail (run cargo xtask setup)"
        );
    }
    // MPI workloads need each implementation's compiler wrapper (cargo xtask setup
    // installs them); the MPI tests say so and fail if one was missing.
    let mpi = src.join("mpi_ring.c");
    println!("cargo:rerun-if-changed={}", mpi.display());
    // MPICH's headers make gcc warn about MPI_STATUSES_IGNORE, which the ring passes on
    // purpose.
    for (wrapper, name) in [
        ("mpicc.openmpi", "mpi_ring_openmpi"),
        ("mpicc.mpich", "mpi_ring_mpich"),
    ] {
        let built = Command::new(wrapper)
            .args(["-O2", "-g", "-Wall", "-Wno-stringop-overflow", "-o"])
            .arg(out.join(name))
            .arg(&mpi)
            .status()
            .is_ok_and(|s| s.success());
        if !built {
            println!(
                "cargo:warning={wrapper} missing or failed: MPI tests will fail (run cargo xtask setup)"
            );
        }
    }
    // Layout probes: compiled against each implementation's installed headers (Open
    // MPI's internal ones are in libopenmpi-dev).
    let inc = "/usr/lib/x86_64-linux-gnu/openmpi/include";
    for (wrapper, name, extra) in [
        (
            "mpicc.openmpi",
            "ompi_layout",
            vec![format!("-I{inc}/openmpi"), format!("-I{inc}")],
        ),
        ("mpicc.mpich", "mpich_layout", vec![]),
    ] {
        let c = src.join(format!("{name}.c"));
        println!("cargo:rerun-if-changed={}", c.display());
        let built = Command::new(wrapper)
            .args(&extra)
            .arg("-o")
            .arg(out.join(name))
            .arg(&c)
            .status()
            .is_ok_and(|s| s.success());
        if !built {
            println!("cargo:warning={wrapper} could not build {name}: MPI layout tests will fail");
        }
    }
    println!("cargo:rustc-env=RTM_WORKLOADS={}", out.display());
}

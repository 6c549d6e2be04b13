//! Ending a trace: stopping processes in the filter, detaching the uprobes of exited
//! processes, and releasing everything without waiting for the kernel.

use aya::programs::UProbe;

use super::{error::program, load::Probes, traced::Traced};

impl Probes {
    /// Stops event collection for `pids` at once: the in-kernel filter drops them, so the
    /// programs return before doing any work. The breakpoints stay until
    /// [`Probes::release`].
    pub fn stop(&mut self, pids: &[u32]) {
        for pid in pids {
            if let Err(e) = self.set_traced(*pid, Traced::No) {
                log::debug!("untracing {pid}: {e}");
            }
        }
    }

    /// Detaches the uprobes attached for processes `pids` alone (they have exited): a
    /// daemon whose targets come and go does not keep them until it releases
    /// everything. Probes on a library for every process stay.
    pub fn forget(&mut self, pids: &[u32]) {
        for pid in pids {
            // Closing a uprobe_multi link detaches its uprobes.
            self.multi_links.remove(pid);
            for (name, link) in self.links.remove(pid).unwrap_or_default() {
                match program::<UProbe>(&mut self.ebpf, name) {
                    Ok(p) => {
                        if let Err(e) = p.detach(link) {
                            log::debug!("detaching {name} of {pid}: {e}");
                        }
                    }
                    Err(e) => log::debug!("detaching {name} of {pid}: {e}"),
                }
            }
        }
    }

    /// Releases every program, map and probe, without waiting for the kernel.
    ///
    /// The kernel removes uprobes one at a time, each after an RCU grace period (about
    /// 0.1 s per probe here, and serialized: closing them from several threads does not
    /// help), so a run with 60 probes would take 6 s to exit. Instead a background
    /// process (a grandchild, so nobody has to reap it) takes over the descriptors and
    /// lets them go after this process has dropped its own: rtm-trace exits at once, and
    /// the probes, which already do nothing (the filter is empty), disappear a few
    /// seconds later, even if either process is killed. Returns that process's pid, or
    /// None when there were no uprobes (tracepoints go at once) or it could not be
    /// started (then the release happens here, slowly).
    pub fn release(self) -> Option<u32> {
        if self.uprobe_count() == 0 {
            drop(self);
            return None;
        }
        // `go`: rtm-trace to the background process (release now); `told`: its pid back.
        let (mut go, mut told) = ([0i32; 2], [0i32; 2]);
        // SAFETY: valid two-element arrays for the two new descriptors each.
        let made = unsafe {
            libc::pipe2(go.as_mut_ptr(), libc::O_CLOEXEC) == 0
                && libc::pipe2(told.as_mut_ptr(), libc::O_CLOEXEC) == 0
        };
        if !made {
            drop(self);
            return None;
        }
        let [read_end, write_end] = go;
        // SAFETY: fork in a process whose other threads (if any) do not hold locks the
        // children need: they only make raw system calls before _exit.
        let child = unsafe { libc::fork() };
        if child == 0 {
            // SAFETY: async-signal-safe calls only.
            unsafe {
                let grandchild = libc::fork();
                if grandchild != 0 {
                    libc::write(told[1], (&raw const grandchild).cast(), 4);
                    libc::_exit(0);
                }
                libc::close(told[0]);
                libc::close(told[1]);
                // Off the terminal: no output, and a Ctrl-C meant for the next command
                // does not reach it (were it killed, its exit would release all the same).
                libc::setsid();
                for fd in 0..3 {
                    libc::close(fd);
                }
                libc::close(write_end);
                // This process's copies of the descriptors are released when it exits,
                // once rtm-trace dropped its own (a byte) or exited (end of file).
                let mut b = 0u8;
                while libc::read(read_end, (&raw mut b).cast(), 1) < 0
                    && *libc::__errno_location() == libc::EINTR
                {}
                libc::_exit(0);
            }
        }
        // SAFETY: closing our copies of the ends we do not use.
        unsafe {
            libc::close(read_end);
            libc::close(told[1]);
        }
        let mut helper = None;
        if child > 0 {
            let (mut status, mut pid) = (0, 0i32);
            // SAFETY: reading 4 bytes into a valid i32, then reaping the intermediate
            // child, which exits at once.
            unsafe {
                if libc::read(told[0], (&raw mut pid).cast(), 4) == 4 && pid > 0 {
                    helper = Some(pid as u32);
                }
                libc::waitpid(child, &mut status, 0);
            }
        }
        // SAFETY: our read end of `told`.
        unsafe { libc::close(told[0]) };
        // Our copies go now; the background process still holds the files open.
        drop(self);
        let b = 1u8;
        // SAFETY: one byte from a valid buffer, then our end closes.
        unsafe {
            libc::write(write_end, (&raw const b).cast(), 1);
            libc::close(write_end);
        }
        helper
    }
}

//! x86-64: system call numbers from arch/x86/entry/syscalls/syscall_64.tbl (the
//! `__NR_*` of `<asm/unistd_64.h>`), `struct pt_regs` from
//! arch/x86/include/asm/ptrace.h, and the System V AMD64 calling convention.

/// The futex system call's number (`__NR_futex`), as the syscall tracepoints, `pt_regs`
/// and `/proc/PID/task/TID/syscall` give it.
pub const SYS_FUTEX: u64 = 202;

/// Offsets in `struct pt_regs`, in bytes.
pub mod pt_regs {
    /// The system call's number (`orig_ax`; `ax` gets the return value).
    pub const SYSCALL_NR: usize = 120;
    /// A system call's first argument (`di`; a futex call's word).
    pub const SYSCALL_ARG0: usize = 112;
    /// Its second argument (`si`; a futex call's op).
    pub const SYSCALL_ARG1: usize = 104;
    /// Its third argument (`dx`; the value a futex wait expects).
    pub const SYSCALL_ARG2: usize = 96;
    /// Its fourth argument (`r10`, not `cx` as in a function call; a futex wait's
    /// timeout).
    pub const SYSCALL_ARG3: usize = 56;
    /// Its fifth argument (`r8`; FUTEX_WAKE_OP's second word).
    pub const SYSCALL_ARG4: usize = 72;
    /// The user instruction pointer (`ip`).
    pub const IP: usize = 128;
    /// The user stack pointer (`sp`).
    pub const SP: usize = 152;
    /// The frame pointer (`bp`), for frames that keep one.
    pub const FP: usize = 32;

    /// Where the first three system call arguments lie next to each other, for a single
    /// helper read on kernels without BTF.
    pub const FIRST_SYSCALL_ARGS: usize = 96;

    /// The block at [`FIRST_SYSCALL_ARGS`]: `dx`, `si`, `di`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct FirstSyscallArgs {
        /// The third argument.
        pub arg2: u64,
        /// The second argument.
        pub arg1: u64,
        /// The first argument.
        pub arg0: u64,
    }

    // The block holds the three arguments it is taken apart into.
    const _: () = {
        use core::mem::{offset_of, size_of};
        assert!(FIRST_SYSCALL_ARGS + offset_of!(FirstSyscallArgs, arg0) == SYSCALL_ARG0);
        assert!(FIRST_SYSCALL_ARGS + offset_of!(FirstSyscallArgs, arg1) == SYSCALL_ARG1);
        assert!(FIRST_SYSCALL_ARGS + offset_of!(FirstSyscallArgs, arg2) == SYSCALL_ARG2);
        assert!(size_of::<FirstSyscallArgs>() == 24);
    };

    /// Every offset above with its member's name in the kernel's BTF, for a test
    /// against the running kernel.
    pub const BTF_MEMBERS: [(&str, usize); 9] = [
        ("orig_ax", SYSCALL_NR),
        ("di", SYSCALL_ARG0),
        ("si", SYSCALL_ARG1),
        ("dx", SYSCALL_ARG2),
        ("r10", SYSCALL_ARG3),
        ("r8", SYSCALL_ARG4),
        ("ip", IP),
        ("sp", SP),
        ("bp", FP),
    ];
}

/// Integer arguments a function receives in registers (`rdi`, `rsi`, `rdx`, `rcx`,
/// `r8`, `r9`: aya-ebpf's `ctx.arg(0..6)` in a uprobe); the seventh and later are on the
/// stack.
pub const CALL_REGISTER_ARGS: usize = 6;

/// At a function's first instruction, its return address is in memory at the stack
/// pointer plus this (`call` pushed it).
pub const RETURN_ADDRESS_AT_SP: u64 = 0;

/// At a function's first instruction, its first stack argument (the seventh) is at the
/// stack pointer plus this, just above the return address; the rest follow, 8 bytes
/// each.
pub const STACK_ARGS_AT_SP: u64 = 8;

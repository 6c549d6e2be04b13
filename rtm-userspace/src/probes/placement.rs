//! Where in a function to put a uprobe so that it costs little.
//!
//! On x86-64 the kernel single-steps most probed instructions out of line (a second
//! trap, ~6 us on a VM) but emulates a few in the first trap (~0.8 us): near jumps,
//! conditional jumps and calls, `push reg` and the one-byte `nop`. glibc often starts a
//! function with a load or two before its first branch. This module decodes the first
//! instructions and moves the probe to the first emulated one, provided every call
//! passes it exactly once and the argument registers and the stack pointer still hold
//! what they held at entry (so the probe reads the same arguments and return address,
//! and a return probe finds the return address on top of the stack). When unsure, it
//! stays at the entry.

use iced_x86::{
    Code, Decoder, DecoderOptions, FlowControl, Formatter as _, GasFormatter, Instruction,
    InstructionInfoFactory, Mnemonic, OpAccess, OpKind, Register,
};
use rtm_common::arch::CALL_REGISTER_ARGS;

/// The registers a function receives its integer arguments in, first to sixth (System V
/// AMD64, as aya-ebpf's `ctx.arg` reads them): what a probe that reads `n` arguments
/// keeps unchanged, `&CALL_ARGS[..n]`.
pub const CALL_ARGS: [Register; CALL_REGISTER_ARGS] = [
    Register::RDI,
    Register::RSI,
    Register::RDX,
    Register::RCX,
    Register::R8,
    Register::R9,
];

/// How far into a function the search goes.
const MAX_INSNS: usize = 12;

/// Where a probe goes and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Offset from the function's start.
    pub offset: u64,
    /// Whether the kernel emulates the probed instruction (the cheap case).
    pub emulated: bool,
    /// One line for `--verbose`.
    pub reason: String,
}

/// Whether the kernel's x86 uprobe code emulates `insn` instead of single-stepping it.
fn emulated(insn: &Instruction) -> bool {
    if insn.has_rep_prefix() || insn.has_repne_prefix() && insn.mnemonic() == Mnemonic::Nop {
        return false; // `pause` is `rep nop`
    }
    match insn.code() {
        Code::Nopd | Code::Nopq | Code::Nopw => insn.len() == 1,
        Code::Push_r64 => true,
        _ => {
            matches!(
                insn.flow_control(),
                FlowControl::UnconditionalBranch
                    | FlowControl::ConditionalBranch
                    | FlowControl::Call
            ) && insn.op0_kind() == OpKind::NearBranch64
                && !insn_has_operand_size_prefix(insn)
        }
    }
}

fn insn_has_operand_size_prefix(insn: &Instruction) -> bool {
    // The kernel refuses to emulate branches with a 0x66 prefix; iced reports their
    // 16-bit forms under distinct codes.
    matches!(insn.code(), Code::Jmp_rel16 | Code::Call_rel16)
        || insn.op0_kind() == OpKind::NearBranch16
}

/// Every near-branch target inside the function.
fn branch_targets(code: &[u8], ip: u64) -> Vec<u64> {
    let mut decoder = Decoder::with_ip(64, code, ip, DecoderOptions::NONE);
    let mut out = Vec::new();
    for insn in &mut decoder {
        if insn.is_invalid() {
            break;
        }
        if matches!(
            insn.op0_kind(),
            OpKind::NearBranch64 | OpKind::NearBranch32 | OpKind::NearBranch16
        ) {
            out.push(insn.near_branch_target());
        }
    }
    out
}

/// Chooses the probe point in a function whose bytes are `code`, loaded at `ip`. `keep`
/// lists the argument registers the probe reads; they and the stack pointer must be
/// untouched before the chosen point. Unless `pass_stores` is set, no store to memory
/// may precede it either (a lock word read at the probe must still be the caller's view).
pub fn place(code: &[u8], ip: u64, keep: &[Register], pass_stores: bool) -> Placement {
    let entry = |why: String| Placement {
        offset: 0,
        emulated: false,
        reason: why,
    };
    if code.is_empty() {
        return entry("at entry: function size unknown".into());
    }
    let targets = branch_targets(code, ip);
    let mut info = InstructionInfoFactory::new();
    let mut decoder = Decoder::with_ip(64, code, ip, DecoderOptions::NONE);
    let mut first = None;
    for (i, insn) in (&mut decoder).into_iter().take(MAX_INSNS).enumerate() {
        if insn.is_invalid() {
            return entry("at entry: undecodable instruction".into());
        }
        let mut text = String::new();
        GasFormatter::new().format(&insn, &mut text);
        let first_text = first.get_or_insert_with(|| text.clone()).clone();
        if i > 0 && targets.iter().any(|t| *t > ip && *t <= insn.ip()) {
            return entry(format!(
                "at entry (`{first_text}`, single-stepped): a branch re-enters the prologue"
            ));
        }
        if emulated(&insn) {
            return Placement {
                offset: insn.ip() - ip,
                emulated: true,
                reason: if i == 0 {
                    format!("at entry: `{text}` is emulated")
                } else {
                    format!(
                        "+{:#x} on `{text}` (emulated), past {i} instruction(s) that keep the \
                         arguments and the stack",
                        insn.ip() - ip
                    )
                },
            };
        }
        if insn.flow_control() != FlowControl::Next {
            return entry(format!(
                "at entry (`{first_text}`, single-stepped): `{text}` leaves the straight path \
                 before any emulated instruction"
            ));
        }
        let used = info.info(&insn);
        let clobbers = used.used_registers().iter().find(|r| {
            matches!(
                r.access(),
                OpAccess::Write
                    | OpAccess::CondWrite
                    | OpAccess::ReadWrite
                    | OpAccess::ReadCondWrite
            ) && {
                let full = r.register().full_register();
                full == Register::RSP || keep.iter().any(|k| k.full_register() == full)
            }
        });
        if let Some(r) = clobbers {
            return entry(format!(
                "at entry (`{first_text}`, single-stepped): `{text}` changes {:?} before any \
                 emulated instruction",
                r.register()
            ));
        }
        let stores = used.used_memory().iter().any(|m| {
            matches!(
                m.access(),
                OpAccess::Write
                    | OpAccess::CondWrite
                    | OpAccess::ReadWrite
                    | OpAccess::ReadCondWrite
            )
        });
        if stores && !pass_stores {
            return entry(format!(
                "at entry (`{first_text}`, single-stepped): `{text}` stores to memory before \
                 any emulated instruction"
            ));
        }
    }
    entry(format!(
        "at entry (`{}`, single-stepped): no emulated instruction in the first {MAX_INSNS}",
        first.unwrap_or_default()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARG0: &[Register] = &[Register::RDI];

    #[test]
    fn moves_past_loads_to_the_first_branch() {
        // glibc 2.36 pthread_mutex_lock: mov 0x10(%rdi),%eax; mov %eax,%edx;
        // and $0x17f,%edx; and $0x7c,%eax; jne ...; push %rbx
        let code = [
            0x8b, 0x47, 0x10, 0x89, 0xc2, 0x81, 0xe2, 0x7f, 0x01, 0x00, 0x00, 0x83, 0xe0, 0x7c,
            0x0f, 0x85, 0xac, 0x00, 0x00, 0x00, 0x53,
        ];
        let p = place(&code, 0x1000, ARG0, false);
        assert_eq!((p.offset, p.emulated), (14, true), "{}", p.reason);
    }

    #[test]
    fn stays_at_an_emulated_entry() {
        let code = [0x41, 0x57, 0x41, 0x56, 0xc3]; // push %r15; push %r14; ret
        let p = place(&code, 0x1000, ARG0, false);
        assert_eq!((p.offset, p.emulated), (0, true), "{}", p.reason);
    }

    #[test]
    fn refuses_to_pass_a_write_to_an_argument() {
        // mov %rsi,%rdx; xor %esi,%esi; jmp ... : fine for arg 0, not when rsi is kept.
        let code = [0x48, 0x89, 0xf2, 0x31, 0xf6, 0xe9, 0x00, 0x00, 0x00, 0x00];
        assert_eq!(place(&code, 0x1000, ARG0, false).offset, 5);
        let p = place(&code, 0x1000, &[Register::RDI, Register::RSI], false);
        assert_eq!((p.offset, p.emulated), (0, false), "{}", p.reason);
        assert!(p.reason.contains("RSI"), "{}", p.reason);
    }

    #[test]
    fn refuses_to_pass_a_stack_change() {
        // sub $0x8,%rsp; jmp ...
        let code = [0x48, 0x83, 0xec, 0x08, 0xeb, 0x00];
        let p = place(&code, 0x1000, ARG0, false);
        assert_eq!(p.offset, 0, "{}", p.reason);
    }

    #[test]
    fn refuses_a_point_a_loop_jumps_back_to() {
        // 0: mov (%rdi),%eax  2: test %eax,%eax  4: jne 2
        let code = [0x8b, 0x07, 0x85, 0xc0, 0x75, 0xfc];
        let p = place(&code, 0x1000, ARG0, false);
        assert_eq!(p.offset, 0, "{}", p.reason);
        assert!(p.reason.contains("re-enters"), "{}", p.reason);
    }

    #[test]
    fn passes_a_store_only_when_allowed() {
        // lock decl (%rdi); jne ...  (pthread_spin_lock)
        let code = [0xf0, 0xff, 0x0f, 0x75, 0x0b];
        assert_eq!(place(&code, 0x1000, ARG0, false).offset, 0);
        assert_eq!(place(&code, 0x1000, ARG0, true).offset, 3);
    }

    #[test]
    fn stops_at_a_return() {
        // movl $1,(%rdi); xor %eax,%eax; ret  (pthread_spin_unlock)
        let code = [0xc7, 0x07, 0x01, 0x00, 0x00, 0x00, 0x31, 0xc0, 0xc3];
        let p = place(&code, 0x1000, ARG0, false);
        assert_eq!((p.offset, p.emulated), (0, false), "{}", p.reason);
    }

    #[test]
    fn places_every_probe_in_this_libc_after_the_stack_is_intact() {
        use crate::proc::elf::ElfSymbols;
        let maps = crate::proc::process::modules(std::process::id()).unwrap();
        let libc = maps
            .iter()
            .find(|m| m.path.to_string_lossy().contains("libc.so"))
            .unwrap();
        let elf = ElfSymbols::open(&libc.path).unwrap();
        let bytes = std::fs::read(&libc.path).unwrap();
        let f = "pthread_mutex_lock";
        let off = elf.function_offset(f).unwrap() as usize;
        let size = elf.function_size(f).unwrap() as usize;
        let p = place(&bytes[off..off + size], 0, ARG0, false);
        assert!(p.emulated, "{f}: {}", p.reason);
    }
}

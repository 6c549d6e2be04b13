//! Uprobes many at a time, through the kernel's uprobe_multi links (Linux 6.6+): one link
//! per program and file, for all its offsets, each with its cookie. Closing a link
//! removes all its uprobes after one RCU grace period, where each perf-event uprobe waits
//! for its own, one at a time machine-wide (0.1-0.2 s each here): 60 uprobes took 12 s to
//! remove, and any other uprobe attach on the machine waited behind them. Attaching is
//! one system call per link instead of one perf event per probe.
//!
//! Such links need programs loaded for them (expected attach type
//! BPF_TRACE_UPROBE_MULTI), which aya 0.14 cannot do. The uprobe programs are loaded a
//! second time here, from the same object, relocated against the maps aya made, so they
//! share every map and global with the rest. A kernel that refuses any of this leaves
//! the perf-event path.

use std::{
    collections::HashMap,
    ffi::CString,
    io,
    os::{
        fd::{AsFd as _, AsRawFd as _, FromRawFd as _, OwnedFd},
        unix::ffi::OsStrExt as _,
    },
    path::Path,
};

use aya::{Ebpf, maps::Map};
use aya_obj::generated::{
    BPF_F_UPROBE_MULTI_RETURN,
    bpf_attach_type::BPF_TRACE_UPROBE_MULTI,
    bpf_attr,
    bpf_cmd::{BPF_LINK_CREATE, BPF_PROG_LOAD},
    bpf_prog_type::BPF_PROG_TYPE_KPROBE,
};

/// The descriptor of a map of any kind aya made.
fn map_fd(m: &Map) -> Option<i32> {
    let data = match m {
        Map::Array(d)
        | Map::HashMap(d)
        | Map::PerCpuArray(d)
        | Map::PerCpuHashMap(d)
        | Map::LruHashMap(d)
        | Map::RingBuf(d)
        | Map::PerfEventArray(d)
        | Map::StackTraceMap(d)
        | Map::Unsupported(d) => d,
        _ => return None,
    };
    Some(data.fd().as_fd().as_raw_fd())
}

fn bpf(cmd: u32, attr: &mut bpf_attr) -> io::Result<OwnedFd> {
    // SAFETY: a bpf_attr of the kernel's layout, zeroed but for what the command reads.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut bpf_attr,
            size_of::<bpf_attr>(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(r as i32) })
}

/// The uprobe programs for uprobe_multi links: relocated when rtm-trace loads, loaded
/// into the kernel on first use (the verifier takes tens of ms for each, and a run
/// without uprobes should not wait for them).
#[derive(Debug)]
pub struct MultiPrograms {
    /// Relocated programs, by name.
    insns: HashMap<&'static str, Relocated>,
    /// The object's BTF, loaded into the kernel: a program that passes a callback to a
    /// helper (bpf_loop) must come with its functions' BTF.
    btf: Option<OwnedFd>,
    license: CString,
    fds: std::cell::RefCell<HashMap<&'static str, std::rc::Rc<OwnedFd>>>,
}

/// One program's instructions and its functions' BTF records.
#[derive(Debug)]
struct Relocated {
    insns: Vec<aya_obj::generated::bpf_insn>,
    func_info: Vec<u8>,
    func_info_rec_size: u32,
    func_info_cnt: u32,
    line_info: Vec<u8>,
    line_info_rec_size: u32,
    line_info_cnt: u32,
}

/// Loads the object's BTF (fixed up as aya does for a kernel with every BTF feature:
/// uprobe_multi links need Linux 6.6, which has them all).
fn load_btf(obj: &mut aya_obj::Object) -> Option<OwnedFd> {
    let features = aya_obj::btf::BtfFeatures::new(true, true, true, true, true, true, true, true);
    let bytes = obj.fixup_and_sanitize_btf(&features).ok()??.to_bytes();
    // SAFETY: plain data, zeroed.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    // SAFETY: writing the BTF-load member of the union, which the command reads.
    unsafe {
        let u = &mut attr.__bindgen_anon_7;
        u.btf = bytes.as_ptr() as u64;
        u.btf_size = bytes.len() as u32;
    }
    bpf(aya_obj::generated::bpf_cmd::BPF_BTF_LOAD as u32, &mut attr)
        .inspect_err(|e| log::info!("uprobe_multi programs without BTF: {e}"))
        .ok()
}

/// Why the programs could not be loaded for uprobe_multi links.
#[derive(Debug, thiserror::Error)]
pub enum MultiError {
    /// The object could not be parsed or relocated.
    #[error("the eBPF object: {0}")]
    Object(String),
    /// A map the programs use was not found among aya's.
    #[error("map {0} not found")]
    Map(String),
    /// The kernel refused a program (a kernel before 6.6 has no uprobe_multi).
    #[error("loading {name} for uprobe_multi links: {source}{log}")]
    Load {
        /// The program.
        name: &'static str,
        /// Why.
        #[source]
        source: io::Error,
        /// The verifier's log, when there is one.
        log: String,
    },
}

impl MultiPrograms {
    /// Loads the programs `names` of `object` for uprobe_multi links, relocated against
    /// the maps of `ebpf` (loaded from the same object; called before any map is taken
    /// out of it).
    pub fn load(object: &[u8], ebpf: &Ebpf, names: &[&'static str]) -> Result<Self, MultiError> {
        let mut obj =
            aya_obj::Object::parse(object).map_err(|e| MultiError::Object(e.to_string()))?;
        let btf = load_btf(&mut obj);
        let fds: HashMap<&str, i32> = ebpf
            .maps()
            .filter_map(|(n, m)| Some((n, map_fd(m)?)))
            .collect();
        let maps = obj.maps.clone();
        let mut with_fds = Vec::new();
        for (name, m) in &maps {
            let fd = *fds
                .get(name.as_str())
                .ok_or_else(|| MultiError::Map(name.clone()))?;
            with_fds.push((name.as_str(), fd, m));
        }
        let text_sections = obj.functions.keys().map(|(s, _)| *s).collect();
        obj.relocate_maps(with_fds.into_iter(), &text_sections)
            .map_err(|e| MultiError::Object(e.to_string()))?;
        obj.relocate_calls(&text_sections)
            .map_err(|e| MultiError::Object(e.to_string()))?;
        let license = obj.license.clone();
        let mut insns = HashMap::new();
        for &name in names {
            let prog = obj
                .programs
                .get(name)
                .ok_or_else(|| MultiError::Object(format!("no program {name}")))?;
            let f = obj
                .functions
                .get(&prog.function_key())
                .ok_or_else(|| MultiError::Object(format!("no function for {name}")))?;
            insns.insert(
                name,
                Relocated {
                    insns: f.instructions.clone(),
                    func_info: f.func_info.func_info_bytes(),
                    func_info_rec_size: f.func_info_rec_size as u32,
                    func_info_cnt: f.func_info.len() as u32,
                    line_info: f.line_info.line_info_bytes(),
                    line_info_rec_size: f.line_info_rec_size as u32,
                    line_info_cnt: f.line_info.len() as u32,
                },
            );
        }
        Ok(Self {
            insns,
            btf,
            license,
            fds: Default::default(),
        })
    }

    /// The program `name`, loaded on first use.
    fn program(&self, name: &'static str) -> Result<std::rc::Rc<OwnedFd>, MultiError> {
        if let Some(fd) = self.fds.borrow().get(name) {
            return Ok(fd.clone());
        }
        let insns = self
            .insns
            .get(name)
            .ok_or_else(|| MultiError::Object(format!("no program {name}")))?;
        let fd = std::rc::Rc::new(load_one(
            name,
            insns,
            self.btf.as_ref().map(|f| f.as_raw_fd()),
            &self.license,
        )?);
        self.fds.borrow_mut().insert(name, fd.clone());
        Ok(fd)
    }

    /// Whether the kernel makes uprobe_multi links for program `name` (loaded for them
    /// now): as libbpf probes it, a link on `/` is refused as not a regular file
    /// (EBADF) by a kernel that has them, and as an unknown attach type by one that
    /// does not (before Linux 6.6).
    pub fn links_work(&self, name: &'static str) -> Result<(), String> {
        let offsets = [0u64];
        let cookies = [0u64];
        match self.attach(name, Path::new("/"), &offsets, &cookies, None, false) {
            Err(e) if e.raw_os_error() == Some(libc::EBADF) => Ok(()),
            Err(e) => Err(e.to_string()),
            Ok(_) => Err("a link on / was accepted".into()),
        }
    }

    /// The programs loaded so far, by name.
    pub fn programs(&self) -> Vec<(&'static str, std::rc::Rc<OwnedFd>)> {
        self.fds
            .borrow()
            .iter()
            .map(|(n, fd)| (*n, fd.clone()))
            .collect()
    }

    /// Attaches program `name` at `offsets` of the file `path` (each with its cookie),
    /// as return probes with `ret`, for process `pid` only or (None) for every process
    /// that maps the file. The link lives as long as the returned descriptor.
    pub fn attach(
        &self,
        name: &'static str,
        path: &Path,
        offsets: &[u64],
        cookies: &[u64],
        pid: Option<u32>,
        ret: bool,
    ) -> io::Result<OwnedFd> {
        let prog = self.program(name).map_err(io::Error::other)?;
        let path = CString::new(path.as_os_str().as_bytes())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // SAFETY: plain data, zeroed.
        let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
        // SAFETY: writing the link_create member of the union, which the command reads.
        unsafe {
            let l = &mut attr.link_create;
            l.__bindgen_anon_1.prog_fd = prog.as_raw_fd() as u32;
            l.attach_type = BPF_TRACE_UPROBE_MULTI as u32;
            let u = &mut l.__bindgen_anon_3.uprobe_multi;
            u.path = path.as_ptr() as u64;
            u.offsets = offsets.as_ptr() as u64;
            u.cookies = cookies.as_ptr() as u64;
            u.cnt = offsets.len() as u32;
            u.flags = if ret { BPF_F_UPROBE_MULTI_RETURN } else { 0 };
            u.pid = pid.unwrap_or(0);
        }
        bpf(BPF_LINK_CREATE as u32, &mut attr)
    }
}

fn load_one(
    name: &'static str,
    prog: &Relocated,
    btf: Option<i32>,
    license: &CString,
) -> Result<OwnedFd, MultiError> {
    let insns = &prog.insns;
    let attempt = |log: &mut [u8]| {
        // SAFETY: plain data, zeroed.
        let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
        // SAFETY: writing the program-load member of the union, which the command reads.
        unsafe {
            let u = &mut attr.__bindgen_anon_3;
            u.prog_type = BPF_PROG_TYPE_KPROBE as u32;
            u.expected_attach_type = BPF_TRACE_UPROBE_MULTI as u32;
            u.insns = insns.as_ptr() as u64;
            u.insn_cnt = insns.len() as u32;
            u.license = license.as_ptr() as u64;
            if let Some(btf) = btf {
                u.prog_btf_fd = btf as u32;
                if prog.func_info_rec_size > 0 {
                    u.func_info = prog.func_info.as_ptr() as u64;
                    u.func_info_rec_size = prog.func_info_rec_size;
                    u.func_info_cnt = prog.func_info_cnt;
                }
                if prog.line_info_rec_size > 0 {
                    u.line_info = prog.line_info.as_ptr() as u64;
                    u.line_info_rec_size = prog.line_info_rec_size;
                    u.line_info_cnt = prog.line_info_cnt;
                }
            }
            let short: Vec<std::ffi::c_char> = name
                .bytes()
                .take(15)
                .map(|b| b as std::ffi::c_char)
                .collect();
            u.prog_name[..short.len()].copy_from_slice(&short);
            if !log.is_empty() {
                u.log_level = 1;
                u.log_buf = log.as_mut_ptr() as u64;
                u.log_size = log.len() as u32;
            }
        }
        bpf(BPF_PROG_LOAD as u32, &mut attr)
    };
    attempt(&mut []).or_else(|_| {
        // Again with the verifier's log, to say why.
        let mut log = vec![0u8; 1 << 16];
        attempt(&mut log).map_err(|source| {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let text = String::from_utf8_lossy(&log[..end]);
            let tail: String = text.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
            MultiError::Load {
                name,
                source,
                log: if tail.is_empty() {
                    String::new()
                } else {
                    format!(" (verifier: {tail})")
                },
            }
        })
    })
}

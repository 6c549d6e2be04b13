//! Exec and fork events from the kernel's process connector (a netlink socket): a
//! process that starts or execs is looked at as soon as it has, with no eBPF program
//! attached while nothing is traced (the agent costs an idle node nothing). Root in
//! the initial namespaces only; without it, discovery falls back to its /proc rescans.

use std::{
    io,
    mem::size_of,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
};

use tokio::io::unix::AsyncFd;

const NETLINK_CONNECTOR: libc::c_int = 11;
const CN_IDX_PROC: u32 = 1;
const CN_VAL_PROC: u32 = 1;
const PROC_CN_MCAST_LISTEN: u32 = 1;
const PROC_EVENT_FORK: u32 = 0x1;
const PROC_EVENT_EXEC: u32 = 0x2;
const NLMSG_HDRLEN: usize = 16;
/// struct cn_msg: id (idx, val), seq, ack, len (u16), flags (u16).
const CN_MSG_LEN: usize = 20;

/// A process event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcEvent {
    /// `pid` (a process, not a thread) was forked by `parent`.
    Fork {
        /// The parent process.
        parent: u32,
        /// The new process.
        pid: u32,
    },
    /// `pid` exec'd a program.
    Exec {
        /// The process.
        pid: u32,
    },
}

/// The subscribed socket.
pub struct ProcEvents {
    fd: AsyncFd<OwnedFd>,
    buf: Vec<u8>,
}

impl ProcEvents {
    /// Subscribes to the process connector.
    pub fn open() -> io::Result<Self> {
        // SAFETY: plain socket creation; the descriptor is owned below.
        let raw = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                NETLINK_CONNECTOR,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor just created and owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: zeroed sockaddr_nl is valid; fields set below.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as u16;
        addr.nl_groups = CN_IDX_PROC;
        addr.nl_pid = 0;
        // SAFETY: addr is a valid sockaddr_nl of the size given.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_nl).cast(),
                size_of::<libc::sockaddr_nl>() as u32,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut msg = Vec::with_capacity(NLMSG_HDRLEN + CN_MSG_LEN + 4);
        let total = (NLMSG_HDRLEN + CN_MSG_LEN + 4) as u32;
        msg.extend_from_slice(&total.to_ne_bytes());
        msg.extend_from_slice(&(libc::NLMSG_DONE as u16).to_ne_bytes());
        msg.extend_from_slice(&0u16.to_ne_bytes()); // flags
        msg.extend_from_slice(&0u32.to_ne_bytes()); // seq
        msg.extend_from_slice(&std::process::id().to_ne_bytes());
        msg.extend_from_slice(&CN_IDX_PROC.to_ne_bytes());
        msg.extend_from_slice(&CN_VAL_PROC.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes()); // seq
        msg.extend_from_slice(&0u32.to_ne_bytes()); // ack
        msg.extend_from_slice(&4u16.to_ne_bytes()); // len
        msg.extend_from_slice(&0u16.to_ne_bytes()); // flags
        msg.extend_from_slice(&PROC_CN_MCAST_LISTEN.to_ne_bytes());
        // SAFETY: msg is a valid buffer of its length.
        let n = unsafe { libc::send(fd.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            // SAFETY: the descriptor is owned by the AsyncFd and outlives its registration.
            fd: unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }?,
            buf: vec![0; 64 * 1024],
        })
    }

    /// The next batch of events (an overrun of the socket's buffer is an error the
    /// caller answers with a rescan of /proc).
    pub async fn next(&mut self) -> io::Result<Vec<ProcEvent>> {
        loop {
            let mut guard = self.fd.readable().await?;
            let buf = &mut self.buf;
            match guard.try_io(|fd| {
                // SAFETY: buf is a valid writable buffer of its length.
                let n = unsafe {
                    libc::recv(
                        fd.get_ref().as_raw_fd(),
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                        0,
                    )
                };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            }) {
                Ok(Ok(n)) => return Ok(parse(&self.buf[..n])),
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
    }
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The events in one datagram (netlink messages, each a cn_msg and a proc_event).
fn parse(mut b: &[u8]) -> Vec<ProcEvent> {
    let mut out = Vec::new();
    while b.len() >= NLMSG_HDRLEN {
        let Some(len) = u32_at(b, 0).map(|l| l as usize) else {
            break;
        };
        if len < NLMSG_HDRLEN || len > b.len() {
            break;
        }
        let msg = &b[NLMSG_HDRLEN..len];
        // proc_event: what (u32), cpu (u32), timestamp (u64), then the event's data.
        let ev = msg.get(CN_MSG_LEN..).unwrap_or_default();
        let data = 16;
        match u32_at(ev, 0) {
            Some(PROC_EVENT_FORK) => {
                // parent_pid, parent_tgid, child_pid, child_tgid.
                if let (Some(ptgid), Some(cpid), Some(ctgid)) = (
                    u32_at(ev, data + 4),
                    u32_at(ev, data + 8),
                    u32_at(ev, data + 12),
                ) && cpid == ctgid
                {
                    out.push(ProcEvent::Fork {
                        parent: ptgid,
                        pid: ctgid,
                    });
                }
            }
            Some(PROC_EVENT_EXEC) => {
                // process_pid, process_tgid.
                if let Some(tgid) = u32_at(ev, data + 4) {
                    out.push(ProcEvent::Exec { pid: tgid });
                }
            }
            _ => {}
        }
        let step = (len + 3) & !3;
        if step > b.len() {
            break;
        }
        b = &b[step..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(what: u32, data: &[u32]) -> Vec<u8> {
        let mut ev = Vec::new();
        ev.extend_from_slice(&what.to_ne_bytes());
        ev.extend_from_slice(&0u32.to_ne_bytes());
        ev.extend_from_slice(&0u64.to_ne_bytes());
        for d in data {
            ev.extend_from_slice(&d.to_ne_bytes());
        }
        let len = NLMSG_HDRLEN + CN_MSG_LEN + ev.len();
        let mut m = vec![0; NLMSG_HDRLEN + CN_MSG_LEN];
        m[..4].copy_from_slice(&(len as u32).to_ne_bytes());
        m.extend_from_slice(&ev);
        m
    }

    #[test]
    fn forks_of_processes_and_execs_are_read_and_junk_is_not() {
        let mut b = message(PROC_EVENT_FORK, &[10, 10, 20, 20]);
        b.extend(message(PROC_EVENT_FORK, &[10, 10, 21, 20])); // a thread
        b.extend(message(PROC_EVENT_EXEC, &[20, 20]));
        b.extend(message(0x8000_0000, &[20, 20, 0, 0]));
        assert_eq!(
            parse(&b),
            vec![
                ProcEvent::Fork {
                    parent: 10,
                    pid: 20
                },
                ProcEvent::Exec { pid: 20 }
            ]
        );
        assert!(parse(&[0xff; 7]).is_empty());
        assert!(parse(&[0xff; 64]).is_empty());
        let mut short = message(PROC_EVENT_EXEC, &[20, 20]);
        short.truncate(30);
        assert!(parse(&short).is_empty());
    }
}

//! Files the user names as input (the config file, the parts given to `merge`): read
//! with a bound, from a regular file or a pipe (`--config <(...)`), never from a device,
//! and giving up at Ctrl-C while a pipe has nothing to say.

use std::{
    fs::File,
    io::{self, Read},
    os::{
        fd::AsFd as _,
        unix::fs::{FileTypeExt as _, OpenOptionsExt as _},
    },
    path::Path,
};

use crate::{interrupt, proc::files::type_name};

/// Largest config file read.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Largest part read by `merge` (a part of a job with 100,000 traced mutexes is a few
/// hundred MiB; only its rank graph is kept).
pub const MAX_PART_BYTES: u64 = 4 << 30;

/// Opens an input: a regular file of at most `max` bytes, or a pipe/FIFO (bounded as
/// it is read). Returns the file and whether it is a pipe.
pub fn open(path: &Path, max: u64) -> io::Result<(File, bool)> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)?;
    let meta = file.metadata()?;
    let ft = meta.file_type();
    if ft.is_file() {
        if meta.len() > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "it is {} bytes, more than the {max} read at most",
                    meta.len()
                ),
            ));
        }
        return Ok((file, false));
    }
    if ft.is_fifo() {
        return Ok((file, true));
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("it is {}, not a file", type_name(ft)),
    ))
}

/// A reader over an input that reads at most `max` bytes (more is an error) and, for a
/// pipe, waits for data only until Ctrl-C.
pub struct Bounded {
    file: File,
    pipe: bool,
    left: u64,
    max: u64,
}

impl Bounded {
    /// Opens `path` (see [`open`]).
    pub fn open(path: &Path, max: u64) -> io::Result<Self> {
        let (file, pipe) = open(path, max)?;
        Ok(Self {
            file,
            pipe,
            left: max,
            max,
        })
    }
}

impl Read for Bounded {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            // One byte more would be past the bound.
            let mut probe = [0u8; 1];
            return match self.read_raw(&mut probe)? {
                0 => Ok(0),
                _ => Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("longer than the {} bytes read at most", self.max),
                )),
            };
        }
        let n = buf.len().min(self.left.min(usize::MAX as u64) as usize);
        let got = self.read_raw(&mut buf[..n])?;
        self.left -= got as u64;
        Ok(got)
    }
}

impl Bounded {
    fn read_raw(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.file.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && self.pipe => {
                    interrupt::poll_fd(self.file.as_fd(), libc::POLLIN)?;
                }
                r => return r,
            }
        }
    }
}

/// Reads a whole input of at most `max` bytes as text.
pub fn read_text(path: &Path, max: u64) -> io::Result<String> {
    let mut s = String::new();
    Bounded::open(path, max)?.read_to_string(&mut s)?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_and_directories_are_refused_at_once() {
        let e = read_text(Path::new("/dev/zero"), 100).unwrap_err();
        assert!(e.to_string().contains("character device"), "{e}");
        let e = read_text(Path::new("/tmp"), 100).unwrap_err();
        assert!(e.to_string().contains("directory"), "{e}");
    }

    #[test]
    fn reads_are_bounded() {
        let dir = std::env::temp_dir().join(format!("rtm-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("big");
        std::fs::write(&f, vec![b'a'; 200]).unwrap();
        let e = read_text(&f, 100).unwrap_err();
        assert!(e.to_string().contains("more than the 100"), "{e}");
        assert_eq!(read_text(&f, 200).unwrap().len(), 200);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_pipe_is_read_to_its_end_and_bounded() {
        // Process substitution hands a pipe as /dev/fd/N.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "printf 'hello'; sleep 0.2; printf ' world'"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::os::fd::AsRawFd as _;
        let fd = child.stdout.as_ref().unwrap().as_raw_fd();
        let text = read_text(Path::new(&format!("/proc/self/fd/{fd}")), 100).unwrap();
        assert_eq!(text, "hello world");
        child.wait().unwrap();
        let mut child = std::process::Command::new("sh")
            .args(["-c", "head -c 1000 /dev/zero"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let fd = child.stdout.as_ref().unwrap().as_raw_fd();
        let mut buf = Vec::new();
        let e = Bounded::open(Path::new(&format!("/proc/self/fd/{fd}")), 100)
            .unwrap()
            .read_to_end(&mut buf)
            .unwrap_err();
        assert!(e.to_string().contains("at most"), "{e}");
        child.wait().unwrap();
    }
}

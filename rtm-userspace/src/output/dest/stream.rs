//! A destination written while tracing (a timeline), not once at the end: the same
//! checks and the same atomic replacement as [`Dest::write`], with the bytes going out
//! as they come through a bounded buffer.

use std::{
    fs::File,
    io::{self, BufWriter, Write},
};

use super::{
    Dest, DestError, How, Patient, io_err, new_file, open_through, put_in_place, stdout_writer,
};

/// Bytes buffered before a write to the destination.
const BUFFER: usize = 1 << 18;

enum Out {
    Stdout(Box<dyn Write + Send>),
    Patient(Patient),
    /// The unnamed file that replaces the destination at the end.
    File(File),
}

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Out::Stdout(o) => o.write(buf),
            Out::Patient(p) => p.write(buf),
            Out::File(f) => f.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Out::Stdout(o) => o.flush(),
            Out::Patient(p) => p.flush(),
            Out::File(f) => f.flush(),
        }
    }
}

/// An open destination being written.
pub struct Stream {
    dest: Dest,
    out: BufWriter<Out>,
}

impl Dest {
    /// Opens the destination to write it as results come. A regular file appears (is
    /// renamed over the destination) only at `Stream::finish`.
    pub fn stream(mut self) -> Result<Stream, DestError> {
        let path = self.path.clone();
        let out = match &mut self.how {
            How::Stdout => Out::Stdout(stdout_writer()),
            How::Descriptor(fd) => Out::Patient(Patient::new(File::from(
                fd.try_clone().map_err(io_err(&path))?,
            ))),
            How::Through { dir, name, id } => {
                Out::Patient(Patient::new(open_through(dir, name, *id, &path)?))
            }
            How::Replace {
                dir,
                name,
                ready,
                tmp,
            } => Out::File(match ready.take() {
                Some(f) => f,
                None => {
                    let (f, t) = new_file(dir, name, &path)?;
                    *tmp = t;
                    f
                }
            }),
        };
        Ok(Stream {
            dest: self,
            out: BufWriter::with_capacity(BUFFER, out),
        })
    }
}

impl Stream {
    /// Writes `bytes`.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), DestError> {
        self.out.write_all(bytes).map_err(io_err(&self.dest.path))
    }

    /// Whether bytes written can be rewritten ([`Stream::patch`]): the destination is a
    /// file, not a pipe or a terminal.
    pub fn patchable(&self) -> bool {
        matches!(self.out.get_ref(), Out::File(_))
    }

    /// Rewrites the bytes at `offset` (from the start of what was written) with
    /// `bytes`, as long as they are: nothing is inserted. Only a file can be.
    pub fn patch(&mut self, offset: u64, bytes: &[u8]) -> Result<(), DestError> {
        use std::os::unix::fs::FileExt;
        self.out.flush().map_err(io_err(&self.dest.path))?;
        match self.out.get_ref() {
            Out::File(f) => f
                .write_all_at(bytes, offset)
                .map_err(io_err(&self.dest.path)),
            _ => Err(io_err(&self.dest.path)(io::Error::from(
                io::ErrorKind::Unsupported,
            ))),
        }
    }

    /// Writes what is buffered and puts the file in place.
    pub fn finish(mut self) -> Result<(), DestError> {
        let path = self.dest.path.clone();
        let out = self
            .out
            .into_inner()
            .map_err(|e| io_err(&path)(e.into_error()))?;
        match (out, &mut self.dest.how) {
            (Out::File(file), How::Replace { dir, name, tmp, .. }) => {
                file.sync_all().map_err(io_err(&path))?;
                put_in_place(dir, name, &file, tmp, &path)
            }
            (mut out, _) => out.flush().map_err(io_err(&path)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streamed_file_appears_whole_at_the_end() {
        let dir = std::env::temp_dir().join(format!("rtm-stream-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.pftrace");
        let mut s = Dest::check(&path).unwrap().stream().unwrap();
        s.write(b"abc").unwrap();
        s.write(&vec![7u8; 1 << 19]).unwrap();
        assert!(!path.exists(), "no file before the end");
        s.finish().unwrap();
        let body = std::fs::read(&path).unwrap();
        assert_eq!(body.len(), 3 + (1 << 19));
        assert_eq!(&body[..3], b"abc");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_streamed_file_can_be_rewritten_in_place_before_it_appears() {
        let dir = std::env::temp_dir().join(format!("rtm-patch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.pftrace");
        let mut s = Dest::check(&path).unwrap().stream().unwrap();
        assert!(s.patchable());
        s.write(b"abcdef").unwrap();
        s.patch(2, b"XY").unwrap();
        s.write(b"gh").unwrap();
        s.finish().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"abXYefgh");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! A destination's path resolved one component at a time, by descriptor, the way the
//! kernel would, except that every symbolic link on the way (in a directory of the
//! path, or at its end) is followed only when it belongs to root or to the invoking
//! user. A link someone else planted anywhere in the path (`pub/outdir ->
//! /root-only-dir` in a world-writable `pub`) is refused, and what was checked is what
//! is written: the directory is kept open, never looked up by name again.

use std::{
    ffi::{OsStr, OsString},
    os::{
        fd::{AsFd, OwnedFd},
        unix::ffi::OsStrExt as _,
    },
    path::{Component, Path, PathBuf},
};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, Stat};

use super::{DestError, errno, invoking_uid};

/// Links followed at most, as the kernel's MAXSYMLINKS.
const MAX_LINKS: u32 = 40;

/// A destination's directory, opened, and the name in it.
pub(super) struct Resolved {
    /// The directory the destination is in (an O_PATH descriptor).
    pub dir: OwnedFd,
    /// The destination's name in it.
    pub name: OsString,
    /// What is there now (not following a link: there is none left); None when nothing.
    pub st: Option<Stat>,
}

/// Whether a link owned by `owner` may be followed.
pub(super) fn trusted(owner: u32) -> bool {
    owner == 0 || owner == invoking_uid()
}

/// Resolves `path` (relative paths from the working directory).
pub(super) fn resolve(path: &Path) -> Result<Resolved, DestError> {
    let cwd = rfs::open(".", dir_flags(), Mode::empty()).map_err(errno(path))?;
    Walk { path, links: 0 }.file(&cwd, path, Path::new(""), None)
}

fn dir_flags() -> OFlags {
    OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC
}

struct Walk<'a> {
    /// The destination as given, for messages.
    path: &'a Path,
    links: u32,
}

impl Walk<'_> {
    fn shown(&self) -> String {
        self.path.display().to_string()
    }

    /// Resolves `rel` from `at` (whose path, for messages, is `at_shown`) to a directory
    /// and a name. `link` is the target of the link that led here, when one did: then
    /// nothing there is a link to nothing, not a new file.
    fn file(
        &mut self,
        at: &OwnedFd,
        rel: &Path,
        at_shown: &Path,
        link: Option<&Path>,
    ) -> Result<Resolved, DestError> {
        let name = rel.file_name().ok_or_else(|| DestError::Kind {
            path: self.shown(),
            kind: "a directory",
            hint: " inside it",
        })?;
        let parent = match rel.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let (dir, dir_shown) = self.dir(at, parent, at_shown, link)?;
        if let Some(fs) = super::special_fs(&dir) {
            return Err(DestError::SpecialFs {
                path: self.shown(),
                fs,
            });
        }
        let shown = dir_shown.join(name);
        match rfs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Err(rustix::io::Errno::NOENT) => match link {
                Some(target) => Err(DestError::Dangling {
                    path: self.shown(),
                    target: target.display().to_string(),
                }),
                None => Ok(Resolved {
                    dir,
                    name: name.to_owned(),
                    st: None,
                }),
            },
            Err(e) => Err(errno(self.path)(e)),
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
                let target = self.follow(&dir, name, &dir_shown, &shown)?;
                let base = if target.is_absolute() {
                    PathBuf::new()
                } else {
                    dir_shown
                };
                self.file(&dir, &target, &base, Some(&target))
            }
            Ok(st) => Ok(Resolved {
                dir,
                name: name.to_owned(),
                st: Some(st),
            }),
        }
    }

    /// Opens the directory `rel` from `at`, one component at a time, following only
    /// trusted links. Returns it and its path for messages.
    fn dir(
        &mut self,
        at: &OwnedFd,
        rel: &Path,
        at_shown: &Path,
        link: Option<&Path>,
    ) -> Result<(OwnedFd, PathBuf), DestError> {
        let mut cur = at.try_clone().map_err(|e| DestError::Io {
            path: self.shown(),
            source: e,
        })?;
        let mut shown = at_shown.to_path_buf();
        for c in rel.components() {
            let next = match c {
                Component::RootDir => {
                    shown = PathBuf::from("/");
                    rfs::open("/", dir_flags(), Mode::empty())
                }
                Component::CurDir | Component::Prefix(_) => continue,
                Component::ParentDir => {
                    shown.push("..");
                    rfs::openat(&cur, "..", dir_flags(), Mode::empty())
                }
                Component::Normal(n) => {
                    shown.push(n);
                    match rfs::openat(&cur, n, dir_flags() | OFlags::NOFOLLOW, Mode::empty()) {
                        // O_PATH|O_NOFOLLOW opens a link itself, then O_DIRECTORY fails.
                        Err(e @ (rustix::io::Errno::NOTDIR | rustix::io::Errno::LOOP)) => {
                            match rfs::statat(&cur, n, AtFlags::SYMLINK_NOFOLLOW) {
                                Ok(st)
                                    if FileType::from_raw_mode(st.st_mode) == FileType::Symlink =>
                                {
                                    let parent =
                                        shown.parent().unwrap_or(Path::new("")).to_path_buf();
                                    let target = self.follow(&cur, n, &parent, &shown)?;
                                    let base = if target.is_absolute() {
                                        PathBuf::new()
                                    } else {
                                        parent
                                    };
                                    let (fd, s) = self.dir(&cur, &target, &base, link)?;
                                    shown = s;
                                    Ok(fd)
                                }
                                _ => Err(e),
                            }
                        }
                        r => r,
                    }
                }
            };
            cur = next.map_err(|e| self.dir_error(&shown, e, link))?;
        }
        if shown.as_os_str().is_empty() {
            shown = PathBuf::from(".");
        }
        Ok((cur, shown))
    }

    /// What went wrong opening the directory `shown`.
    fn dir_error(&self, shown: &Path, e: rustix::io::Errno, link: Option<&Path>) -> DestError {
        if let (rustix::io::Errno::NOENT, Some(target)) = (e, link) {
            return DestError::Dangling {
                path: self.shown(),
                target: target.display().to_string(),
            };
        }
        DestError::Directory {
            path: self.shown(),
            dir: shown.display().to_string(),
            problem: match e {
                rustix::io::Errno::NOENT => "does not exist".into(),
                rustix::io::Errno::NOTDIR => "is not a directory".into(),
                e => format!("cannot be opened ({})", std::io::Error::from(e)),
            },
        }
    }

    /// The target of the link `name` in `dir` (at `shown`, in `dir_shown`), when the
    /// link is trusted. The link is opened first and its owner read from that very
    /// link, so it cannot be swapped between the check and the read.
    fn follow(
        &mut self,
        dir: &OwnedFd,
        name: &OsStr,
        dir_shown: &Path,
        shown: &Path,
    ) -> Result<PathBuf, DestError> {
        self.links += 1;
        if self.links > MAX_LINKS {
            return Err(errno(self.path)(rustix::io::Errno::LOOP));
        }
        let fd = rfs::openat(
            dir,
            name,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(errno(self.path))?;
        let st = rfs::fstat(&fd).map_err(errno(self.path))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::Symlink {
            // Replaced since it was looked at: someone is racing us.
            return Err(DestError::Changed {
                path: self.shown(),
                kind: super::type_name_of(FileType::from_raw_mode(st.st_mode)),
            });
        }
        if !trusted(st.st_uid) {
            return Err(DestError::ForeignLink {
                path: self.shown(),
                link: shown.display().to_string(),
                owner: st.st_uid,
                dir: dir_shown.display().to_string(),
            });
        }
        let target = rfs::readlinkat(fd.as_fd(), "", Vec::new()).map_err(errno(self.path))?;
        Ok(PathBuf::from(OsStr::from_bytes(target.as_bytes())))
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{PermissionsExt as _, lchown, symlink};

    use super::{super::Dest, *};

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rtm-resolve-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// Gives `p` (a link) to user nobody; false (said) when this test cannot.
    fn give_to_nobody(p: &Path) -> bool {
        match lchown(p, Some(65534), Some(65534)) {
            Ok(()) => true,
            Err(e) => {
                eprintln!("NOT RUN: cannot give {} to another user: {e}", p.display());
                false
            }
        }
    }

    fn write(path: &Path, text: &str) -> Result<(), DestError> {
        Dest::check(path)?.write(&mut |w| w.write_all(text.as_bytes()))
    }

    #[test]
    fn trusted_links_in_the_path_are_followed_like_the_kernel_does() {
        let d = scratch("trusted");
        std::fs::create_dir_all(d.join("real/sub")).unwrap();
        symlink(d.join("real"), d.join("abs")).unwrap();
        symlink("real/sub", d.join("rel")).unwrap();
        symlink("../sub", d.join("real/sub/up")).unwrap();
        symlink("rel", d.join("chain")).unwrap();
        for (given, lands) in [
            ("abs/a.json", "real/a.json"),
            ("rel/b.json", "real/sub/b.json"),
            ("chain/up/c.json", "real/sub/c.json"),
            ("abs/sub/../d.json", "real/d.json"),
        ] {
            write(&d.join(given), given).unwrap();
            assert_eq!(std::fs::read_to_string(d.join(lands)).unwrap(), given);
        }
        // A relative path from the working directory.
        let rel = d.strip_prefix("/").unwrap();
        let up = "../".repeat(std::env::current_dir().unwrap().components().count() - 1);
        write(&Path::new(&up).join(rel).join("rel/e.json"), "e").unwrap();
        assert_eq!(
            std::fs::read_to_string(d.join("real/sub/e.json")).unwrap(),
            "e"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_link_another_user_owns_anywhere_in_the_path_is_refused() {
        let d = scratch("foreign");
        let secret = d.join("secret");
        std::fs::create_dir(&secret).unwrap();
        std::fs::write(secret.join("victim.json"), "kept").unwrap();
        let public = d.join("pub");
        std::fs::create_dir(&public).unwrap();
        std::fs::set_permissions(&public, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let planted = public.join("outdir");
        symlink(&secret, &planted).unwrap();
        if !give_to_nobody(&planted) {
            return;
        }
        // A trusted link to the planted one does not launder it.
        symlink(&public, d.join("mine")).unwrap();
        for p in [
            planted.join("victim.json"),
            d.join("mine/outdir/victim.json"),
            planted.join("new/../victim.json"),
        ] {
            match Dest::check(&p) {
                Err(DestError::ForeignLink { owner, link, .. }) => {
                    assert_eq!(owner, 65534);
                    assert!(link.ends_with("outdir"), "{link}");
                }
                r => panic!("{}: {r:?}", p.display()),
            }
        }
        let e = Dest::check(&planted.join("victim.json"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a symbolic link owned by user 65534"), "{e}");
        assert_eq!(
            std::fs::read_to_string(secret.join("victim.json")).unwrap(),
            "kept"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn another_users_fifo_is_refused_and_devices_under_dev_are_not() {
        let d = scratch("fifo-owner");
        let f = d.join("fifo");
        let c = std::ffi::CString::new(f.to_str().unwrap()).unwrap();
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
        if !give_to_nobody(&f) {
            return;
        }
        let e = Dest::check(&f).unwrap_err();
        assert!(
            matches!(
                e,
                DestError::ForeignFile {
                    owner: 65534,
                    kind: "a FIFO",
                    ..
                }
            ),
            "{e:?}"
        );
        // The same through a trusted link.
        symlink(&f, d.join("link")).unwrap();
        assert!(matches!(
            Dest::check(&d.join("link")),
            Err(DestError::ForeignFile { .. })
        ));
        // A terminal or /dev/null is written whoever owns it.
        let dev = rfs::stat("/dev/null").unwrap();
        assert!(super::super::under_dev(&dev));
        let ours = rfs::stat(&f).unwrap();
        assert!(!super::super::under_dev(&ours));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_link_loop_is_an_error_not_a_hang() {
        let d = scratch("loop");
        symlink("b", d.join("a")).unwrap();
        symlink("a", d.join("b")).unwrap();
        for p in [d.join("a/x.json"), d.join("a")] {
            let e = Dest::check(&p).unwrap_err();
            assert!(e.to_string().contains("symbolic links"), "{e}");
        }
        std::fs::remove_dir_all(&d).unwrap();
    }
}

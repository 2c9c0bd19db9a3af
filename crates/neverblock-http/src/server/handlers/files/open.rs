//! Opening a file beneath the root without blocking the loop, and without leaving the root.
//!
//! `openat2(2)` with `RESOLVE_BENEATH` has the kernel refuse any path, symbolic links included,
//! that would resolve outside the root directory (and `/proc` magic links). It is tried first
//! with `RESOLVE_CACHED`, which succeeds only when every component is in the kernel's lookup
//! caches and so never waits for a disk; when it would have to, the open moves to the blocking
//! pool. Files open with `O_NONBLOCK`, so a FIFO in the tree cannot hang an open. A kernel without
//! `openat2` (before 5.6) gets the same check by hand on the blocking pool: the canonical path
//! must lie under the canonical root.

use std::fs::File;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// The root directory, open, and its canonical path.
#[derive(Debug)]
pub(super) struct Root {
    dir: File,
    path: PathBuf,
    id: u64,
}

/// The number of the next root opened.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Root {
    /// Opens `path`, which must be a directory.
    pub(super) fn open(path: &Path) -> io::Result<Root> {
        let path = path.canonicalize()?;
        let dir = std::fs::OpenOptions::new().read(true).custom_flags(OFlags::DIRECTORY.bits() as i32).open(&path)?;
        Ok(Root { dir, path, id: NEXT_ID.fetch_add(1, Ordering::Relaxed) })
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// This root's number, unique in the process: what the loops' caches know it by.
    pub(super) fn id(&self) -> u64 {
        self.id
    }
}

const FLAGS: OFlags = OFlags::RDONLY.union(OFlags::CLOEXEC).union(OFlags::NONBLOCK).union(OFlags::NOCTTY);
const BENEATH: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_MAGICLINKS);

/// Opens `relative` beneath `root`.
///
/// # Errors
///
/// `NotFound` for what is not there; `EXDEV` (a raw OS error) for a path that leads outside the
/// root; the open's other errors (`EMFILE`, permissions …).
pub(super) fn open(root: &Arc<Root>, relative: &Path) -> io::Result<File> {
    let relative = if relative.as_os_str().is_empty() { Path::new(".") } else { relative };
    match rustix::fs::openat2(&root.dir, relative, FLAGS, Mode::empty(), BENEATH | ResolveFlags::CACHED) {
        Ok(fd) => Ok(File::from(fd)),
        Err(Errno::AGAIN) => {
            let (root, relative) = (root.clone(), relative.to_path_buf());
            neverblock::spawn_blocking(move || {
                rustix::fs::openat2(&root.dir, &relative, FLAGS, Mode::empty(), BENEATH)
                    .map(File::from)
                    .map_err(Into::into)
            })
        }
        Err(Errno::NOSYS) => {
            let (root, relative) = (root.clone(), relative.to_path_buf());
            neverblock::spawn_blocking(move || open_checked(&root, &relative))
        }
        Err(e) => Err(e.into()),
    }
}

/// Opens `relative` under `root` where `openat2` is missing: refuses (`EXDEV`) a path whose
/// canonical form is not under the root's.
fn open_checked(root: &Root, relative: &Path) -> io::Result<File> {
    let path = root.path.join(relative).canonicalize()?;
    if !path.starts_with(&root.path) {
        return Err(Errno::XDEV.into());
    }
    std::fs::OpenOptions::new().read(true).custom_flags((OFlags::NONBLOCK | OFlags::NOCTTY).bits() as i32).open(path)
}

/// Whether `e` is the refusal of a path that leads outside the root.
pub(super) fn is_escape(e: &io::Error) -> bool {
    e.raw_os_error() == Some(Errno::XDEV.raw_os_error())
}

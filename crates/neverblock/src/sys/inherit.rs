//! UNSAFE (descriptor numbers claimed; `Command::pre_exec`): descriptors across `exec`. A process
//! handed descriptors 3, 4, … claims them as its own, once; a process starting another puts the
//! descriptors it hands over at 3, 4, … in the child only. std has no safe call for either: an
//! inherited descriptor is known by its number alone, and std places none but 0, 1 and 2 in a child.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

/// The first descriptor handed over: after standard input, output and error (systemd's
/// `SD_LISTEN_FDS_START`).
pub(crate) const FIRST: RawFd = 3;

/// Set once the handed descriptors have been claimed: they have one owner in the process.
static CLAIMED: AtomicBool = AtomicBool::new(false);

/// Whether `fd` is an open descriptor of this process.
fn is_open(fd: RawFd) -> bool {
    // SAFETY: `F_GETFD` reads the descriptor's flags and changes nothing; on a number that is not
    // open it fails with `EBADF`. No memory is passed.
    unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
}

/// Claims descriptors `FIRST .. FIRST + count` as owned, once per process, and marks them
/// close-on-exec (they go to no later child but by [`place_in_child`]).
///
/// The caller has checked that they were handed to this process (`LISTEN_PID` names it, or the
/// variable that stands for it when the parent could not know the pid).
///
/// # Errors
///
/// `AlreadyExists` when they were claimed before; `NotFound` naming the first number in the range
/// that is not open (the variables promised more than was handed over).
pub(crate) fn claim(count: usize) -> io::Result<Vec<OwnedFd>> {
    let last = RawFd::try_from(count)
        .ok()
        .and_then(|count| FIRST.checked_add(count))
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("{count} descriptors cannot be")))?;
    let numbers = FIRST..last;
    if let Some(missing) = numbers.clone().find(|&fd| !is_open(fd)) {
        let why = format!("descriptor {missing} was to be handed to this process but is not open");
        return Err(io::Error::new(io::ErrorKind::NotFound, why));
    }
    if CLAIMED.swap(true, Ordering::SeqCst) {
        let why = "the descriptors handed to this process were taken before";
        return Err(io::Error::new(io::ErrorKind::AlreadyExists, why));
    }
    let fds: Vec<OwnedFd> = numbers
        // SAFETY: each number is open (checked above) and was handed to this process for its use
        // by whoever started it (the caller checked the variables name this process); `CLAIMED`
        // lets this run once, so no other `OwnedFd` of this crate closes or reuses them.
        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) })
        .collect();
    for fd in &fds {
        rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::CLOEXEC)?;
    }
    Ok(fds)
}

/// Has the child that `command` starts find `fds` at `FIRST`, `FIRST + 1`, … (in this order),
/// open across its `exec`; in this process they stay close-on-exec, so no other child gets them.
/// The command keeps them until it is dropped.
///
/// # Errors
///
/// Duplicating a descriptor failed (out of descriptors).
pub(crate) fn place_in_child(command: &mut Command, fds: Vec<OwnedFd>) -> io::Result<()> {
    // Every source above every target, so that no `dup2` replaces a source not yet copied, and none
    // is its own target (a `dup2` onto itself would leave it close-on-exec).
    let floor = FIRST + RawFd::try_from(fds.len()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let sources = fds
        .into_iter()
        .map(|fd| if fd.as_raw_fd() >= floor { Ok(fd) } else { Ok(rustix::io::fcntl_dupfd_cloexec(&fd, floor)?) })
        .collect::<io::Result<Vec<OwnedFd>>>()?;
    let place = move || {
        for (target, source) in (FIRST..).zip(&sources) {
            // SAFETY: `dup2` only makes `target` another descriptor of `source`, which `sources`
            // (moved into this closure, alive as long as the command) keeps open; no memory is
            // passed.
            if unsafe { libc::dup2(source.as_raw_fd(), target) } < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    };
    // SAFETY: the closure runs in the forked child before `exec`, where only async-signal-safe
    // calls may be made: it calls `dup2` alone, reads `sources` (made before the fork) and neither
    // allocates nor takes a lock. `dup2` leaves close-on-exec clear on each copy, so the child
    // keeps them across `exec`; this process's descriptors keep the flag.
    unsafe { command.pre_exec(place) };
    Ok(())
}

//! Sockets handed over at `exec`, in systemd's socket-activation layout, both ways: taken by a
//! process that was handed them, and passed by a process that starts its replacement (the
//! layout and the variables: [`ListenFds`]).

use std::fmt;
use std::io;
use std::os::fd::{OwnedFd, RawFd};
use std::process::Command;

use crate::sys::inherit;

/// The variable that names, in place of `LISTEN_PID`, the parent of the process the descriptors
/// are for: set by [`ListenFds::pass`].
pub const PARENT_PID_VAR: &str = "NEVERBLOCK_LISTEN_PARENT_PID";

/// The name of a descriptor without one (systemd's).
const UNNAMED: &str = "unknown";

/// The descriptors handed to this process at `exec`, each taken out at most once: by its number
/// ([`take_fd`](ListenFds::take_fd), what systemd users know) or by its name
/// ([`take_named`](ListenFds::take_named)).
///
/// The layout is systemd's (`sd_listen_fds(3)`): `LISTEN_FDS` descriptors from fd 3 on, named in
/// order by `LISTEN_FDNAMES` (colon-separated), for the process whose pid `LISTEN_PID` is. A
/// process handing its sockets to a child ([`ListenFds::pass`]) cannot know the child's pid
/// before the child runs, so it sets [`PARENT_PID_VAR`] to its own pid instead, and the child
/// takes the descriptors when that is its parent's pid. Either way, descriptors meant for another
/// process (variables inherited by a grandchild) are left alone.
///
/// # Examples
///
/// ```
/// use std::net::TcpListener;
/// use neverblock::net::ListenFds;
///
/// let mut handed = ListenFds::take().unwrap();
/// let listener = match handed.take_fd(3) {
///     Some(fd) => TcpListener::from(fd), // started by systemd's socket activation
///     None => TcpListener::bind("127.0.0.1:0").unwrap(),
/// };
/// # drop(listener);
/// ```
///
/// [`ListenFds::default()`] holds none.
#[derive(Default)]
pub struct ListenFds {
    /// Each descriptor's number, its name, and the descriptor until it is taken.
    fds: Vec<(RawFd, String, Option<OwnedFd>)>,
    /// Why the variables found were not for this process.
    ignored: Option<String>,
}

impl fmt::Debug for ListenFds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fds: Vec<_> = self.fds.iter().map(|(fd, name, taken)| (fd, name, taken.is_none())).collect();
        f.debug_struct("ListenFds").field("fds (number, name, taken)", &fds).field("ignored", &self.ignored).finish()
    }
}

/// What the variables say was handed to whom.
#[derive(Debug, PartialEq, Eq)]
enum Handed {
    /// No `LISTEN_FDS`.
    Nothing,
    /// Descriptors meant for another process, and why this one is not it.
    Elsewhere(String),
    /// This many descriptors, named so, for this process.
    Here(Vec<String>),
}

impl ListenFds {
    /// Takes the descriptors handed to this process, once per process: none when no
    /// `LISTEN_FDS` is set or the variables name another process
    /// ([`ignored`](ListenFds::ignored) says why). Call it early, before the process opens
    /// descriptors of its own. Taken descriptors are close-on-exec.
    ///
    /// # Errors
    ///
    /// `InvalidData` for a variable that is not a number; `NotFound` when a descriptor the
    /// variables promise is not open; `AlreadyExists` when they were taken before.
    ///
    /// # Examples
    ///
    /// ```
    /// let handed = neverblock::net::ListenFds::take().unwrap();
    /// println!("{} sockets handed to this process", handed.len());
    /// ```
    pub fn take() -> io::Result<ListenFds> {
        let pid = std::process::id();
        let parent = rustix::process::getppid().map(|pid| pid.as_raw_pid().unsigned_abs());
        match handed(|name| std::env::var(name).ok(), pid, parent)? {
            Handed::Nothing => Ok(ListenFds { fds: Vec::new(), ignored: None }),
            Handed::Elsewhere(why) => Ok(ListenFds { fds: Vec::new(), ignored: Some(why) }),
            Handed::Here(names) => {
                let fds = inherit::claim(names.len())?;
                let numbers = inherit::FIRST..;
                let fds = numbers.zip(names).zip(fds).map(|((number, name), fd)| (number, name, Some(fd))).collect();
                Ok(ListenFds { fds, ignored: None })
            }
        }
    }

    /// How many descriptors were handed to this process, taken out or not.
    ///
    /// # Examples
    ///
    /// ```
    /// let handed = neverblock::net::ListenFds::take().unwrap();
    /// assert_eq!(handed.len() == 0, handed.is_empty());
    /// ```
    pub fn len(&self) -> usize {
        self.fds.len()
    }

    /// Whether none were handed to this process.
    ///
    /// # Examples
    ///
    /// ```
    /// let handed = neverblock::net::ListenFds::take().unwrap();
    /// if handed.is_empty() {
    ///     println!("not socket-activated");
    /// }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.fds.is_empty()
    }

    /// Why descriptors announced by `LISTEN_FDS` were left alone: they were for another process.
    ///
    /// # Examples
    ///
    /// ```
    /// let handed = neverblock::net::ListenFds::take().unwrap();
    /// if let Some(why) = handed.ignored() {
    ///     eprintln!("LISTEN_FDS ignored: {why}");
    /// }
    /// ```
    pub fn ignored(&self) -> Option<&str> {
        self.ignored.as_deref()
    }

    /// Takes out descriptor `fd` (3 is the first handed over), if it was handed over and is not
    /// taken yet.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut handed = neverblock::net::ListenFds::take().unwrap();
    /// if let Some(fd) = handed.take_fd(3) {
    ///     let listener = std::net::TcpListener::from(fd);
    /// #   drop(listener);
    /// }
    /// ```
    pub fn take_fd(&mut self, fd: RawFd) -> Option<OwnedFd> {
        self.fds.iter_mut().find(|(number, _, _)| *number == fd).and_then(|(_, _, owned)| owned.take())
    }

    /// Takes out every descriptor named `name` (in `LISTEN_FDNAMES`) not taken yet, in order.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut handed = neverblock::net::ListenFds::take().unwrap();
    /// let web: Vec<std::net::TcpListener> = handed.take_named("web").into_iter().map(Into::into).collect();
    /// # drop(web);
    /// ```
    pub fn take_named(&mut self, name: &str) -> Vec<OwnedFd> {
        self.fds.iter_mut().filter(|(_, n, _)| n == name).filter_map(|(_, _, owned)| owned.take()).collect()
    }

    /// The number and name of each descriptor not taken out yet.
    ///
    /// # Examples
    ///
    /// ```
    /// let handed = neverblock::net::ListenFds::take().unwrap();
    /// for (fd, name) in handed.remaining() {
    ///     eprintln!("descriptor {fd} ({name}) is not used");
    /// }
    /// ```
    pub fn remaining(&self) -> impl Iterator<Item = (RawFd, &str)> + '_ {
        self.fds.iter().filter(|(_, _, owned)| owned.is_some()).map(|(fd, name, _)| (*fd, name.as_str()))
    }

    /// Hands `fds` to the process `command` starts, in this layout: at 3, 4, … in order, with
    /// `LISTEN_FDS`, `LISTEN_FDNAMES` and [`PARENT_PID_VAR`] set (and `LISTEN_PID` removed), so
    /// that its [`ListenFds::take`] finds them. They stay close-on-exec here: no other child gets
    /// them. The command holds them until it is dropped.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a name that is empty or has a `:`; a failed duplication (out of
    /// descriptors).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::process::Command;
    /// use neverblock::net::ListenFds;
    ///
    /// let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// let mut command = Command::new("sh");
    /// command.args(["-c", r#"test "$LISTEN_FDS" = 1 && test "$LISTEN_FDNAMES" = web && test -S /dev/fd/3"#]);
    /// ListenFds::pass(&mut command, vec![("web".to_owned(), listener.into())]).unwrap();
    /// assert!(command.status().unwrap().success());
    /// ```
    pub fn pass(command: &mut Command, fds: Vec<(String, OwnedFd)>) -> io::Result<()> {
        if let Some((name, _)) = fds.iter().find(|(name, _)| name.is_empty() || name.contains(':')) {
            let why = format!("a descriptor's name may be neither empty nor hold a `:`: {name:?}");
            return Err(io::Error::new(io::ErrorKind::InvalidInput, why));
        }
        let names: Vec<&str> = fds.iter().map(|(name, _)| name.as_str()).collect();
        command
            .env("LISTEN_FDS", fds.len().to_string())
            .env("LISTEN_FDNAMES", names.join(":"))
            .env(PARENT_PID_VAR, std::process::id().to_string())
            .env_remove("LISTEN_PID");
        inherit::place_in_child(command, fds.into_iter().map(|(_, fd)| fd).collect())
    }
}

/// What the variables (read through `var`) say was handed to whom, for the process `pid` whose
/// parent is `parent`.
fn handed(var: impl Fn(&str) -> Option<String>, pid: u32, parent: Option<u32>) -> io::Result<Handed> {
    let Some(count) = var("LISTEN_FDS") else { return Ok(Handed::Nothing) };
    let number = |name: &str, value: &str| {
        value
            .trim()
            .parse::<u32>()
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, format!("{name} is not a number: {value:?}")))
    };
    let count = number("LISTEN_FDS", &count)?;
    match (var("LISTEN_PID"), var(PARENT_PID_VAR)) {
        (Some(listen_pid), _) => {
            let listen_pid = number("LISTEN_PID", &listen_pid)?;
            if listen_pid != pid {
                return Ok(Handed::Elsewhere(format!("LISTEN_PID is {listen_pid}, not this process's {pid}")));
            }
        }
        (None, Some(parent_pid)) => {
            let parent_pid = number(PARENT_PID_VAR, &parent_pid)?;
            if Some(parent_pid) != parent {
                let parent = parent.map_or("none".to_owned(), |p| p.to_string());
                let why = format!("{PARENT_PID_VAR} is {parent_pid}, not this process's parent ({parent})");
                return Ok(Handed::Elsewhere(why));
            }
        }
        (None, None) => return Ok(Handed::Elsewhere("LISTEN_FDS is set without LISTEN_PID".to_owned())),
    }
    let count = count as usize;
    let names: Vec<String> = match var("LISTEN_FDNAMES") {
        Some(names) if names.split(':').count() == count => names.split(':').map(str::to_owned).collect(),
        _ => vec![UNNAMED.to_owned(); count],
    };
    Ok(Handed::Here(names))
}

#[cfg(test)]
mod tests;

//! SIGUSR2: replace this process with a new one started from the program's file on disk (so an
//! upgrade is: replace the file, send SIGUSR2), with the same arguments, handing it the listening
//! sockets; once it serves, this one stops accepting and finishes its requests (the graceful
//! shutdown), while the new one accepts on the very same sockets: no connection is refused or
//! lost in between. If the new process cannot start, exits, or does not serve in time, it is
//! killed and this one goes on serving, logging why.
//!
//! The sockets go in systemd's layout ([`ListenFds::pass`]: fd 3 on, `LISTEN_FDS`,
//! `LISTEN_FDNAMES` naming each by its option and place, `listen.0`), with one more descriptor,
//! [`READY_NAME`], the write end of a pipe: the new process writes `ready` into it once every loop
//! accepts, and its end of file (the process exited, or closed it unwritten) is a failure.
//!
//! The program is found at start from the name it was started by (`argv[0]`), made absolute
//! without resolving symbolic links (searched in `PATH` when it has no `/`, as the shell found
//! it): `/proc/self/exe` (`std::env::current_exe`) names the file that was loaded, which after
//! the file is replaced is `… (deleted)`, and through a symbolic link it names the link's old
//! target, where an upgrade that points the link at a new release must start the new one.

use std::ffi::OsString;
use std::io::{PipeReader, Read};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;
use neverblock::net::ListenFds;
use neverblock_http::server::ServerHandle;

/// The name under which the readiness pipe is handed over.
pub(crate) const READY_NAME: &str = "neverblock-ready";

/// What the new process writes once it serves.
const READY: &[u8] = b"ready\n";

/// How to start this process's replacement.
#[derive(Debug)]
pub(crate) struct Upgrade {
    /// The program's file, as found at start.
    pub(crate) program: PathBuf,
    /// The arguments it was started with (after the program's name).
    pub(crate) args: Vec<OsString>,
    /// The name each of the server's listeners is handed over under, in the server's order.
    pub(crate) names: Vec<String>,
    /// How long the new process may take to serve.
    pub(crate) timeout: Duration,
}

impl Upgrade {
    /// How to start a process like this one: its program found now (see the module's docs).
    pub(crate) fn of_this_process(names: Vec<String>, timeout: Duration) -> Upgrade {
        let mut argv = std::env::args_os();
        let program = argv.next().and_then(|name| started_from(&name)).or_else(|| std::env::current_exe().ok());
        Upgrade { program: program.unwrap_or_default(), args: argv.collect(), names, timeout }
    }

    /// On each SIGUSR2, from a thread of its own: starts the replacement and, once it serves,
    /// shuts `server` down gracefully; else logs why and goes on.
    pub(crate) fn on_sigusr2(self, server: ServerHandle) {
        let Ok(mut signals) = signal_hook::iterator::Signals::new([signal_hook::consts::SIGUSR2]) else {
            log::warn!("SIGUSR2 cannot be watched; no upgrades");
            return;
        };
        let watcher = std::thread::Builder::new().name("sigusr2".into()).spawn(move || {
            for _ in signals.forever() {
                log::warn!("SIGUSR2: starting {} to take over", self.program.display());
                match self.replace(&server) {
                    Ok(pid) => {
                        log::warn!(
                            "SIGUSR2: process {pid} serves now; this one stops accepting and finishes its requests"
                        );
                        server.shutdown();
                    }
                    Err(e) => log::error!("SIGUSR2: no upgrade, this process goes on serving: {e:#}"),
                }
            }
        });
        if let Err(e) = watcher {
            log::warn!("no thread to watch for SIGUSR2 ({e}); no upgrades");
        }
    }

    /// Starts the replacement with the server's sockets and waits until it serves; returns its pid.
    fn replace(&self, server: &ServerHandle) -> anyhow::Result<u32> {
        let listening = server.sockets().context("duplicate the listening sockets")?;
        anyhow::ensure!(!listening.is_empty(), "the server is not serving (not yet, or shutting down)");
        let mut fds: Vec<(String, OwnedFd)> = Vec::new();
        for (listener, name) in listening.into_iter().zip(&self.names) {
            fds.extend(listener.sockets.into_iter().map(|socket| (name.clone(), socket.into())));
        }
        let (reader, writer) = std::io::pipe().context("make the readiness pipe")?;
        fds.push((READY_NAME.to_owned(), writer.into()));
        let mut command = Command::new(&self.program);
        command.args(&self.args);
        ListenFds::pass(&mut command, fds).context("hand the sockets over")?;
        let mut child = command.spawn().with_context(|| format!("start {}", self.program.display()))?;
        // The command holds this process's copies of what it handed over, the pipe's write end
        // among them: the pipe ends when the new process closes its own.
        drop(command);
        match wait_ready(reader, self.timeout) {
            Ok(()) => Ok(child.id()),
            Err(why) => {
                let _ = child.kill();
                let ended = child.wait().map_or_else(|e| format!("not waited for: {e}"), |status| status.to_string());
                anyhow::bail!("process {} {why}; it was stopped ({ended})", child.id())
            }
        }
    }
}

/// Waits up to `timeout` for the new process to write [`READY`] into its pipe; else why not.
fn wait_ready(mut reader: PipeReader, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let mut said = Vec::new();
    while !said.ends_with(b"\n") {
        let left = deadline.saturating_duration_since(Instant::now());
        let readable = rustix::event::PollFd::new(&reader, rustix::event::PollFlags::IN);
        let wait = rustix::event::Timespec::try_from(left).unwrap_or(rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 });
        match rustix::event::poll(&mut [readable], Some(&wait)) {
            Ok(0) => return Err(format!("did not serve within {}", humantime::format_duration(timeout))),
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(format!("could not be waited for: {e}")),
        }
        let mut bytes = [0; 16];
        match reader.read(&mut bytes) {
            Ok(0) => return Err("ended before it served".to_owned()),
            Ok(n) => said.extend_from_slice(&bytes[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("could not be heard from: {e}")),
        }
    }
    match said.as_slice() == READY {
        true => Ok(()),
        false => Err(format!("said {:?} instead of serving", String::from_utf8_lossy(&said))),
    }
}

/// The program's file named `name` (`argv[0]`): absolute, with symbolic links kept; a name without
/// `/` is looked up in `PATH`, as the shell did. `None` when it names no file.
fn started_from(name: &std::ffi::OsStr) -> Option<PathBuf> {
    let path = Path::new(name);
    let found = match name.as_bytes().contains(&b'/') {
        true => std::path::absolute(path).ok(),
        false => std::env::split_paths(&std::env::var_os("PATH")?).map(|dir| dir.join(path)).find(|p| p.is_file()),
    };
    found.filter(|path| path.is_file())
}

/// In the new process: tells the one it replaces that it serves.
pub(crate) fn tell_ready(pipe: OwnedFd) {
    use std::io::Write;
    if let Err(e) = std::io::PipeWriter::from(pipe).write_all(READY) {
        log::warn!("the process this one replaces could not be told it serves: {e}");
    }
}

//! Ctrl-C during a load run: the first SIGINT stops every thread's fibers where they are, so the run
//! returns what it has counted; a second ends the process at once (exit 130).
//!
//! Each loop waits for the signal on a socket of its own (signal-hook's self-pipe, one registration
//! per loop), in a fiber that cancels that loop's workers: a request in flight is cut short at its
//! park, whatever it waits on.

use std::io::{self, Read};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use signal_hook::consts::SIGINT;
use signal_hook::SigId;

/// SIGINT, watched for one run.
#[derive(Debug)]
pub(crate) struct Interrupt {
    /// Set by the first SIGINT.
    happened: Arc<AtomicBool>,
    ids: Vec<SigId>,
}

impl Interrupt {
    /// Takes over SIGINT until dropped: the first sets the flag (and wakes each loop's watcher), a
    /// second exits with 130.
    ///
    /// # Errors
    ///
    /// If signal-hook cannot install its handler.
    pub(crate) fn install() -> io::Result<Interrupt> {
        let happened = Arc::new(AtomicBool::new(false));
        // Actions run in the order registered: the exit checks the flag before the first sets it.
        let ids = vec![
            signal_hook::flag::register_conditional_shutdown(SIGINT, 130, happened.clone())?,
            signal_hook::flag::register(SIGINT, happened.clone())?,
        ];
        Ok(Interrupt { happened, ids })
    }

    /// Whether SIGINT has come.
    pub(crate) fn happened(&self) -> bool {
        self.happened.load(Ordering::SeqCst)
    }

    /// In a fiber: returns once SIGINT has come (at once if it already has), parking meanwhile.
    ///
    /// # Errors
    ///
    /// If the socket the signal arrives on cannot be made or read.
    pub(crate) fn wait(&self) -> io::Result<()> {
        let (reader, writer) = std::os::unix::net::UnixStream::pair()?;
        let id = Registration(signal_hook::low_level::pipe::register(SIGINT, writer)?);
        let mut reader = neverblock::net::UnixStream::from_std(reader)?;
        // Checked after registering: a signal before it set the flag, one after writes a byte.
        if !self.happened() {
            reader.read_exact(&mut [0u8; 1])?;
        }
        drop(id);
        Ok(())
    }
}

impl Drop for Interrupt {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

/// A signal-hook registration, undone when dropped (also when the waiting fiber is cancelled).
struct Registration(SigId);

impl Drop for Registration {
    fn drop(&mut self) {
        signal_hook::low_level::unregister(self.0);
    }
}

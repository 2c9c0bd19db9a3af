//! How a pool dials the server again after a dial failed: it waits first, twice as long
//! after each failure in a row (from [`FIRST_WAIT`] up to [`LONGEST_WAIT`], each wait
//! shortened by a random part so that many pools do not dial in step), and one dial at a
//! time probes whether the server is back. Meanwhile every checkout that would dial fails
//! at once with the last dial's error, instead of hammering a server that is down (or
//! restarting, or refusing logins) with thousands of dials a second.
//!
//! The first dial that succeeds ends the outage: the pool refills as fibers ask, at once.

use std::cell::RefCell;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::Error;

/// The wait after the first failed dial.
pub(super) const FIRST_WAIT: Duration = Duration::from_millis(25);
/// The longest wait between two dials: how late, at worst, a pool sees the server back.
pub(super) const LONGEST_WAIT: Duration = Duration::from_secs(1);

/// A pool's dials: whether one may go out now.
#[derive(Debug, Default)]
pub(super) struct Redial {
    outage: RefCell<Option<Outage>>,
}

/// Dials failing in a row.
#[derive(Debug)]
struct Outage {
    failures: u32,
    /// No dial before this.
    next: Instant,
    /// A dial is out, probing whether the server is back.
    probing: bool,
    last: Arc<Error>,
}

impl Redial {
    /// Runs `dial` unless the pool is waiting between dials (or another fiber's dial is
    /// already probing the server); notes how it went.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] with the last dial's error, at once, while the pool waits;
    /// else `dial`'s error.
    pub(super) fn dial<T>(&self, dial: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
        self.may_dial()?;
        // However the dial ends (an unwind included), it no longer probes.
        let _probe = Probe(self);
        let dialled = dial();
        match &dialled {
            Ok(_) => *self.outage.borrow_mut() = None,
            Err(e) if !e.says_nothing_of_the_server() => self.failed(e.duplicate()),
            Err(_) => {}
        }
        dialled
    }

    /// Whether a dial may go out now; if so, it is marked as the probe of an outage.
    fn may_dial(&self) -> Result<(), Error> {
        let mut outage = self.outage.borrow_mut();
        let Some(outage) = outage.as_mut() else { return Ok(()) };
        let now = Instant::now();
        if outage.probing || now < outage.next {
            let retry_in = outage.next.saturating_duration_since(now);
            return Err(Error::Unavailable { retry_in, last: outage.last.clone() });
        }
        outage.probing = true;
        Ok(())
    }

    /// A dial failed: the next waits longer.
    fn failed(&self, last: Error) {
        let mut outage = self.outage.borrow_mut();
        let failures = outage.as_ref().map_or(0, |o| o.failures) + 1;
        let wait = FIRST_WAIT.saturating_mul(1 << (failures - 1).min(16)).min(LONGEST_WAIT);
        let next = Instant::now() + jittered(wait);
        *outage = Some(Outage { failures, next, probing: false, last: Arc::new(last) });
        log::debug!("dialling postgres failed ({failures} in a row); the next dial in {wait:?} at most");
    }

    /// A probe ended: the next dial may go out at its time.
    fn end_probe(&self) {
        if let Some(outage) = self.outage.borrow_mut().as_mut() {
            outage.probing = false;
        }
    }
}

/// Ends the probe however the dial ends, an unwind included.
struct Probe<'a>(&'a Redial);

impl Drop for Probe<'_> {
    fn drop(&mut self) {
        self.0.end_probe();
    }
}

/// `wait` less a random part of up to half of it.
fn jittered(wait: Duration) -> Duration {
    let random = RandomState::new().hash_one(Instant::now());
    let fraction = (random % 1024) as u32;
    wait - wait / 2 * fraction / 1024
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused() -> Error {
        Error::Connect {
            target: "127.0.0.1:1".into(),
            source: std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
        }
    }

    #[test]
    fn after_a_failed_dial_the_next_checkouts_fail_at_once_with_its_error() {
        let redial = Redial::default();
        assert!(redial.dial(|| Err::<(), _>(refused())).is_err());
        let mut dialled = false;
        let err = redial
            .dial(|| {
                dialled = true;
                Ok(())
            })
            .unwrap_err();
        assert!(!dialled, "no dial during the wait");
        match err {
            Error::Unavailable { retry_in, last } => {
                assert!(retry_in <= FIRST_WAIT, "{retry_in:?}");
                assert!(matches!(*last, Error::Connect { .. }), "{last}");
            }
            other => panic!("{other}"),
        }
    }

    #[test]
    fn waits_double_up_to_the_cap_and_a_success_ends_the_outage() {
        let redial = Redial::default();
        let mut waits = Vec::new();
        for _ in 0..10 {
            if let Some(outage) = redial.outage.borrow_mut().as_mut() {
                outage.next = Instant::now();
            }
            let before = Instant::now();
            assert!(redial.dial(|| Err::<(), _>(refused())).is_err());
            waits.push(redial.outage.borrow().as_ref().unwrap().next - before);
        }
        assert!(waits[0] <= FIRST_WAIT && waits[0] >= FIRST_WAIT / 2, "{waits:?}");
        assert!(waits[3] >= FIRST_WAIT * 4, "doubling: {waits:?}");
        assert!(waits.iter().all(|w| *w <= LONGEST_WAIT + Duration::from_millis(5)), "capped: {waits:?}");
        redial.outage.borrow_mut().as_mut().unwrap().next = Instant::now();
        assert!(redial.dial(|| Ok(())).is_ok());
        assert!(redial.outage.borrow().is_none(), "the server answered: no wait any more");
        assert!(redial.dial(|| Ok(())).is_ok());
    }

    #[test]
    fn while_one_dial_probes_the_others_do_not_dial() {
        let redial = Redial::default();
        assert!(redial.dial(|| Err::<(), _>(refused())).is_err());
        redial.outage.borrow_mut().as_mut().unwrap().next = Instant::now();
        let nested = redial.dial(|| Ok(redial.dial(|| Ok(())).is_err())).unwrap();
        assert!(nested, "a second dial during the probe fails at once");
    }
}

//! Now, to a loop turn: the time the loop read as its running turn began, or the clock outside a
//! runtime. A wait that parked ends in a later turn, so it counts whole; timeouts of seconds need
//! no finer grain, and code that does not wait reads no clock.

use std::time::Instant;

/// The running turn's start on a loop, else the clock.
pub(crate) fn now() -> Instant {
    neverblock::runtime::turn_start().unwrap_or_else(Instant::now)
}

//! Ruby 3's rules for `resume`, `transfer` and `yield`: pure data and functions.
//!
//! Each rule reads a [`View`] of the fiber involved and answers which
//! [`FiberError`] applies, in MRI 3.1's order of checks (`cont.c`). Nothing here
//! switches or mutates; the switch (`switch.rs`) applies the links once a check has passed.

use super::error::FiberError;

/// What the rules need to know about a fiber at the moment of a call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct View {
    /// Never switched to.
    pub(crate) created: bool,
    /// Finished (returned or panicked).
    pub(crate) terminated: bool,
    /// It is the fiber making the call.
    pub(crate) current: bool,
    /// It was resumed and has not yielded or finished since (it has a `prev`).
    pub(crate) resumed: bool,
    /// It is suspended inside a `resume` of another fiber.
    pub(crate) resuming: bool,
    /// It is suspended inside `yield`.
    pub(crate) yielding: bool,
}

/// `fiber.resume(v)`.
#[inline(always)]
pub(crate) fn check_resume(target: View) -> Result<(), FiberError> {
    if target.terminated {
        Err(FiberError::Terminated)
    } else if target.current {
        Err(FiberError::ResumeCurrent)
    } else if target.resumed {
        Err(FiberError::DoubleResume)
    } else if target.resuming {
        Err(FiberError::ResumeResuming)
    } else if !target.yielding && !target.created {
        Err(FiberError::ResumeTransferring)
    } else {
        Ok(())
    }
}

/// `fiber.transfer(v)`. Transferring to the current fiber passes, and switches nothing.
#[inline(always)]
pub(crate) fn check_transfer(target: View) -> Result<(), FiberError> {
    if target.resuming {
        Err(FiberError::TransferToResuming)
    } else if target.yielding {
        Err(FiberError::TransferToYielding)
    } else if target.terminated {
        Err(FiberError::TransferToTerminated)
    } else {
        Ok(())
    }
}

/// `Fiber.yield(v)` from the fiber `current`.
#[inline(always)]
pub(crate) fn check_yield(current: View) -> Result<(), FiberError> {
    if current.resumed {
        Ok(())
    } else {
        Err(FiberError::YieldNotResumed)
    }
}

#[cfg(test)]
mod tests;

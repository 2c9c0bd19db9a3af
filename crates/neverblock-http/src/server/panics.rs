//! Catching what a handler's code panics with, whichever protocol runs it: the panic stops at the
//! request that raised it, the runtime's own unwinds go on.

use std::any::Any;
use std::panic::{self, AssertUnwindSafe};

/// Runs `f`, catching a panic of the code it calls (a handler's, a hook's, a body reader's): its
/// payload. The runtime's own unwinds (a cancelled task, a dropped fiber) go on, so the fiber
/// still ends.
pub(crate) fn catch<T>(f: impl FnOnce() -> T) -> Result<T, Box<dyn Any + Send>> {
    panic::catch_unwind(AssertUnwindSafe(f)).map_err(|payload| {
        if neverblock::runtime::is_cancellation(&*payload) {
            panic::resume_unwind(payload);
        }
        payload
    })
}

/// The message of a panic raised with `panic!` (a `&str` or `String` payload), or a
/// placeholder for any other payload (`panic_any`).
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(a payload that is not a message)")
}

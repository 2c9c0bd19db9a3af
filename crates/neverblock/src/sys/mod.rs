//! Every system call the runtime makes, and nothing else.
//!
//! This module and `fiber::stack` are the only places allowed `unsafe`. What a
//! backend must provide, so that another OS can be added beside Linux:
//!
//! - [`memory`]: page size, reserving address space without committing memory,
//!   guard pages (kernel guard regions or `mprotect`), the kernel's mapping limit
//!   and the process's current mapping count, available memory.
//! - [`epoll`]: readiness of many fds in one wait, and a waker for other threads.
//! - [`overflow`]: a fault handler that recognises a fault in a fiber stack's guard
//!   page and stops the process with a message that says so.

pub(crate) mod epoll;
pub(crate) mod memory;
pub(crate) mod overflow;

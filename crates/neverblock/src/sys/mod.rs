//! The operating system below the runtime: readiness, memory for stacks, and
//! the fault handler. Sockets and files are std's types, with rustix for the
//! calls std lacks (`sendfile`, `preadv2`).
//!
//! What a backend must provide, so that another OS can be added beside Linux:
//!
//! - [`epoll`]: readiness of many fds in one wait, an eventfd to wake it from
//!   other threads, and `poll(2)` for one fd in blocking mode. All rustix's safe
//!   calls: it forbids `unsafe`.
//! - [`memory`]: reserving address space without committing memory,
//!   guard pages (kernel guard regions or `mprotect`), the kernel's mapping limit
//!   and the process's current mapping count, available memory. `unsafe`: a
//!   mapping is raw memory, whatever crate maps it.
//! - [`overflow`]: a fault handler that recognises a fault in a fiber stack's guard
//!   page and stops the process with a message that says so. `unsafe`, through
//!   `libc`: rustix has no signal handlers.
//! - [`kernel_tls`]: whether the kernel offers TLS on TCP sockets. `unsafe`, through
//!   `libc`: rustix has no `TCP_ULP`.
//! - [`inherit`]: descriptors across `exec`: claiming those handed to this process by number,
//!   and placing those handed to a child at fixed numbers in the child alone (`pre_exec`).
//!   `unsafe`: std has no safe call for either.
//! - [`descriptors`]: the process's descriptor table, grown to its working size before a
//!   runtime's loops start, so that no loop sleeps while the kernel grows it. rustix's safe calls.

pub(crate) mod descriptors;
pub(crate) mod epoll;
pub(crate) mod inherit;
pub(crate) mod kernel_tls;
pub(crate) mod memory;
pub(crate) mod overflow;

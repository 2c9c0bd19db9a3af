//! neverblock: fibers with Ruby's semantics, the base of a never-blocking I/O stack.
//!
//! Code written in plain blocking style runs in fibers: lightweight threads
//! with stacks of their own that switch only when told to. This crate is the
//! runtime: [`fiber`] (Ruby's `resume`, `yield` and `transfer`), a scheduler and
//! event loop per thread ([`runtime`], [`run`], [`spawn`], [`sleep`],
//! [`timeout`]), fiber-aware [`sync`] primitives, and sockets that park the
//! fiber instead of the thread ([`net`], [`io`]); futures run on a fiber too
//! ([`block_on`], [`bridge`]). The HTTP and PostgreSQL
//! crates are built on its public API alone.
//!
//! # Examples
//!
//! A generator, and a symmetric hand-off with `transfer`:
//!
//! ```
//! use neverblock::fiber::{self, Fiber};
//!
//! let fib = Fiber::new(|_: u64| {
//!     let (mut a, mut b) = (0u64, 1u64);
//!     loop {
//!         fiber::yield_now(a).unwrap();
//!         (a, b) = (b, a + b);
//!     }
//! })
//! .unwrap();
//! let first: Vec<u64> = (0..10).map(|_| fib.resume(0).unwrap()).collect();
//! assert_eq!(first, [0, 1, 1, 2, 3, 5, 8, 13, 21, 34]);
//!
//! let root = Fiber::<String>::current();
//! let echo = Fiber::new(move |s: String| root.transfer(s.to_uppercase()).unwrap()).unwrap();
//! assert_eq!(echo.transfer("hi".into()).unwrap(), "HI");
//! ```

#![deny(unsafe_code)]

pub mod bridge;
pub mod fiber;
mod fiber_pool;
mod fifo;
#[cfg(feature = "hooks")]
pub mod hooks;
pub mod io;
pub mod net;
mod poison;
mod reactor;
pub mod runtime;
pub mod sync;
#[allow(unsafe_code)]
mod sys;

pub use bridge::block_on;
pub use fiber_pool::FiberPool;
pub use runtime::{
    current_task_id, current_task_name, run, sleep, sleep_until, spawn, spawn_blocking, spawn_named, timeout,
    try_spawn, yield_now, Elapsed, JoinError, JoinHandle, SpawnError,
};

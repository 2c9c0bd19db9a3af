//! Futures inside fibers: [`block_on`] polls a future on the calling fiber and
//! parks only that fiber while it is pending; [`AsyncIo`] gives this crate's
//! sockets the async I/O traits, so async crates that need no reactor of their
//! own (the `h2` crate, codecs, protocol state machines) run on the fiber's loop.
//!
//! A future's waker may be woken from anywhere: another fiber of the same loop,
//! another loop's thread, or a plain thread (through the loop's remote queue and
//! eventfd). A read or write of an [`AsyncIo`] that would block returns `Pending`
//! with the fd's readiness noted for the `block_on` polling it, which then parks
//! on its waker and those fds at once: no busy polling and no thread of its own.
//!
//! # Examples
//!
//! ```
//! use std::io::Write;
//! use neverblock::bridge::AsyncIo;
//! use neverblock::net::UnixStream;
//!
//! neverblock::run(|| {
//!     let (a, mut b) = UnixStream::pair().unwrap();
//!     let a = AsyncIo::new(a);
//!     neverblock::spawn(move || b.write_all(b"ping").unwrap());
//!     let mut buf = [0; 4];
//!     let n = neverblock::block_on(std::future::poll_fn(|cx| a.poll_read(cx, &mut buf))).unwrap();
//!     assert_eq!(&buf[..n.unwrap()], b"ping");
//! });
//! ```

mod block_on;
mod io;
mod waker;

pub use block_on::block_on;
pub use io::{AsyncIo, Socket};

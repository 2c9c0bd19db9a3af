//! `Pollable`: the sockets of this crate, which a task can be started on when they turn readable
//! ([`TaskBuilder::when_readable`](crate::runtime::TaskBuilder::when_readable)).
#![expect(
    private_interfaces,
    reason = "the sealed trait's method names crate types; outside the crate nobody can name the trait to call it"
)]

use crate::runtime::registration::Interest;

/// A socket of this crate: registered with the loop that first waits on it, once, so the loop
/// can start a task when it turns readable (see
/// [`TaskBuilder::when_readable`](crate::runtime::TaskBuilder::when_readable)).
///
/// Implemented for the streams, [`TcpStream`](super::TcpStream) and
/// [`UnixStream`](super::UnixStream); sealed.
///
/// # Examples
///
/// ```
/// use std::io::{Read, Write};
/// use neverblock::net::UnixStream;
/// use neverblock::runtime::TaskBuilder;
///
/// // A UnixStream is Pollable: the reader starts once the first bytes (or the end) arrive.
/// fn start_reader(socket: UnixStream) -> neverblock::runtime::JoinHandle<Vec<u8>> {
///     TaskBuilder::new().when_readable(&socket, None).spawn(move || {
///         let mut got = Vec::new();
///         (&socket).read_to_end(&mut got).unwrap();
///         got
///     })
/// }
///
/// neverblock::run(|| {
///     let (a, mut b) = UnixStream::pair().unwrap();
///     let reader = start_reader(a);
///     b.write_all(b"late").unwrap();
///     drop(b);
///     assert_eq!(reader.join().unwrap(), b"late");
/// });
/// ```
pub trait Pollable: sealed::Sealed {}

pub(crate) mod sealed {
    use super::Interest;

    /// Keeps [`super::Pollable`] to this crate's sockets, and reaches their registration.
    pub trait Sealed {
        /// The socket's readability as a wait of the running task's loop, registering it there
        /// if it has no home; `None` outside a task, when another live loop is its home, or when
        /// it cannot be registered.
        fn read_interest(&self) -> Option<Interest>;
    }
}

macro_rules! pollable {
    ($($socket:ty),*) => {$(
        impl Pollable for $socket {}

        impl sealed::Sealed for $socket {
            fn read_interest(&self) -> Option<Interest> {
                self.nonblocking().read_interest()
            }
        }
    )*};
}

pollable!(super::TcpStream, super::UnixStream);

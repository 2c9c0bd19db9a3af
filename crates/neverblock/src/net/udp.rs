//! UDP sockets that park the fiber, not the thread.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::addr::{each_addr, ToSocketAddrs};
use super::nonblocking::NonBlocking;

/// A UDP socket, like [`std::net::UdpSocket`]: receives park the calling fiber
/// until a datagram arrives (outside a runtime they block the thread).
///
/// # Examples
///
/// ```
/// use neverblock::net::UdpSocket;
///
/// neverblock::run(|| {
///     let a = UdpSocket::bind("127.0.0.1:0").unwrap();
///     let b = UdpSocket::bind("127.0.0.1:0").unwrap();
///     let to = b.local_addr().unwrap();
///     let receiver = neverblock::spawn(move || {
///         let mut buf = [0; 16];
///         let (n, _) = b.recv_from(&mut buf).unwrap();
///         buf[..n].to_vec()
///     });
///     a.send_to(b"datagram", to).unwrap();
///     assert_eq!(receiver.join().unwrap(), b"datagram");
/// });
/// ```
#[derive(Debug)]
pub struct UdpSocket {
    io: NonBlocking<std::net::UdpSocket>,
}

impl UdpSocket {
    /// Binds to the first address of `addr` that can be bound.
    ///
    /// # Errors
    ///
    /// The resolver's error, or the last address's bind error.
    pub fn bind(addr: impl ToSocketAddrs) -> io::Result<UdpSocket> {
        each_addr(&addr, |a| {
            let socket = Socket::new(Domain::for_address(*a), Type::DGRAM.nonblocking(), Some(Protocol::UDP))?;
            socket.bind(&SockAddr::from(*a))?;
            Ok(UdpSocket { io: NonBlocking::new(socket.into()) })
        })
    }

    /// Sets the default peer for `send` and `recv`, and filters what is received to it.
    ///
    /// # Errors
    ///
    /// The resolver's error, or the system call's.
    pub fn connect(&self, addr: impl ToSocketAddrs) -> io::Result<()> {
        each_addr(&addr, |a| self.io.get_ref().connect(a))
    }

    /// Sends one datagram to `addr`; returns the bytes sent.
    ///
    /// # Errors
    ///
    /// The resolver's error, a write timeout, or the system call's error.
    pub fn send_to(&self, buf: &[u8], addr: impl ToSocketAddrs) -> io::Result<usize> {
        each_addr(&addr, |a| self.io.write_with(|s| s.send_to(buf, a)))
    }

    /// Receives one datagram and its sender.
    ///
    /// # Errors
    ///
    /// A read timeout, or the system call's error.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.io.read_with(|s| s.recv_from(buf))
    }

    /// Sends one datagram to the connected peer.
    ///
    /// # Errors
    ///
    /// Not connected, a write timeout, or the system call's error.
    pub fn send(&self, buf: &[u8]) -> io::Result<usize> {
        self.io.write_with(|s| s.send(buf))
    }

    /// Receives one datagram from the connected peer.
    ///
    /// # Errors
    ///
    /// A read timeout, or the system call's error.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.io.read_with(|s| s.recv(buf))
    }

    /// The bound address.
    ///
    /// # Errors
    ///
    /// The system call's error.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.io.get_ref().local_addr()
    }

    /// The connected peer.
    ///
    /// # Errors
    ///
    /// `NotConnected`, or the system call's error.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.io.get_ref().peer_addr()
    }

    /// Makes each receive that waits longer than `timeout` fail with `TimedOut`.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a zero duration.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.io.set_read_timeout(timeout)
    }

    /// Makes each send that waits longer than `timeout` fail with `TimedOut`.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a zero duration.
    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.io.set_write_timeout(timeout)
    }

    /// Wraps a std socket, switching it to non-blocking mode.
    ///
    /// # Errors
    ///
    /// If the mode cannot be set.
    pub fn from_std(socket: std::net::UdpSocket) -> io::Result<UdpSocket> {
        socket.set_nonblocking(true)?;
        Ok(UdpSocket { io: NonBlocking::new(socket) })
    }

    /// Gives back the std socket, in blocking mode again.
    ///
    /// # Errors
    ///
    /// If the mode cannot be set.
    pub fn into_std(self) -> io::Result<std::net::UdpSocket> {
        let socket = self.io.into_inner();
        socket.set_nonblocking(false)?;
        Ok(socket)
    }
}

impl AsFd for UdpSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.io.get_ref().as_fd()
    }
}

impl AsRawFd for UdpSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.io.get_ref().as_raw_fd()
    }
}

//! Sockets that never block the thread: TCP, UDP and Unix-domain, with the API of
//! their std counterparts.
//!
//! Inside a fiber, an operation that would block parks the fiber on the event
//! loop and the thread runs other fibers; outside a runtime the same calls block
//! the thread, as std's do (blocking mode). The streams implement [`std::io::Read`]
//! and [`std::io::Write`], so `BufReader`, `BufWriter`, TLS libraries and any code
//! generic over them run concurrently unchanged. Host names are resolved on the
//! blocking pool ([`ToSocketAddrs`]); timeouts are timers, never threads.
//!
//! # Examples
//!
//! ```
//! use std::io::{BufRead, BufReader, Write};
//! use neverblock::net::{TcpListener, TcpStream};
//!
//! neverblock::run(|| {
//!     let listener = TcpListener::bind("127.0.0.1:0").unwrap();
//!     let addr = listener.local_addr().unwrap();
//!     neverblock::spawn(move || {
//!         let (conn, _) = listener.accept().unwrap();
//!         let mut line = String::new();
//!         BufReader::new(&conn).read_line(&mut line).unwrap();
//!         (&conn).write_all(line.to_uppercase().as_bytes()).unwrap();
//!     });
//!     let mut conn = TcpStream::connect(addr).unwrap();
//!     conn.write_all(b"shout\n").unwrap();
//!     let mut reply = String::new();
//!     BufReader::new(conn).read_line(&mut reply).unwrap();
//!     assert_eq!(reply, "SHOUT\n");
//! });
//! ```

mod addr;
mod listen_fds;
mod nonblocking;
pub(crate) mod pollable;
mod send_file;
mod serve;
mod tcp;
mod udp;
mod unix;

pub use addr::ToSocketAddrs;
pub use listen_fds::{ListenFds, PARENT_PID_VAR};
pub use pollable::Pollable;

/// How many connections may wait to be accepted; the kernel caps it at `net.core.somaxconn`.
const BACKLOG: i32 = 4096;
pub use serve::serve;
pub use tcp::{KeepAlive, TcpListener, TcpStream};
pub use udp::UdpSocket;
pub use unix::{UnixListener, UnixStream};

/// Whether the kernel offers TLS on TCP sockets (kTLS: `setsockopt(TCP_ULP, "tls")` on a
/// connected socket), which would let a TLS server send files with `sendfile(2)`. Probed on a
/// loopback connection made for the purpose; a server asks once, at start.
///
/// # Errors
///
/// The kernel's refusal: `ENOENT` when it has no `tls` module (`modprobe tls` loads it where the
/// kernel was built with it), or the error making the loopback connection.
///
/// # Examples
///
/// ```
/// match neverblock::net::kernel_tls_support() {
///     Ok(()) => println!("kernel TLS is available"),
///     Err(e) => println!("no kernel TLS: {e}"),
/// }
/// ```
pub fn kernel_tls_support() -> std::io::Result<()> {
    crate::sys::kernel_tls::probe()
}

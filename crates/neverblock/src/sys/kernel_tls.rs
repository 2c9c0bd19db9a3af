//! UNSAFE (one `setsockopt`): whether the kernel offers TLS on TCP sockets (kTLS), which would let
//! a server hand its session keys to the kernel after the handshake and send files with
//! `sendfile(2)` over TLS. rustix has no call for the `TCP_ULP` option.

use std::io;
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;

/// Asks the kernel to make a connected loopback socket a TLS one (`setsockopt(TCP_ULP, "tls")`):
/// `Ok` when it can, else its refusal (`ENOENT`: the kernel has no `tls` module).
pub(crate) fn probe() -> io::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let stream = TcpStream::connect(listener.local_addr()?)?;
    let _accepted = listener.accept()?;
    let name = b"tls";
    // SAFETY: `stream` owns the fd for the whole call; the option value is `name`'s three bytes,
    // valid for the call, and its length is passed with it. The kernel only reads them.
    let set = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_TCP,
            libc::TCP_ULP,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    if set == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

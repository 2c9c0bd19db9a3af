//! An accept loop that survives running out of file descriptors or stacks.

use std::convert::Infallible;
use std::io;
use std::rc::Rc;
use std::time::Duration;

use super::TcpListener;
use super::TcpStream;

/// The first pause after an exhausted accept; it doubles up to [`MAX_BACKOFF`] (Go's net/http rule).
const FIRST_BACKOFF: Duration = Duration::from_millis(5);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Accepts connections forever, running `handler` in a fiber of its own for each.
///
/// What a server must survive is survived and reported through the `log` facade
/// (target `neverblock::net::serve`), once per episode:
/// - out of file descriptors or kernel memory (`EMFILE`, `ENFILE`, `ENOBUFS`,
///   `ENOMEM`): the connection stays in the backlog; the loop pauses 5 ms,
///   doubling to 1 s, and accepts again;
/// - no stack for a new fiber (the memory-map or memory limit): that connection
///   is closed and the loop goes on;
/// - a connection aborted before it was accepted: skipped.
///
/// A handler that panics ends its own fiber only.
///
/// # Errors
///
/// Returns only on an error no retry can mend (the listener itself is broken).
///
/// # Examples
///
/// ```no_run
/// use std::io::Write;
/// use neverblock::net::{serve, TcpListener};
///
/// neverblock::run(|| {
///     let listener = TcpListener::bind("127.0.0.1:8080").unwrap();
///     let err = serve(&listener, |mut conn| {
///         let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
///     });
///     log::error!("server stopped: {err:?}");
/// });
/// ```
pub fn serve(listener: &TcpListener, handler: impl Fn(TcpStream) + 'static) -> io::Result<Infallible> {
    let handler = Rc::new(handler);
    let mut backoff = None::<Duration>;
    let mut failures = 0u64;
    loop {
        match listener.accept() {
            Ok((conn, _)) => {
                if backoff.take().is_some() {
                    log::info!("accepting again after {failures} failed attempts");
                    failures = 0;
                }
                let handler = handler.clone();
                if let Err(e) = crate::try_spawn(move || handler(conn)) {
                    log::warn!("connection closed unserved: {e}");
                }
            }
            Err(e) if is_exhaustion(&e) => {
                failures += 1;
                let pause = backoff.map_or(FIRST_BACKOFF, |b| (b * 2).min(MAX_BACKOFF));
                if backoff.is_none() {
                    log::warn!("accept failed: {e}; retrying every {pause:?} or more until it succeeds");
                }
                backoff = Some(pause);
                crate::sleep(pause);
            }
            Err(e) if is_transient(&e) => {}
            Err(e) => return Err(e),
        }
    }
}

/// Out of a resource that frees up as connections close.
fn is_exhaustion(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM))
}

/// A connection that went away before it could be accepted, or a signal.
fn is_transient(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ECONNABORTED | libc::EPROTO | libc::EPERM | libc::EINTR))
}

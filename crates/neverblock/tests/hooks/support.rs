//! A server on plain threads that answers after a delay, and fibers to time.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// The delay of the slow servers; twenty calls one after another take twenty.
pub(crate) const DELAY: Duration = Duration::from_millis(200);
/// How many fibers wait at once.
pub(crate) const FIBERS: usize = 20;

/// Where fibers that overlap have finished: a few delays, far below `FIBERS` of them.
pub(crate) fn overlapped(elapsed: Duration) -> bool {
    elapsed < 3 * DELAY
}

/// A loopback HTTP/1.1 server on plain threads (so the hooks leave it alone): each
/// connection gets, `delay` after its request head arrived, a 200 with the body `ok`.
pub(crate) fn slow_server(delay: Duration) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            std::thread::spawn(move || answer_after(conn, delay));
        }
    });
    addr
}

fn answer_after(mut conn: TcpStream, delay: Duration) {
    let mut head = Vec::new();
    let mut buf = [0; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    #[allow(clippy::disallowed_methods)] // a plain thread: the slow server itself
    std::thread::sleep(delay);
    let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
}

/// A loopback listener that accepts and keeps its connections, saying nothing.
pub(crate) fn silent_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        for conn in listener.incoming() {
            kept.extend(conn.ok());
        }
    });
    addr
}

/// Runs `FIBERS` copies of `work` on fibers of one loop, with a ticker fiber beside
/// them; returns how long they took and whether the ticker ran while every one of
/// them was waiting.
pub(crate) fn on_fibers(work: impl Fn() + Clone + 'static) -> (Duration, bool) {
    use std::cell::Cell;
    use std::rc::Rc;
    neverblock::run(move || {
        let waiting = Rc::new(Cell::new(0));
        let ticked_while_all_waited = Rc::new(Cell::new(false));
        let start = Instant::now();
        let workers: Vec<_> = (0..FIBERS)
            .map(|_| {
                let (work, waiting) = (work.clone(), waiting.clone());
                neverblock::spawn(move || {
                    waiting.set(waiting.get() + 1);
                    work();
                    waiting.set(waiting.get() - 1);
                })
            })
            .collect();
        let ticker = {
            let (waiting, ticked) = (waiting.clone(), ticked_while_all_waited.clone());
            neverblock::spawn(move || loop {
                neverblock::sleep(Duration::from_millis(5));
                if waiting.get() == FIBERS {
                    ticked.set(true);
                }
            })
        };
        workers.into_iter().for_each(|w| w.join().unwrap());
        let elapsed = start.elapsed();
        ticker.cancel();
        (elapsed, ticked_while_all_waited.get())
    })
}

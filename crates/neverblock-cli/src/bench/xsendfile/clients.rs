//! The bench's clients: fibers that download a file over and over on one connection each, read at
//! a fixed rate through a token bucket, check every byte, and time each request's first byte.
//!
//! The bucket starts when the first byte arrives and holds at most [`BUCKET`] bytes of credit, so
//! a client that waited in a queue earns nothing it could spend later at full speed: its wait
//! shows in its throughput, not only in its time to first byte.

use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use neverblock::net::TcpStream;

/// The most credit a client's bucket holds, and the most it reads at once.
const BUCKET: usize = 64 * 1024;
/// A client reads once its bucket holds this much (or the rest of the file).
const READ_AT: usize = 16 * 1024;

/// Bytes a client may read now: refilled at `rate` a second from its first byte, up to [`BUCKET`].
#[derive(Clone, Copy, Debug)]
struct Bucket {
    rate: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn new(rate: u64, start: Instant) -> Bucket {
        Bucket { rate: rate as f64, tokens: 0.0, last: start }
    }

    fn available(&mut self, now: Instant) -> usize {
        let earned = now.saturating_duration_since(self.last).as_secs_f64() * self.rate;
        self.tokens = (self.tokens + earned).min(BUCKET as f64);
        self.last = self.last.max(now);
        self.tokens.max(0.0) as usize
    }

    fn spend(&mut self, n: usize) {
        self.tokens -= n as f64;
    }

    /// How long until `n` bytes may be read.
    fn wait_for(&self, n: usize) -> Duration {
        Duration::from_secs_f64(((n.min(BUCKET) as f64 - self.tokens) / self.rate).max(0.0))
    }
}

/// What one configuration's clients did in the window.
#[derive(Debug, Default)]
pub(super) struct Tally {
    /// Body bytes received in the window, every one checked.
    pub(super) bytes: u64,
    /// Each request's time to first byte (a request still unanswered at the window's end: its
    /// wait so far).
    pub(super) first_byte: Vec<Duration>,
    /// Downloads whose status, length and every byte were right, and ones where something was not.
    pub(super) complete: u64,
    pub(super) bad: u64,
}

/// One download's target and what its bytes must be.
#[derive(Clone, Debug)]
pub(super) struct Download {
    pub(super) addr: SocketAddr,
    pub(super) request: Arc<[u8]>,
    pub(super) content: Arc<Vec<u8>>,
    pub(super) rate: u64,
}

/// Runs `clients` clients from `start` until `end` (on this thread's loop) and sums what they did.
pub(super) fn run(clients: usize, download: &Download, start: Instant, end: Instant) -> Tally {
    let tally = Rc::new(RefCell::new(Tally::default()));
    let fibers: Vec<_> = (0..clients)
        .map(|_| {
            let (download, tally) = (download.clone(), tally.clone());
            neverblock::spawn(move || {
                neverblock::sleep_until(start);
                client(&download, end, &tally);
            })
        })
        .collect();
    for fiber in fibers {
        let _ = fiber.join();
    }
    Rc::try_unwrap(tally).map(RefCell::into_inner).unwrap_or_default()
}

/// One client: downloads until `end`, a new connection only after a failure.
fn client(download: &Download, end: Instant, tally: &RefCell<Tally>) {
    let mut buf = vec![0u8; BUCKET];
    let mut conn: Option<TcpStream> = None;
    while Instant::now() < end {
        let asked = Instant::now();
        let stream = match conn.take() {
            Some(stream) => stream,
            None => match TcpStream::connect(download.addr) {
                Ok(stream) => stream,
                Err(_) => {
                    neverblock::sleep(Duration::from_millis(10));
                    continue;
                }
            },
        };
        match fetch(stream, download, asked, end, &mut buf, tally) {
            Ok(Some(stream)) => conn = Some(stream),
            Ok(None) => {}
            Err(_) => tally.borrow_mut().bad += 1,
        }
    }
}

/// One download on `stream`; gives the stream back if it may carry the next.
fn fetch(
    mut stream: TcpStream,
    download: &Download,
    asked: Instant,
    end: Instant,
    buf: &mut [u8],
    tally: &RefCell<Tally>,
) -> io::Result<Option<TcpStream>> {
    stream.write_all(&download.request)?;
    let mut head = Vec::with_capacity(1024);
    let mut first = None;
    let body_start = loop {
        let Some(left) = end.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()) else {
            if first.is_none() {
                tally.borrow_mut().first_byte.push(end - asked);
            }
            return Ok(None);
        };
        stream.set_read_timeout(Some(left))?;
        let n = match stream.read(&mut buf[..4096]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::TimedOut || e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        };
        if first.is_none() {
            let now = Instant::now();
            first = Some(now);
            tally.borrow_mut().first_byte.push(now - asked);
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(at) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        if head.len() > 64 * 1024 {
            return Err(io::Error::other("a response head over 64 KiB"));
        }
    };
    let text = String::from_utf8_lossy(&head[..body_start]).into_owned();
    let length = content_length(&text);
    if !text.starts_with("HTTP/1.1 200 ") || length != Some(download.content.len() as u64) {
        return Err(io::Error::other(format!("an answer that is not the file: {}", text.lines().next().unwrap_or(""))));
    }
    let total = download.content.len();
    let mut got = head.len() - body_start;
    let mut bucket = Bucket::new(download.rate, first.unwrap_or_else(Instant::now));
    bucket.spend(got);
    check(&head[body_start..], &download.content[..got.min(total)])?;
    tally.borrow_mut().bytes += got as u64;
    while got < total {
        let want = READ_AT.min(total - got);
        let now = Instant::now();
        let available = bucket.available(now);
        if available < want {
            let ready = now + bucket.wait_for(want);
            if ready >= end {
                return Ok(None);
            }
            neverblock::sleep_until(ready);
            continue;
        }
        let Some(left) = end.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()) else { return Ok(None) };
        stream.set_read_timeout(Some(left))?;
        let limit = available.min(buf.len()).min(total - got);
        let n = match stream.read(&mut buf[..limit]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::TimedOut || e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) => return Err(e),
        };
        check(&buf[..n], &download.content[got..got + n])?;
        bucket.spend(n);
        got += n;
        tally.borrow_mut().bytes += n as u64;
    }
    tally.borrow_mut().complete += 1;
    Ok((!text.to_ascii_lowercase().contains("\r\nconnection: close")).then_some(stream))
}

fn check(got: &[u8], expected: &[u8]) -> io::Result<()> {
    match got == expected {
        true => Ok(()),
        false => Err(io::Error::other("a byte of the download is wrong")),
    }
}

fn content_length(head: &str) -> Option<u64> {
    head.lines()
        .find_map(|line| line.split_once(':').filter(|(name, _)| name.eq_ignore_ascii_case("content-length")))
        .and_then(|(_, value)| value.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_starts_empty_and_banks_no_more_than_its_capacity() {
        let start = Instant::now();
        let mut bucket = Bucket::new(1_000_000, start);
        assert_eq!(bucket.available(start), 0);
        assert_eq!(bucket.available(start + Duration::from_millis(10)), 10_000);
        assert_eq!(bucket.available(start + Duration::from_secs(5)), BUCKET, "a wait earns at most the capacity");
        bucket.spend(BUCKET + 20_000);
        assert_eq!(bucket.wait_for(10_000), Duration::from_millis(30), "a debt is paid off first");
    }
}

//! Throttled downloads, the clients of `slow-clients` and `xsendfile`: C clients, each a fiber on
//! a connection of its own, downloading one file again and again at a fixed rate for a window.
//!
//! The clients are spread over a loop per core and throttled by a [`Bucket`] that starts at their
//! first byte. A client whose download ends asks again on the same connection (on a new one when
//! the answer said `Connection: close`). Every byte received is compared with the file's byte at
//! that offset, and a download counts as complete only with status 200, the right length and the
//! right bytes; a wrong one is counted as bad and its connection replaced. Time to first byte runs
//! from just before the connection is opened (the first request) or the request is sent (the next
//! ones) to the first byte of the answer; a request still unanswered when the window closes counts
//! with its wait so far.

use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use neverblock::net::TcpStream;
use neverblock::runtime::{self, Builder};

use super::throttle::Bucket;
use crate::histogram::Histogram;

/// The most a client's bucket holds (64 KiB, 65 ms at 1 MB/s), and the most it reads at once.
const BUCKET: usize = 64 * 1024;
/// A client reads once its bucket holds this much (or the rest of the file).
const READ_AT: usize = 32 * 1024;
/// How long the client threads have to make their buffers before the window opens.
const PREPARE: Duration = Duration::from_millis(300);
/// How long a client whose connection failed waits before the next.
const RECONNECT_PAUSE: Duration = Duration::from_millis(10);

/// `len` bytes that differ along the file (a misplaced piece would not pass for the right one).
pub(crate) fn contents(len: u64) -> Vec<u8> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// What every client asks for, where, how fast it reads, and what the answer's body must be.
#[derive(Clone, Debug)]
pub(crate) struct Download {
    pub(crate) addr: SocketAddr,
    /// The whole request, sent as it is for every download.
    pub(crate) request: Arc<[u8]>,
    pub(crate) file: Arc<Vec<u8>>,
    /// Bytes a second each client reads.
    pub(crate) rate: u64,
}

impl Download {
    /// A download of `GET target` from `addr`.
    pub(crate) fn get(addr: SocketAddr, target: &str, file: Arc<Vec<u8>>, rate: u64) -> Download {
        let request = format!("GET {target} HTTP/1.1\r\nHost: {addr}\r\n\r\n").into_bytes().into();
        Download { addr, request, file, rate }
    }
}

/// What the clients of one window saw.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// Body bytes received in the window, every one checked.
    pub(crate) bytes: u64,
    pub(crate) completed: u64,
    /// Downloads that ended wrong: an error, a status other than 200, a wrong length or byte.
    pub(crate) bad: u64,
    pub(crate) first_bad: Option<String>,
    pub(crate) ttfb: Histogram,
    ttfb_total: Duration,
}

impl Tally {
    /// The mean time to first byte.
    pub(crate) fn ttfb_mean(&self) -> Duration {
        self.ttfb_total / u32::try_from(self.ttfb.count().max(1)).unwrap_or(u32::MAX)
    }

    fn merge(&mut self, other: Tally) {
        self.bytes += other.bytes;
        self.completed += other.completed;
        self.bad += other.bad;
        self.first_bad = self.first_bad.take().or(other.first_bad);
        self.ttfb.merge(&other.ttfb);
        self.ttfb_total += other.ttfb_total;
    }

    fn first_byte(&mut self, waited: Duration) {
        self.ttfb.record(waited);
        self.ttfb_total += waited;
    }
}

/// Runs `clients` clients of `download` for `window` (once they are all ready); returns their
/// tally, and says on stderr why the first bad download was bad.
pub(crate) fn run(download: &Download, clients: usize, window: Duration) -> Tally {
    let threads = runtime::available_threads().min(clients);
    let download = download.clone();
    let tally = Builder::new().threads(threads).run(move || {
        // Every thread first makes its clients' buffers (touched, so no page is first faulted in
        // while the window runs), then all clients start at once when the window opens.
        let opens = Instant::now() + PREPARE;
        let closes = opens + window;
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let download = download.clone();
                let here = clients / threads + usize::from(t < clients % threads);
                runtime::spawn_on(t, move || {
                    let tally = Rc::new(RefCell::new(Tally::default()));
                    // A yield after each: a thousand clients' buffers take their loop 100 ms to touch,
                    // which the runtime would rightly warn of as a stall.
                    let buffers: Vec<Vec<u8>> = (0..here)
                        .map(|_| {
                            let buf = vec![1u8; BUCKET];
                            neverblock::yield_now();
                            buf
                        })
                        .collect();
                    neverblock::sleep_until(opens);
                    let fibers: Vec<_> = buffers
                        .into_iter()
                        .map(|buf| {
                            let (download, tally) = (download.clone(), tally.clone());
                            neverblock::spawn(move || client(&download, closes, buf, &tally))
                        })
                        .collect();
                    fibers.into_iter().for_each(|f| f.join().expect("a client panicked"));
                    Rc::into_inner(tally).expect("every client ended").into_inner()
                })
            })
            .collect();
        let mut tally = Tally::default();
        for handle in handles {
            tally.merge(handle.join().expect("a client thread panicked"));
        }
        tally
    });
    if let Some(why) = &tally.first_bad {
        eprintln!("note: {} bad downloads; the first: {why}", tally.bad);
    }
    tally
}

/// Why a download ended before it was whole.
enum End {
    /// The window closed.
    Closed,
    /// It went wrong (counted as bad).
    Bad(String),
}

/// One client: downloads the file again and again until the window closes.
fn client(download: &Download, closes: Instant, mut buf: Vec<u8>, tally: &RefCell<Tally>) {
    loop {
        let asked = Instant::now();
        let Some(left) = closes.checked_duration_since(asked) else { return };
        let stream = match TcpStream::connect_timeout(&download.addr, left) {
            Ok(stream) => stream,
            Err(e) if e.kind() == io::ErrorKind::TimedOut => return tally.borrow_mut().first_byte(closes - asked),
            Err(e) => {
                bad(tally, format!("connect: {e}"));
                neverblock::sleep(RECONNECT_PAUSE);
                continue;
            }
        };
        let mut asked = asked;
        loop {
            match one_download(&stream, download, asked, closes, &mut buf, tally) {
                Ok(close) => {
                    tally.borrow_mut().completed += 1;
                    if close {
                        break;
                    }
                }
                Err(End::Closed) => return,
                Err(End::Bad(why)) => {
                    bad(tally, why);
                    break;
                }
            }
            asked = Instant::now();
        }
    }
}

fn bad(tally: &RefCell<Tally>, why: String) {
    let mut tally = tally.borrow_mut();
    tally.bad += 1;
    tally.first_bad.get_or_insert(why);
}

/// The parts of a response head a download looks at.
struct Head {
    len: usize,
    content_length: Option<u64>,
    close: bool,
}

/// Parses the response head at the start of `bytes`: `Ok(None)` while it is incomplete; an error
/// for a status other than 200 or a malformed head.
fn parse_head(bytes: &[u8]) -> Result<Option<Head>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    let len = match response.parse(bytes) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("a malformed response head: {e}")),
    };
    if response.code != Some(200) {
        return Err(format!("status {:?}", response.code));
    }
    let field = |name: &str| {
        let header = response.headers.iter().find(|h| h.name.eq_ignore_ascii_case(name))?;
        std::str::from_utf8(header.value).ok().map(str::trim)
    };
    let content_length = field("content-length").and_then(|v| v.parse::<u64>().ok());
    let close = field("connection").is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close")));
    Ok(Some(Head { len, content_length, close }))
}

/// Sends the request and reads the whole answer under the throttle, checking every byte; whether
/// the server closes the connection after it.
fn one_download(
    stream: &TcpStream,
    download: &Download,
    asked: Instant,
    closes: Instant,
    buf: &mut [u8],
    tally: &RefCell<Tally>,
) -> Result<bool, End> {
    let io = |e: io::Error| match e.kind() {
        io::ErrorKind::TimedOut if Instant::now() >= closes => End::Closed,
        _ => End::Bad(e.to_string()),
    };
    let file = &download.file[..];
    let mut out = stream;
    out.write_all(&download.request).map_err(io)?;
    // The head, and what came with it: the bucket's first debt.
    let mut filled = 0;
    let mut bucket = None;
    let head = loop {
        let n = read_until(stream, &mut buf[filled..READ_AT], closes).map_err(|e| {
            if bucket.is_none() && matches!(e.kind(), io::ErrorKind::TimedOut) {
                tally.borrow_mut().first_byte(closes.saturating_duration_since(asked));
            }
            io(e)
        })?;
        if n == 0 {
            return Err(End::Bad("the server closed the connection".into()));
        }
        let now = Instant::now();
        if bucket.is_none() {
            tally.borrow_mut().first_byte(now - asked);
            bucket = Some(Bucket::new(download.rate, BUCKET, now));
        }
        filled += n;
        match parse_head(&buf[..filled]).map_err(End::Bad)? {
            Some(head) => break head,
            None if filled < READ_AT => {}
            None => return Err(End::Bad("a response head longer than 32 KiB".into())),
        }
    };
    if head.content_length != Some(file.len() as u64) {
        return Err(End::Bad(format!("Content-Length {:?}, not {}", head.content_length, file.len())));
    }
    let mut bucket = bucket.expect("made at the first byte");
    bucket.spend(filled);
    let mut offset = check(file, 0, &buf[head.len..filled], tally, closes)?;
    while offset < file.len() {
        let now = Instant::now();
        let allowed = bucket.available(now);
        let want = (file.len() - offset).min(buf.len());
        if allowed < want.min(READ_AT) {
            let pause = bucket.wait_for(want.min(READ_AT));
            if now + pause >= closes {
                neverblock::sleep_until(closes);
                return Err(End::Closed);
            }
            neverblock::sleep(pause);
            continue;
        }
        let n = read_until(stream, &mut buf[..want.min(allowed)], closes).map_err(io)?;
        if n == 0 {
            return Err(End::Bad(format!("the connection closed after {offset} of {} bytes", file.len())));
        }
        bucket.spend(n);
        offset = check(file, offset, &buf[..n], tally, closes)?;
    }
    Ok(head.close)
}

/// Compares `got` with the file at `offset` and counts it (when the window is still open); returns
/// the offset after it.
fn check(file: &[u8], offset: usize, got: &[u8], tally: &RefCell<Tally>, closes: Instant) -> Result<usize, End> {
    let end = offset + got.len();
    if end > file.len() {
        return Err(End::Bad(format!("more than the file's {} bytes", file.len())));
    }
    if file[offset..end] != *got {
        return Err(End::Bad(format!("wrong bytes between {offset} and {end}")));
    }
    if Instant::now() >= closes {
        return Err(End::Closed);
    }
    tally.borrow_mut().bytes += got.len() as u64;
    Ok(end)
}

/// Reads into `buf`, waiting no later than `closes` (`TimedOut` then).
fn read_until(stream: &TcpStream, buf: &mut [u8], closes: Instant) -> io::Result<usize> {
    let left = closes.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(io::ErrorKind::TimedOut.into());
    }
    stream.set_read_timeout(Some(left))?;
    let mut input = stream;
    input.read(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_gives_its_length_content_length_and_whether_the_server_closes() {
        let head = parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\nConnection: keep-alive, Close\r\n\r\nbody")
            .unwrap()
            .expect("a whole head");
        assert_eq!((head.len, head.content_length, head.close), (70, Some(20), true));
        let open = parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n").unwrap().unwrap();
        assert!(!open.close);
        assert!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Le").unwrap().is_none(), "not yet whole");
        assert_eq!(parse_head(b"HTTP/1.1 404 Not Found\r\n\r\n").err().unwrap(), "status Some(404)");
        assert!(parse_head(b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n").is_err());
    }

    #[test]
    fn the_file_differs_along_its_length() {
        let file = contents(1 << 16);
        assert_ne!(file[..4096], file[4096..8192]);
        assert_eq!(file, contents(1 << 16), "the same bytes every time");
    }
}

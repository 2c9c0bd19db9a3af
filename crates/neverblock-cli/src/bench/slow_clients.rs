//! slow_clients (grizzly-sendfile's experiment): C clients, each downloading a 20 MB file at
//! 1 MB/s for a fixed window, from `neverblock serve` and from nginx: aggregate MB/s against the
//! bound of C MB/s, time to first byte, and whether every byte of every download was right.
//!
//! The clients are fibers in this process, spread over a loop per core, each on a connection of
//! its own, throttled by a [`Bucket`] that starts at its first byte. A client whose download ends
//! asks for the file again on the same connection. Every byte received is compared with the file's
//! byte at that offset, and a download counts as complete only with the right status, length and
//! bytes; a wrong one is counted in `bad_downloads` and its connection replaced. Time to first
//! byte runs from just before the connection is opened (the first request) or the request is sent
//! (the next ones) to the first byte of the answer; a request still unanswered when the window
//! closes counts with its wait so far.

use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use neverblock::net::TcpStream;
use neverblock::runtime::{self, Builder};
use serde_json::json;

use super::servers::{self, machine_cpu_time, own_cpu_time, Content, ServerChild, TempDir};
use super::side_by_side::{median, round3};
use super::throttle::Bucket;
use super::{nginx, report, Common, Row};
use crate::histogram::Histogram;

/// Options of `bench slow-clients`.
#[derive(Args, Debug)]
pub(crate) struct SlowClientsArgs {
    /// Clients at once, one configuration each.
    #[arg(short = 'c', long, value_delimiter = ',', default_values_t = [50usize, 100, 200, 300, 1000])]
    clients: Vec<usize>,
    /// How long each configuration runs.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    window: Duration,
    /// The file's size (`20MB` = 20,000,000 bytes; kB, MB, KiB, MiB or plain bytes).
    #[arg(long, default_value = "20MB", value_parser = parse_size)]
    file_size: u64,
    /// Each client's download rate, per second (same units).
    #[arg(long, default_value = "1MB", value_parser = parse_size)]
    rate: u64,
    /// Server workers: neverblock's loops, nginx's worker processes (default: one per core).
    #[arg(long)]
    workers: Option<usize>,
    /// Windows per server and configuration, alternating the servers; rows give medians.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    #[command(flatten)]
    common: Common,
}

/// The most a client's bucket holds (64 KiB, 65 ms at 1 MB/s), and the most it reads at once.
const BUCKET: usize = 64 * 1024;
/// A client reads once its bucket holds this much (or the rest of the file).
const READ_AT: usize = 32 * 1024;
/// How long the client threads have to make their buffers before the window opens.
const PREPARE: Duration = Duration::from_millis(300);
/// How long a client whose connection failed waits before the next.
const RECONNECT_PAUSE: Duration = Duration::from_millis(10);

pub(crate) fn run(args: SlowClientsArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.clients.iter().all(|&c| c > 0), "--clients must be at least 1");
    anyhow::ensure!(args.file_size > 0 && args.rate > 0, "--file-size and --rate must be positive");
    let workers = args.workers.unwrap_or_else(runtime::available_threads);
    anyhow::ensure!(workers > 0, "--workers must be at least 1");
    let dir = TempDir::new("slow-clients")?;
    let file: Arc<Vec<u8>> = Arc::new(contents(args.file_size));
    std::fs::write(dir.0.join("file.bin"), &*file)?;
    let root = dir.0.as_path();
    let mut rows = Vec::new();
    for &clients in &args.clients {
        let params = json!({"clients": clients, "workers": workers, "window_s": args.window.as_secs_f64()});
        let mut neverblock = Vec::new();
        let mut peer = Vec::new();
        for _ in 0..args.runs.max(1) {
            neverblock.push(measure(servers::neverblock(Content::Files(root), workers)?, &file, clients, &args));
            if args.common.peers {
                if let Some(server) = nginx::start(Content::Files(root), workers) {
                    peer.push(measure(server?, &file, clients, &args));
                }
            }
        }
        rows.push(row("neverblock", &params, clients, &args, &neverblock));
        if !peer.is_empty() {
            rows.push(row("nginx", &params, clients, &args, &peer));
        }
    }
    report::print(rows, "mb_per_s", args.common.json);
    Ok(())
}

/// `len` bytes that differ along the file (a misplaced piece would not pass for the right one).
fn contents(len: u64) -> Vec<u8> {
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

/// Runs the clients against `server` for a window, then stops it; the tally has the CPUs the server
/// and everything else on the machine kept busy meanwhile.
fn measure(server: ServerChild, file: &Arc<Vec<u8>>, clients: usize, args: &SlowClientsArgs) -> Tally {
    let before = [server.cpu_time(), own_cpu_time(), machine_cpu_time()];
    let mut tally = download(server.addr, file, clients, args);
    let [server_cpu, own, machine] = [server.cpu_time(), own_cpu_time(), machine_cpu_time()];
    let window = args.window.as_secs_f64();
    tally.server_cpus = (server_cpu - before[0]).as_secs_f64() / window;
    let others =
        machine.saturating_sub(before[2]).saturating_sub(server_cpu - before[0]).saturating_sub(own - before[1]);
    tally.others_cpus = others.as_secs_f64() / window;
    tally
}

/// What the clients of one window saw.
#[derive(Debug, Default)]
struct Tally {
    /// Body bytes received in the window.
    bytes: u64,
    completed: u64,
    /// Downloads that ended wrong: an error, a status other than 200, a wrong length or byte.
    bad: u64,
    first_bad: Option<String>,
    ttfb: Histogram,
    ttfb_total: Duration,
    /// CPUs the server kept busy, on average.
    server_cpus: f64,
    /// CPUs everything but the server and the clients kept busy.
    others_cpus: f64,
}

impl Tally {
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

/// Runs `clients` clients against the server at `addr` for the window; returns their tally.
fn download(addr: SocketAddr, file: &Arc<Vec<u8>>, clients: usize, args: &SlowClientsArgs) -> Tally {
    let threads = runtime::available_threads().min(clients);
    let (file, rate, window) = (file.clone(), args.rate, args.window);
    let tally = Builder::new().threads(threads).run(move || {
        // Every thread first makes its clients' buffers (touched, so no page is first faulted in
        // while the window runs), then all clients start at once when the window opens.
        let opens = Instant::now() + PREPARE;
        let closes = opens + window;
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let file = file.clone();
                let here = clients / threads + usize::from(t < clients % threads);
                runtime::spawn_on(t, move || {
                    let tally = Rc::new(RefCell::new(Tally::default()));
                    let buffers: Vec<Vec<u8>> = (0..here).map(|_| vec![1u8; BUCKET]).collect();
                    neverblock::sleep_until(opens);
                    let fibers: Vec<_> = buffers
                        .into_iter()
                        .map(|buf| {
                            let (file, tally) = (file.clone(), tally.clone());
                            neverblock::spawn(move || client(addr, &file, rate, closes, buf, &tally))
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

/// Why a download ended.
enum End {
    /// The window closed.
    Closed,
    /// It went wrong (counted as bad).
    Bad(String),
}

/// One client: downloads the file again and again until the window closes.
fn client(addr: SocketAddr, file: &[u8], rate: u64, closes: Instant, mut buf: Vec<u8>, tally: &RefCell<Tally>) {
    let request = format!("GET /file.bin HTTP/1.1\r\nHost: {addr}\r\n\r\n").into_bytes();
    loop {
        let asked = Instant::now();
        let Some(left) = closes.checked_duration_since(asked) else { return };
        let stream = match TcpStream::connect_timeout(&addr, left) {
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
            match one_download(&stream, &request, file, rate, asked, closes, &mut buf, tally) {
                Ok(()) => tally.borrow_mut().completed += 1,
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

/// Sends the request and reads the whole answer under the throttle, checking every byte.
#[allow(clippy::too_many_arguments)]
fn one_download(
    stream: &TcpStream,
    request: &[u8],
    file: &[u8],
    rate: u64,
    asked: Instant,
    closes: Instant,
    buf: &mut [u8],
    tally: &RefCell<Tally>,
) -> Result<(), End> {
    let io = |e: io::Error| match e.kind() {
        io::ErrorKind::TimedOut if Instant::now() >= closes => End::Closed,
        _ => End::Bad(e.to_string()),
    };
    let mut out = stream;
    out.write_all(request).map_err(io)?;
    // The head, and what came with it: the bucket's first debt.
    let mut filled = 0;
    let mut bucket = None;
    let (head_len, body_len) = loop {
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
            bucket = Some(Bucket::new(rate, BUCKET, now));
        }
        filled += n;
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut response = httparse::Response::new(&mut headers);
        match response.parse(&buf[..filled]) {
            Ok(httparse::Status::Complete(len)) if response.code == Some(200) => {
                let length = response.headers.iter().find(|h| h.name.eq_ignore_ascii_case("content-length"));
                let length = length.and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse::<u64>().ok());
                break (len, length);
            }
            Ok(httparse::Status::Complete(_)) => return Err(End::Bad(format!("status {:?}", response.code))),
            Ok(httparse::Status::Partial) if filled < READ_AT => {}
            Ok(httparse::Status::Partial) => return Err(End::Bad("a response head longer than 32 KiB".into())),
            Err(e) => return Err(End::Bad(format!("a malformed response head: {e}"))),
        }
    };
    if body_len != Some(file.len() as u64) {
        return Err(End::Bad(format!("Content-Length {body_len:?}, not {}", file.len())));
    }
    let mut bucket = bucket.expect("made at the first byte");
    bucket.spend(filled);
    let mut offset = check(file, 0, &buf[head_len..filled], tally, closes)?;
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
    Ok(())
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
    let now = Instant::now();
    if now >= closes {
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

fn row(name: &str, params: &serde_json::Value, clients: usize, args: &SlowClientsArgs, runs: &[Tally]) -> Row {
    let window = args.window.as_secs_f64();
    let bound = clients as f64 * args.rate as f64 / 1e6;
    let median_of = |f: &dyn Fn(&Tally) -> f64| median(runs.iter().map(f).collect());
    let mb_per_s = median_of(&|t| t.bytes as f64 / 1e6 / window);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mean = |t: &Tally| ms(t.ttfb_total) / t.ttfb.count().max(1) as f64;
    let p99 = |t: &Tally| t.ttfb.percentile(99.0).map_or(0.0, ms);
    Row::new("slow-clients", name, params.clone())
        .metric("mb_per_s", round3(mb_per_s))
        .metric("bound_pct", (mb_per_s / bound * 1000.0).round() / 10.0)
        .metric("ttfb_mean_ms", round3(median_of(&mean)))
        .metric("ttfb_p99_ms", round3(median_of(&p99)))
        .metric("completed", runs.iter().map(|t| t.completed).sum::<u64>())
        .metric("bad_downloads", runs.iter().map(|t| t.bad).sum::<u64>())
        .metric("server_cpus", round3(median_of(&|t| t.server_cpus)))
        .metric("others_cpus", round3(median_of(&|t| t.others_cpus)))
        .metric("runs", runs.len())
}

/// A size: plain bytes, or with a unit (kB, MB, GB: powers of 1000; KiB, MiB, GiB: of 1024).
fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().map_err(|_| format!("{text:?} is not a size"))?;
    let scale = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        other => return Err(format!("unknown unit {other:?} (kB, MB, GB, KiB, MiB, GiB)")),
    };
    Ok((number * scale).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_decimal_and_binary_units() {
        assert_eq!(parse_size("20MB"), Ok(20_000_000));
        assert_eq!(parse_size("1mb"), Ok(1_000_000));
        assert_eq!(parse_size("64KiB"), Ok(65_536));
        assert_eq!(parse_size("1.5kB"), Ok(1_500));
        assert_eq!(parse_size("4096"), Ok(4_096));
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("MB").is_err());
    }

    #[test]
    fn the_file_differs_along_its_length() {
        let file = contents(1 << 16);
        assert_ne!(file[..4096], file[4096..8192]);
        assert_eq!(file, contents(1 << 16), "the same bytes every time");
    }
}

//! `neverblock delay-server`: the seed's EventMachine backend. Every request is
//! answered `200 OK` after a fixed delay; each connection is a fiber, so one
//! thread holds tens of thousands of them. A loop per core (nginx's `reuseport`):
//! each loop has its own listener on the port and the kernel spreads connections
//! across them.

use std::io::{self, Read, Write};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use neverblock::net::{serve, TcpListener, TcpStream};
use neverblock::runtime::{spawn_on, thread_index, Builder};
use neverblock::sync::Sender;

/// Options of `neverblock delay-server`.
#[derive(Args, Debug)]
pub(crate) struct DelayServerArgs {
    /// How long to wait before answering each request (`0`, `10ms`, `1s` …).
    #[arg(long, default_value = "100ms", value_parser = humantime::parse_duration)]
    pub(crate) delay: Duration,
    /// The port to listen on (0: any free port; the chosen one is printed).
    #[arg(long, default_value_t = 8080)]
    pub(crate) port: u16,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub(crate) host: String,
    /// Event loops, one thread each, each accepting on the port (default: one per core).
    #[arg(long)]
    pub(crate) threads: Option<usize>,
}

/// The largest request head the server reads; longer ones get a 431 and the connection closes.
const MAX_HEAD: usize = 16 * 1024;

pub(crate) fn run(args: DelayServerArgs) -> anyhow::Result<()> {
    let threads = args.threads.unwrap_or_else(neverblock::runtime::available_threads);
    anyhow::ensure!(threads > 0, "--threads must be at least 1");
    Builder::new().threads(threads).run(move || {
        let DelayServerArgs { delay, port, host, .. } = args;
        let listen_error = || format!("listen on {host}:{port}");
        if port != 0 {
            // SO_REUSEPORT would let this server silently share a port another one of this
            // user listens on; a plain bind fails if anything listens there already.
            drop(TcpListener::bind((host.as_str(), port)).with_context(listen_error)?);
        }
        let first = TcpListener::bind_reuse_port((host.as_str(), port)).with_context(listen_error)?;
        // Port 0 means any: the others join the port the first one got.
        let addr = first.local_addr()?;
        let (failed_tx, failed) = neverblock::sync::unbounded();
        let others: Vec<_> = (1..threads)
            .map(|i| {
                let failed_tx = failed_tx.clone();
                let bound = spawn_on(i, move || {
                    let listener = TcpListener::bind_reuse_port(addr)?;
                    accept_in_background(listener, delay, failed_tx);
                    Ok::<_, io::Error>(())
                });
                (i, bound)
            })
            .collect();
        accept_in_background(first, delay, failed_tx);
        for (i, bound) in others {
            match bound.join() {
                Ok(bound) => bound.with_context(|| format!("listen on {addr} (loop {i})"))?,
                Err(e) => anyhow::bail!("listen on {addr} (loop {i}): {e}"),
            }
        }
        // The first line on stdout is the URL, once every loop listens: the benchmarks start this server and read it.
        println!("http://{addr}/");
        let loops = if threads == 1 { "1 loop".to_owned() } else { format!("{threads} loops") };
        eprintln!("delay-server: answering every request after {delay:?}, on {loops}");
        match failed.recv() {
            Ok((i, e)) => Err(anyhow::Error::new(e).context(format!("accept on {addr} (loop {i})"))),
            Err(e) => Err(anyhow::anyhow!("every accept loop ended: {e}")),
        }
    })
}

/// Runs `listener`'s accept loop in a fiber of this loop; an error that ends it goes to `failed`.
fn accept_in_background(listener: TcpListener, delay: Duration, failed: Sender<(usize, io::Error)>) {
    neverblock::spawn(move || {
        let Err(e) = serve(&listener, move |conn| serve_connection(conn, delay));
        let _ = failed.send((thread_index(), e));
    });
}

/// Answers requests on one connection until the client closes it or asks to.
fn serve_connection(mut conn: TcpStream, delay: Duration) {
    let _ = conn.set_nodelay(true);
    let mut buf = vec![0u8; 4096];
    let mut filled = 0;
    loop {
        let parsed = loop {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut request = httparse::Request::new(&mut headers);
            match request.parse(&buf[..filled]) {
                Ok(httparse::Status::Complete(head_len)) => break Ok((head_len, framing(&request))),
                Ok(httparse::Status::Partial) if filled < MAX_HEAD => {}
                Ok(httparse::Status::Partial) => break Err(
                    &b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                        [..],
                ),
                Err(_) => {
                    break Err(&b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"[..])
                }
            }
            if filled == buf.len() {
                buf.resize(buf.len() * 2, 0);
            }
            match conn.read(&mut buf[filled..]) {
                Ok(0) | Err(_) => return,
                Ok(n) => filled += n,
            }
        };
        let (head_len, (body_len, keep_alive)) = match parsed {
            Ok(ok) => ok,
            Err(refusal) => {
                let _ = conn.write_all(refusal);
                return;
            }
        };
        // Skip the body, and keep what follows it (a pipelined request) at the front.
        let end = head_len + body_len;
        if end <= filled {
            buf.copy_within(end..filled, 0);
            filled -= end;
        } else {
            let mut rest = end - filled;
            filled = 0;
            while rest > 0 {
                let want = rest.min(buf.len());
                match conn.read(&mut buf[..want]) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => rest -= n,
                }
            }
        }
        if !delay.is_zero() {
            neverblock::sleep(delay);
        }
        let reply: &[u8] = if keep_alive {
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
        } else {
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
        };
        if conn.write_all(reply).is_err() || !keep_alive {
            return;
        }
    }
}

/// The request's body length (Content-Length; 0 without one) and whether the
/// connection stays open after the answer (HTTP/1.1 unless `Connection: close`).
fn framing(request: &httparse::Request<'_, '_>) -> (usize, bool) {
    let mut body_len = 0;
    let mut keep_alive = request.version == Some(1);
    for h in request.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            body_len = std::str::from_utf8(h.value).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(0);
        } else if h.name.eq_ignore_ascii_case("connection") {
            let value = String::from_utf8_lossy(h.value).to_ascii_lowercase();
            keep_alive = if keep_alive { !value.contains("close") } else { value.contains("keep-alive") };
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            // Chunked request bodies are not read here: answer, then close.
            keep_alive = false;
        }
    }
    (body_len, keep_alive)
}

//! The seed's demo: 20 GETs against a server that takes 1 second to answer,
//! first in 20 fibers (about 1 s in all), then in blocking mode (about 20 s).
//!
//! ```text
//! cargo run --release -p neverblock-http --example twenty_gets            # starts its own 1-second server
//! cargo run --release -p neverblock-http --example twenty_gets -- URL     # or uses yours (e.g. delay-server)
//! ```

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use neverblock::net::{serve, TcpListener};
use neverblock_http::Client;

const REQUESTS: usize = 20;

fn main() {
    let url = std::env::args().nth(1).unwrap_or_else(start_slow_server);
    let client = Client::new();

    let start = Instant::now();
    let statuses = neverblock::run({
        let (client, url) = (client.clone(), url.clone());
        move || {
            let fibers: Vec<_> = (0..REQUESTS)
                .map(|_| {
                    let (client, url) = (client.clone(), url.clone());
                    neverblock::spawn(move || client.get(&url).map(|r| r.status()))
                })
                .collect();
            fibers.into_iter().map(|f| f.join().expect("a request fiber panicked")).collect::<Vec<_>>()
        }
    });
    report("fibers", &statuses, start.elapsed());

    let start = Instant::now();
    let statuses: Vec<_> = (0..REQUESTS).map(|_| client.get(&url).map(|r| r.status())).collect();
    report("blocking", &statuses, start.elapsed());
}

fn report(mode: &str, statuses: &[Result<u16, neverblock_http::Error>], took: Duration) {
    let ok = statuses.iter().filter(|s| matches!(s, Ok(200))).count();
    eprintln!("{mode:>8}: {ok}/{REQUESTS} answered 200 in {:.2} s", took.as_secs_f64());
    if let Some(Err(e)) = statuses.iter().find(|s| s.is_err()) {
        eprintln!("          first error: {e}");
    }
}

/// A server on its own thread that answers every request after one second; returns its URL.
fn start_slow_server() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/", listener.local_addr().expect("local address"));
    std::thread::spawn(move || {
        neverblock::run(move || {
            let listener = TcpListener::from_std(listener).expect("non-blocking listener");
            let _ = serve(&listener, |mut conn| {
                let mut request = [0; 4096];
                // One request per connection: read its head, wait a second, answer, close.
                while conn.read(&mut request).is_ok_and(|n| n > 0 && !request[..n].ends_with(b"\r\n\r\n")) {}
                neverblock::sleep(Duration::from_secs(1));
                let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
            });
        })
    });
    url
}

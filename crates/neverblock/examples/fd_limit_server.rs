//! An echo server that keeps serving after it runs out of file descriptors.
//!
//! Run it under a low limit and open more connections than the limit allows:
//!
//! ```text
//! sh -c 'ulimit -n 32; exec cargo run -q --example fd_limit_server'
//! ```
//!
//! It prints its port, then echoes one line per connection. Connections past the
//! limit wait in the backlog; `serve` reports the `EMFILE` (a log line, printed
//! here on stderr), backs off, and accepts them as earlier connections close.

use std::io::{BufRead, BufReader, Write};

use neverblock::net::{serve, TcpListener};

fn main() {
    env_logger::Builder::new().filter_level(log::LevelFilter::Info).init();
    neverblock::run(|| {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        eprintln!("port {}", listener.local_addr().expect("local address").port());
        let err = serve(&listener, |conn| {
            let mut line = String::new();
            if BufReader::new(&conn).read_line(&mut line).is_ok() {
                let _ = (&conn).write_all(line.as_bytes());
            }
            let _ = BufReader::new(&conn).read_line(&mut line);
        });
        eprintln!("serve stopped: {err:?}");
    });
}

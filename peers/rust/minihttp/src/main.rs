//! may_minihttp's hello-world server as a peer of `neverblock bench http-hello`: every request is
//! answered with the 13 bytes `hello, world\n` as `text/plain`.
//!
//! `minihttp-peer ADDR WORKERS` listens on `ADDR` (a fixed port: may_minihttp does not report the
//! one it picks) with `WORKERS` of may's scheduler threads, and prints its URL once it listens.

use std::io;

use may_minihttp::{HttpServer, HttpService, Request, Response};

#[derive(Clone)]
struct Hello;

impl HttpService for Hello {
    fn call(&mut self, _request: Request, response: &mut Response) -> io::Result<()> {
        response.header("Content-Type: text/plain");
        response.body("hello, world\n");
        Ok(())
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(addr), Some(workers)) = (args.next(), args.next()) else {
        eprintln!("usage: minihttp-peer ADDR WORKERS");
        std::process::exit(2);
    };
    let workers: usize = workers.parse().expect("WORKERS is a number");
    may::config().set_workers(workers);
    let server = HttpServer(Hello).start(addr.as_str()).expect("listen");
    println!("http://{addr}/");
    server.join().expect("the server ended");
}

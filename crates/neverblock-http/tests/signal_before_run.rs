//! A server that shuts down on signals catches them from the moment it is bound: a SIGTERM sent
//! once its address is known, before it runs, shuts the run down as it starts (it does not kill
//! the process, nor is it lost). Alone in its binary: the signal goes to the whole process.

use std::time::Duration;

use neverblock_http::server::{Request, Response, Server};

#[test]
fn a_sigterm_between_bind_and_run_shuts_the_run_down() {
    let server = Server::builder().workers(2).shutdown_on_signals().bind("127.0.0.1:0").unwrap();
    rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::TERM).unwrap();
    let (done, ran) = std::sync::mpsc::channel();
    std::thread::spawn(move || done.send(server.run(|_: &mut Request<'_>| Response::new(204))));
    let ran = ran.recv_timeout(Duration::from_secs(30)).expect("the run ended by itself");
    assert!(ran.is_ok(), "a graceful shutdown: {ran:?}");
}

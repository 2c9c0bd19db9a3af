//! The server's fibers by name: the accept loop by its URL, each connection by its peer and the
//! request it answers, in the fiber dump and in the runtime's stall warnings.

use std::time::{Duration, Instant};

use neverblock_http::server::{Request, Response, Server};

use crate::logs;
use crate::serving::{replies, Running};

#[test]
fn the_dump_names_the_accept_loop_and_each_connection_by_its_peer_and_request() {
    let server = Running::start(|_: &mut Request<'_>| {
        Response::new(200).body(neverblock::runtime::dump().expect("a handler runs on a loop"))
    });
    let stream = server.connect();
    let peer = stream.local_addr().unwrap();
    drop(stream);
    let dump = replies(server.send("GET /dump?token=secret HTTP/1.1\r\nHost: x\r\n\r\n"))[0].text();
    assert!(dump.contains(&format!("\"accept http://{}/\"", server.addr)), "{dump}");
    let answering = dump.lines().find(|l| l.contains("doing \"GET /dump\"")).unwrap_or_else(|| panic!("{dump}"));
    assert!(answering.contains("\"http 127.0.0.1:") && answering.contains(" runs"), "{answering}");
    assert!(!dump.contains("secret"), "the query stays out of the dump: {dump}");
    assert!(!dump.contains(&format!("\"http {peer}\"")), "a closed connection's fiber has ended: {dump}");
}

#[test]
fn a_handler_that_blocks_its_loop_is_named_with_its_request_in_the_stall_warning() {
    logs::capture();
    let builder = Server::builder().workers(1).stall_warning(Duration::from_millis(50));
    let server = Running::with(builder, |request: &mut Request<'_>| {
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(200) {} // computes without parking
        Response::new(200).body(request.path().to_string())
    });
    let answer = replies(server.send("GET /spin-for-the-sentinel HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
    assert_eq!(answer[0].status, 200);
    let deadline = Instant::now() + Duration::from_secs(5);
    while logs::lines_containing("is back in its event loop").iter().all(|l| !l.contains("/spin-for-the-sentinel")) {
        assert!(Instant::now() < deadline, "no warning that the loop came back");
        #[allow(clippy::disallowed_methods)] // the test's own thread, outside any runtime
        std::thread::sleep(Duration::from_millis(10));
    }
    let warning = logs::lines_containing("doing \"GET /spin-for-the-sentinel\"");
    let stalled = warning.iter().find(|l| l.contains("has not come back")).expect("a warning while it spun");
    assert!(stalled.contains("\"http 127.0.0.1:"), "{stalled}");
}

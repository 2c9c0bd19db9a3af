//! Listening on sockets bound elsewhere (systemd's, or another server's), and handing a running
//! server's sockets to another that takes over without refusing a connection.

use std::io::Write;
use std::net::{TcpListener, UdpSocket};
use std::sync::mpsc;

use neverblock_http::server::{Request, Response, Server, ServerBuilder};
use neverblock_http::ErrorKind;

use crate::serving::{read_all, Running, PATIENCE};

/// `GET /` on a fresh connection to `addr`, and the body of the answer.
fn body_at(addr: std::net::SocketAddr) -> String {
    let mut stream = std::net::TcpStream::connect(addr).expect("connected, not refused");
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    stream.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let answer = read_all(&mut stream);
    answer.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_else(|| panic!("{answer:?}"))
}

/// `builder` with a hook that says on the returned channel when the server serves.
fn telling_when_ready(builder: ServerBuilder) -> (ServerBuilder, mpsc::Receiver<()>) {
    let (ready, serving) = mpsc::channel();
    let ready = std::sync::Mutex::new(ready);
    (builder.on_ready(move || ready.lock().unwrap().send(()).unwrap()), serving)
}

#[test]
fn a_server_serves_on_a_socket_bound_elsewhere_from_every_loop() {
    let bound = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = bound.local_addr().unwrap();
    let server = Server::builder().workers(2).bind_sockets(vec![bound]).unwrap();
    assert_eq!(server.local_addr(), addr);
    let running = Running::started(server, |_: &mut Request<'_>| Response::new(200).body("here"));
    for _ in 0..20 {
        assert_eq!(body_at(addr), "here");
    }
    drop(running);
}

#[test]
fn a_server_on_another_ones_sockets_takes_over_without_refusing_a_connection() {
    let (builder, first_ready) = telling_when_ready(Server::builder().workers(2));
    let first = Running::with(builder, |_: &mut Request<'_>| Response::new(200).body("first"));
    first_ready.recv_timeout(PATIENCE).unwrap();
    let handed = first.handle.sockets().unwrap();
    assert_eq!((handed.len(), handed[0].sockets.len(), handed[0].tls), (1, 2, false));
    assert_eq!(handed[0].url, format!("http://{}/", first.addr));
    let sockets = handed.into_iter().next().unwrap().sockets;
    let (builder, second_ready) = telling_when_ready(Server::builder().workers(1));
    let second = Running::started(builder.bind_sockets(sockets).unwrap(), |_: &mut Request<'_>| {
        Response::new(200).body("second")
    });
    second_ready.recv_timeout(PATIENCE).unwrap();
    assert_eq!(second.addr, first.addr);
    let addr = first.addr;
    first.handle.shutdown();
    first.join().unwrap();
    assert!(second.handle.sockets().unwrap()[0].sockets.len() == 2, "both of the first one's sockets");
    for _ in 0..20 {
        assert_eq!(body_at(addr), "second");
    }
}

#[test]
fn what_is_not_a_listening_tcp_socket_is_refused() {
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let not_tcp = TcpListener::from(std::os::fd::OwnedFd::from(udp));
    let refused = Server::builder().bind_sockets(vec![not_tcp]).unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Listen, "{refused}");
    let none = Server::builder().bind_sockets(Vec::new()).unwrap_err();
    assert_eq!(none.kind(), ErrorKind::Listen, "{none}");
    let (a, b) = (TcpListener::bind("127.0.0.1:0").unwrap(), TcpListener::bind("127.0.0.1:0").unwrap());
    let apart = Server::builder().bind_sockets(vec![a, b]).unwrap_err();
    assert!(apart.to_string().contains("listen on"), "{apart}");
}

//! Sockets: many connections, partial reads and writes, each timeout and deadline, fd exhaustion,
//! blocking mode.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::Shutdown;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use neverblock::net::{TcpListener, TcpStream, ToSocketAddrs, UdpSocket, UnixListener, UnixStream};
use neverblock::{run, spawn};

/// The process's soft open-files limit, from /proc (no unsafe `getrlimit` needed).
fn open_files_limit() -> usize {
    let limits = std::fs::read_to_string("/proc/self/limits").expect("read /proc/self/limits");
    let line = limits.lines().find(|l| l.starts_with("Max open files")).expect("an open-files line");
    line.split_whitespace().nth(3).and_then(|n| n.parse().ok()).unwrap_or(1024)
}

#[test]
fn an_echo_server_holds_thousands_of_concurrent_connections() {
    // Both ends live in this process: two fds per connection, and room for the other tests.
    let clients = 4000.min(open_files_limit().saturating_sub(1000) / 2);
    assert!(clients >= 500, "the open-files limit ({}) is too low for this test", open_files_limit());
    let echoed = run(move || {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = spawn(move || {
            for _ in 0..clients {
                let (conn, _) = listener.accept().unwrap();
                spawn(move || {
                    let mut line = String::new();
                    BufReader::new(&conn).read_line(&mut line).unwrap();
                    (&conn).write_all(line.as_bytes()).unwrap();
                });
            }
        });
        // Every client connects and sends before any reads: all are open at once.
        let conns: Vec<_> = (0..clients)
            .map(|i| {
                let mut conn = TcpStream::connect(addr).unwrap();
                conn.write_all(format!("client {i}\n").as_bytes()).unwrap();
                conn
            })
            .collect();
        let readers: Vec<_> = conns
            .into_iter()
            .enumerate()
            .map(|(i, conn)| {
                spawn(move || {
                    let mut line = String::new();
                    BufReader::new(conn).read_line(&mut line).unwrap();
                    line == format!("client {i}\n")
                })
            })
            .collect();
        server.join().unwrap();
        readers.into_iter().map(|r| r.join().unwrap()).filter(|&ok| ok).count()
    });
    assert_eq!(echoed, clients);
}

#[test]
fn a_large_write_parks_until_a_slow_reader_drains_it() {
    const LEN: usize = 8 << 20;
    let received = run(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let reader = spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut buf = [0u8; 1000];
            let mut got = Vec::with_capacity(LEN);
            loop {
                // Small reads, yielding between them: the writer fills the socket and must wait.
                let n = conn.read(&mut buf[..700]).unwrap();
                if n == 0 {
                    break got;
                }
                got.extend_from_slice(&buf[..n]);
                neverblock::yield_now();
            }
        });
        let payload: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
        let mut conn = TcpStream::connect(addr).unwrap();
        conn.write_all(&payload).unwrap();
        conn.shutdown(Shutdown::Write).unwrap();
        (reader.join().unwrap(), payload)
    });
    assert!(received.0 == received.1, "the bytes arrived intact and in order");
}

#[test]
fn a_read_timeout_fails_the_read_and_other_fibers_run_meanwhile() {
    let (kind, waited, ticks) = run(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let conn = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let _server_side = listener.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        assert_eq!(conn.read_timeout().unwrap(), Some(Duration::from_millis(50)));
        let ticks = std::rc::Rc::new(std::cell::Cell::new(0));
        let t = ticks.clone();
        let ticker = spawn(move || {
            for _ in 0..5 {
                neverblock::sleep(Duration::from_millis(5));
                t.set(t.get() + 1);
            }
        });
        let start = Instant::now();
        let err = (&conn).read(&mut [0; 8]).unwrap_err();
        // Counted before the join: ticks that only ran after the read would not count.
        let ticked = ticks.get();
        ticker.join().unwrap();
        (err.kind(), start.elapsed(), ticked)
    });
    assert_eq!(kind, ErrorKind::TimedOut);
    assert!(waited >= Duration::from_millis(50), "waited only {waited:?}");
    assert_eq!(ticks, 5, "the thread ran the other fiber while the read waited");
}

#[test]
fn a_write_timeout_fails_when_the_peer_stops_reading() {
    let (kind, sent) = run(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut conn = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let _never_read = listener.accept().unwrap();
        conn.set_write_timeout(Some(Duration::from_millis(50))).unwrap();
        let chunk = vec![7u8; 1 << 16];
        let mut sent = 0usize;
        loop {
            match conn.write(&chunk) {
                Ok(n) => sent += n,
                Err(e) => break (e.kind(), sent),
            }
        }
    });
    assert_eq!(kind, ErrorKind::TimedOut);
    assert!(sent > 0, "the socket buffers took some bytes before the timeout");
}

#[test]
fn a_read_deadline_bounds_every_read_that_waits_and_none_that_does_not() {
    let outcome = run(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let conn = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server_side, _) = listener.accept().unwrap();
        // A timeout far longer than the deadline: the deadline, coming first, ends the wait.
        conn.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let deadline = Instant::now() + Duration::from_millis(30);
        conn.set_read_deadline(Some(deadline));
        let first = (&conn).read(&mut [0; 8]).unwrap_err();
        let ended = Instant::now();
        // Past the deadline, a read whose bytes are there already does not wait, and succeeds.
        server_side.write_all(b"late").unwrap();
        neverblock::sleep(Duration::from_millis(20));
        let mut buf = [0; 8];
        let late = (&conn).read(&mut buf).map(|n| buf[..n].to_vec());
        // And the next one that would wait fails at once: the deadline holds until changed.
        let second = (&conn).read(&mut buf).unwrap_err();
        conn.set_read_deadline(None);
        (first.kind(), ended, deadline, late.unwrap(), second.kind(), conn.read_deadline())
    });
    let (first, ended, deadline, late, second, cleared) = outcome;
    assert_eq!(first, ErrorKind::TimedOut);
    assert!(ended >= deadline, "the read failed before its deadline");
    assert!(ended < deadline + Duration::from_secs(30), "the 60 s timeout ended the wait, not the deadline");
    assert_eq!(late, b"late");
    assert_eq!(second, ErrorKind::TimedOut);
    assert_eq!(cleared, None);
}

#[test]
fn a_write_deadline_fails_a_write_the_peer_never_makes_room_for() {
    let (kind, sent, ended, deadline) = run(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut conn = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let _never_read = listener.accept().unwrap();
        let deadline = Instant::now() + Duration::from_millis(50);
        conn.set_write_deadline(Some(deadline));
        assert_eq!(conn.write_deadline(), Some(deadline));
        let chunk = vec![7u8; 1 << 16];
        let mut sent = 0usize;
        loop {
            match conn.write(&chunk) {
                Ok(n) => sent += n,
                Err(e) => break (e.kind(), sent, Instant::now(), deadline),
            }
        }
    });
    assert_eq!(kind, ErrorKind::TimedOut);
    assert!(sent > 0, "the socket buffers took some bytes before the deadline");
    assert!(ended >= deadline, "the write failed before its deadline");
}

#[test]
fn connect_timeout_gives_up_on_a_listener_that_never_accepts() {
    // A backlog of 0 that is already full: the kernel drops further SYNs, so connects hang.
    let listener = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    listener.bind(&"127.0.0.1:0".parse::<std::net::SocketAddr>().unwrap().into()).unwrap();
    listener.listen(0).unwrap();
    let addr = listener.local_addr().unwrap().as_socket().unwrap();
    let result = run(move || {
        let mut held = Vec::new();
        let start = Instant::now();
        loop {
            match TcpStream::connect_timeout(&addr, Duration::from_millis(100)) {
                Ok(conn) => held.push(conn),
                Err(e) => break (e.kind(), e.to_string(), start.elapsed(), held.len()),
            }
            assert!(held.len() < 64, "connects kept succeeding past any backlog");
        }
    });
    assert_eq!(result.0, ErrorKind::TimedOut, "{}", result.1);
    assert!(result.1.contains("timed out"), "{}", result.1);
    assert!(result.2 >= Duration::from_millis(100));
}

#[test]
fn connecting_to_a_closed_port_is_refused() {
    let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let err = run(move || TcpStream::connect(addr).unwrap_err());
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused);
}

/// An even loopback port inside the kernel's ephemeral range (connects prefer even ones) that
/// nothing listens on now.
fn free_ephemeral_port() -> u16 {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").expect("the ephemeral range");
    let bounds: Vec<u16> = range.split_whitespace().map(|n| n.parse().unwrap()).collect();
    (bounds[0]..=bounds[1])
        .rev()
        .filter(|p| p % 2 == 0)
        .find(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).is_ok())
        .expect("a free even port")
}

#[test]
fn a_connect_that_reaches_its_own_source_port_is_refused_and_frees_the_port() {
    // Dialling a port in the ephemeral range that nothing listens on, again and again: the
    // kernel walks its even source ports, and one dial gets the destination as its source.
    let port = free_ephemeral_port();
    let (selves, others) = run(move || {
        let (mut selves, mut others) = (0, 0);
        for _ in 0..200_000 {
            match TcpStream::connect(("127.0.0.1", port)) {
                Err(e) if e.kind() == ErrorKind::ConnectionRefused && e.to_string().contains("own source port") => {
                    selves += 1;
                    break;
                }
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => others += 1,
                other => panic!("a dial to a port nothing listens on: {other:?}"),
            }
        }
        (selves, others)
    });
    assert_eq!(selves, 1, "no dial reached its own port in {others} tries");
    // Other tests' connections may hold the port as their source for a moment; a self-connection
    // left open would hold it for good.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut bound = std::net::TcpListener::bind(("127.0.0.1", port));
    while bound.is_err() && std::time::Instant::now() < deadline {
        #[expect(clippy::disallowed_methods, reason = "a plain test thread waits for other tests' sockets")]
        std::thread::sleep(Duration::from_millis(20));
        bound = std::net::TcpListener::bind(("127.0.0.1", port));
    }
    bound.expect("the port is free for a server again");
}

#[test]
fn reuse_port_listeners_share_a_port_and_the_kernel_spreads_connections() {
    const CLIENTS: usize = 200;
    let per_listener = run(|| {
        let first = TcpListener::bind_reuse_port("127.0.0.1:0").unwrap();
        let addr = first.local_addr().unwrap();
        let second = TcpListener::bind_reuse_port(addr).unwrap();
        assert_eq!(second.local_addr().unwrap(), addr);
        let (accepted_tx, accepted) = neverblock::sync::unbounded();
        for (index, listener) in [first, second].into_iter().enumerate() {
            let accepted_tx = accepted_tx.clone();
            // Still parked in `accept` when `run` returns: cancelled then.
            spawn(move || while listener.accept().is_ok() && accepted_tx.send(index).is_ok() {});
        }
        // Each from its own source port (the kernel's hash picks the listener), all held open.
        let _clients: Vec<_> = (0..CLIENTS).map(|_| TcpStream::connect(addr).unwrap()).collect();
        let mut per_listener = [0usize; 2];
        let _ = neverblock::timeout(Duration::from_secs(10), || {
            for _ in 0..CLIENTS {
                match accepted.recv() {
                    Ok(index) => per_listener[index] += 1,
                    Err(_) => break,
                }
            }
        });
        per_listener
    });
    assert_eq!(per_listener.iter().sum::<usize>(), CLIENTS, "every connection accepted once: {per_listener:?}");
    assert!(per_listener.iter().all(|&n| n > 0), "both listeners got connections: {per_listener:?}");
}

#[test]
fn host_names_resolve_and_literal_addresses_connect() {
    let (addrs, conn_peer, listen_addr) = run(|| {
        let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let addrs = ("localhost", port).resolve().unwrap();
        let conn = TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
        (addrs, conn.peer_addr().unwrap(), listener.local_addr().unwrap())
    });
    assert!(!addrs.is_empty() && addrs.iter().all(|a| a.ip().is_loopback() && a.port() == listen_addr.port()));
    assert_eq!(conn_peer, listen_addr);
}

#[test]
fn outside_a_runtime_sockets_block_the_thread_like_std() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let peer = std::thread::spawn(move || {
        let mut conn = std::net::TcpStream::connect(addr).unwrap();
        neverblock::sleep(Duration::from_millis(20));
        conn.write_all(b"late").unwrap();
    });
    let (mut conn, _) = listener.accept().unwrap();
    let mut buf = [0; 4];
    conn.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"late");
    peer.join().unwrap();
    conn.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    assert_eq!(conn.read(&mut buf).unwrap(), 0, "EOF after the peer closed");
    assert_eq!(conn.set_read_timeout(Some(Duration::ZERO)).unwrap_err().kind(), ErrorKind::InvalidInput);
}

#[test]
fn std_streams_convert_both_ways() {
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = std_listener.local_addr().unwrap();
    let echoed = run(move || {
        let listener = TcpListener::from_std(std_listener).unwrap();
        let server = spawn(move || {
            let (conn, _) = listener.accept().unwrap();
            let mut std_conn = conn.into_std().unwrap();
            let mut buf = [0; 3];
            std_conn.read_exact(&mut buf).unwrap();
            std_conn.write_all(&buf).unwrap();
        });
        let conn = TcpStream::from_std(std::net::TcpStream::connect(addr).unwrap()).unwrap();
        conn.set_nodelay(true).unwrap();
        assert!(conn.nodelay().unwrap());
        (&conn).write_all(b"abc").unwrap();
        let mut reply = [0; 3];
        (&conn).read_exact(&mut reply).unwrap();
        server.join().unwrap();
        reply
    });
    assert_eq!(&echoed, b"abc");
}

#[test]
fn udp_datagrams_round_trip_and_receives_time_out() {
    let (reply, timeout_kind) = run(|| {
        let server = UdpSocket::bind("127.0.0.1:0").unwrap();
        let server_addr = server.local_addr().unwrap();
        let echo = spawn(move || {
            let mut buf = [0; 64];
            let (n, from) = server.recv_from(&mut buf).unwrap();
            server.send_to(&buf[..n], from).unwrap();
        });
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        client.connect(server_addr).unwrap();
        client.send(b"marco").unwrap();
        let mut buf = [0; 64];
        let n = client.recv(&mut buf).unwrap();
        echo.join().unwrap();
        client.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        (buf[..n].to_vec(), client.recv(&mut buf).unwrap_err().kind())
    });
    assert_eq!(reply, b"marco");
    assert_eq!(timeout_kind, ErrorKind::TimedOut);
}

#[test]
fn unix_streams_connect_accept_and_stream() {
    let dir = std::env::temp_dir().join(format!("neverblock-net-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("echo.sock");
    let p = path.clone();
    let total = run(move || {
        let listener = UnixListener::bind(&p).unwrap();
        let server = spawn(move || {
            let mut served = 0;
            for _ in 0..50 {
                let (conn, _) = listener.accept().unwrap();
                served += spawn(move || std::io::copy(&mut (&conn).take(1 << 20), &mut &conn).unwrap()).join().unwrap();
            }
            served
        });
        let clients: Vec<_> = (0..50)
            .map(|_| {
                let p = p.clone();
                spawn(move || {
                    let conn = UnixStream::connect(&p).unwrap();
                    (&conn).write_all(&[1u8; 1000]).unwrap();
                    conn.shutdown(Shutdown::Write).unwrap();
                    let mut back = Vec::new();
                    (&conn).read_to_end(&mut back).unwrap();
                    back.len()
                })
            })
            .collect();
        let echoed: usize = clients.into_iter().map(|c| c.join().unwrap()).sum();
        assert_eq!(server.join().unwrap(), 50_000);
        echoed
    });
    std::fs::remove_dir_all(dir).unwrap();
    assert_eq!(total, 50_000);
}

#[test]
fn serve_survives_running_out_of_file_descriptors() {
    const LIMIT: usize = 40;
    const CLIENTS: usize = 100;
    let example = crate::support::example_path("fd_limit_server");
    let mut server = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -n {LIMIT} && exec \"$0\""))
        .arg(&example)
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the example under a low fd limit");
    let mut stderr = BufReader::new(server.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let port: u16 =
        line.trim().strip_prefix("port ").and_then(|p| p.parse().ok()).expect("the example prints its port");
    // More connections than the server has fds: the first ones are accepted, the rest wait.
    let mut conns: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            conn.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            conn.write_all(format!("{i}\n").as_bytes()).unwrap();
            conn
        })
        .collect();
    let mut answered = 0;
    // Read each reply, then close that connection: its fd frees a place for a waiting one.
    for (i, conn) in conns.drain(..).enumerate() {
        let mut reply = String::new();
        BufReader::new(&conn).read_line(&mut reply).unwrap();
        assert_eq!(reply, format!("{i}\n"));
        answered += 1;
    }
    server.kill().unwrap();
    server.wait().unwrap();
    let mut log = String::new();
    stderr.read_to_string(&mut log).unwrap();
    assert_eq!(answered, CLIENTS);
    assert!(log.contains("accept failed: Too many open files"), "the exhaustion was reported: {log}");
    assert!(log.contains("accepting again"), "the recovery was reported: {log}");
}

#[test]
fn send_file_streams_a_file_larger_than_the_socket_buffer_byte_for_byte() {
    let path = std::env::temp_dir().join(format!("neverblock-send-file-{}", std::process::id()));
    let content: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&path, &content).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    let (received, calls) = run(move || {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let reader = spawn(move || {
            let mut got = Vec::new();
            BufReader::new(client).read_to_end(&mut got).unwrap();
            got
        });
        // From offset 1, so the offset is honoured and not taken from the file position.
        let (mut offset, mut calls) = (1u64, 0);
        let end = file.metadata().unwrap().len();
        while offset < end {
            let sent = server.send_file(&file, offset, (end - offset) as usize).unwrap();
            assert!(sent > 0 && sent <= 512 * 1024, "each call sends a bounded, non-empty chunk: {sent}");
            offset += sent as u64;
            calls += 1;
        }
        assert_eq!(server.send_file(&file, end, 10).unwrap(), 0, "nothing past the end");
        drop(server);
        (reader.join().unwrap(), calls)
    });
    std::fs::remove_file(&path).unwrap();
    assert!(calls >= 6, "3 MB in chunks of at most 512 KiB: {calls} calls");
    assert!(received == content[1..], "the bytes arrive in order, unchanged");
}

#[test]
fn io_wait_readable_works_on_a_socket_its_owner_registered_already() {
    let got = run(|| {
        let (a, mut b) = UnixStream::pair().unwrap();
        // A read that waits registers `a` with the loop.
        a.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
        assert_eq!((&a).read(&mut [0]).unwrap_err().kind(), ErrorKind::TimedOut);
        let writer = spawn(move || b.write_all(b"x").unwrap());
        neverblock::io::wait_readable(&a).unwrap();
        writer.join().unwrap();
        let mut byte = [0];
        (&a).read_exact(&mut byte).unwrap();
        byte
    });
    assert_eq!(&got, b"x");
}

#[test]
fn kernel_tls_support_is_what_the_kernel_has() {
    // The kernel loads its `tls` module on demand when it has one; the probe has asked by now.
    let probed = neverblock::net::kernel_tls_support();
    let has_module = std::path::Path::new("/sys/module/tls").exists();
    assert_eq!(probed.is_ok(), has_module, "{probed:?}");
    if let Err(e) = probed {
        assert_eq!(e.raw_os_error(), Some(rustix::io::Errno::NOENT.raw_os_error()), "{e}");
    }
}

//! Loops pinned to CPUs, each taking the connections that arrive on its CPU, and passing new ones
//! on, and kept-alive ones between requests, once it has held more than its share for a while. On
//! loopback a connection arrives on the CPU of the thread that connects, so a client thread pinned
//! to a CPU stands for a network card's queue.

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{mpsc, Mutex};
use std::time::Duration;

use neverblock::runtime::{pinned_cpu, thread_index};
use neverblock_http::server::{Request, Response, Server};
use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};

use crate::serving::{read_reply, Running, PATIENCE};

/// The first two CPUs this process may run on, or `None` (and a note) with fewer.
fn two_cpus() -> Option<[usize; 2]> {
    let allowed = sched_getaffinity(None).unwrap();
    let cpus: Vec<usize> = (0..CpuSet::MAX_CPU).filter(|&cpu| allowed.is_set(cpu)).take(2).collect();
    if cpus.len() < 2 {
        eprintln!("skipped: one CPU allowed, so no loop is pinned");
        return None;
    }
    Some([cpus[0], cpus[1]])
}

/// A server of two loops answering each request with its loop's CPU and number, once both loops
/// accept (a connection that comes before its loop has marked its listener is spread by hash).
fn telling_where(pin: bool) -> Running {
    let (ready, serving) = mpsc::channel();
    let ready = Mutex::new(ready);
    let builder = Server::builder().workers(2).pin_loops(pin).on_ready(move || ready.lock().unwrap().send(()).unwrap());
    let running = Running::with(builder, |_: &mut Request<'_>| {
        Response::new(200).body(format!("{:?} {}", pinned_cpu(), thread_index()))
    });
    serving.recv_timeout(PATIENCE).unwrap();
    running
}

/// What the server says of where it answered a request on `stream`, kept alive.
fn where_served(stream: &mut BufReader<TcpStream>) -> String {
    stream.get_mut().write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    read_reply(stream, false).text()
}

/// On a thread pinned to `cpu`: opens `count` connections to `addr`, one after another, and asks
/// each where it is served; returns the connections (kept open) and the answers.
fn connect_from(cpu: usize, addr: SocketAddr, count: usize) -> (Vec<BufReader<TcpStream>>, Vec<String>) {
    std::thread::spawn(move || {
        let mut only = CpuSet::new();
        only.set(cpu);
        sched_setaffinity(None, &only).unwrap();
        let mut streams = Vec::new();
        let mut answers = Vec::new();
        for _ in 0..count {
            let stream = TcpStream::connect(addr).unwrap();
            stream.set_read_timeout(Some(PATIENCE)).unwrap();
            let mut stream = BufReader::new(stream);
            answers.push(where_served(&mut stream));
            streams.push(stream);
        }
        (streams, answers)
    })
    .join()
    .unwrap()
}

#[test]
fn each_connection_is_served_by_the_loop_pinned_to_the_cpu_it_arrived_on() {
    let Some(cpus) = two_cpus() else { return };
    let server = telling_where(true);
    // From each CPU in turn, so that the loops stay even; 16 connections spread by a hash would
    // all land on their CPU's loop once in 65,536 runs.
    let mut kept = Vec::new();
    for _ in 0..8 {
        for (index, cpu) in cpus.into_iter().enumerate() {
            let (streams, answers) = connect_from(cpu, server.addr, 1);
            assert_eq!(answers, [format!("Some({cpu}) {index}")], "from CPU {cpu}");
            kept.extend(streams);
        }
    }
}

#[test]
fn with_pinning_off_no_loop_is_pinned() {
    let Some(cpus) = two_cpus() else { return };
    let server = telling_where(false);
    let (_kept, answers) = connect_from(cpus[0], server.addr, 8);
    assert!(answers.iter().all(|a| a.starts_with("None ")), "{answers:?}");
}

/// Longer than a loop waits, holding more than its share, before it passes connections on.
const UNEVEN_FOR_A_WHILE: Duration = Duration::from_millis(50);

/// A server of two pinned loops, the first holding three connections from its CPU, more than its
/// share (two more than the other's none) for a while: the server, the connections, and what
/// each loop says of itself.
struct Uneven {
    server: Running,
    cpu: usize,
    kept: Vec<BufReader<TcpStream>>,
    here: String,
    there: String,
}

impl Uneven {
    fn make() -> Option<Uneven> {
        let cpus = two_cpus()?;
        let server = telling_where(true);
        let (here, there) = (format!("Some({}) 0", cpus[0]), format!("Some({}) 1", cpus[1]));
        // Each answered at once where it arrived, however uneven the loops.
        let (kept, answers) = connect_from(cpus[0], server.addr, 3);
        assert!(answers.iter().all(|a| *a == here), "{answers:?}");
        let_the_imbalance_last();
        Some(Uneven { server, cpu: cpus[0], kept, here, there })
    }
}

#[expect(clippy::disallowed_methods, reason = "the test's own thread, outside any runtime: the server runs apart")]
fn let_the_imbalance_last() {
    std::thread::sleep(UNEVEN_FOR_A_WHILE);
}

#[test]
fn a_loop_that_holds_more_than_its_share_for_a_while_passes_new_connections_to_the_other() {
    let Some(Uneven { server, cpu, here, there, kept: _kept }) = Uneven::make() else { return };
    // The imbalance has lasted: the next connection goes to the other loop at once. Then three
    // against one is within a loop's share, and the one after stays where it arrived.
    let (_passed, answers) = connect_from(cpu, server.addr, 1);
    assert_eq!(answers, [there], "passed on");
    let (_back, answers) = connect_from(cpu, server.addr, 1);
    assert_eq!(answers, [here], "even again: served where it arrived");
}

#[test]
fn a_loop_that_holds_more_than_its_share_for_a_while_moves_kept_alive_connections_between_requests() {
    let Some(Uneven { mut kept, here, there, server: _server, cpu: _ }) = Uneven::make() else { return };
    // Two requests sent at once: the second is read with the first, so the connection stays for it.
    kept[0].get_mut().write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let pipelined = [read_reply(&mut kept[0], false).text(), read_reply(&mut kept[0], false).text()];
    assert_eq!(pipelined, [here.clone(), here.clone()], "both answered where they were read");
    // After the second, with nothing read ahead, it moves, and serves its next request on the
    // other loop; two against one is even, so the others stay.
    assert_eq!(where_served(&mut kept[0]), there, "its next request, on the other loop");
    for stream in &mut kept[1..] {
        assert_eq!(where_served(stream), here);
    }
    assert_eq!(where_served(&mut kept[0]), there, "and it stays there");
}

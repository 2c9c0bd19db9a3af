//! `std::net`, `std::thread::sleep` and libc's own calls on fibers.

use std::cell::Cell;
use std::io::{ErrorKind, Read, Write};
use std::mem::ManuallyDrop;
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::support::{on_fibers, overlapped, silent_server, slow_server, DELAY, FIBERS};

#[test]
fn every_hook_is_reached_from_shared_libraries() {
    let check = neverblock::hooks::check();
    eprintln!("{check}");
    assert!(check.all_reached(), "not reached: {:?}", check.not_reached().collect::<Vec<_>>());
}

#[test]
fn std_reads_from_a_slow_server_overlap_while_a_ticker_runs() {
    let addr = slow_server(DELAY);
    let (elapsed, ticked) = on_fibers(move || {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        assert!(answer.ends_with("\r\n\r\nok"), "{answer}");
    });
    assert!(overlapped(elapsed), "{FIBERS} reads of a {DELAY:?} server took {elapsed:?}");
    assert!(ticked, "the ticker fiber ran while every reader was parked");
}

#[test]
fn thread_sleep_in_fibers_takes_one_sleep() {
    #[allow(clippy::disallowed_methods)] // the call under test: on a fiber it parks
    let (elapsed, ticked) = on_fibers(|| std::thread::sleep(DELAY));
    assert!(overlapped(elapsed), "{FIBERS} sleeps of {DELAY:?} took {elapsed:?}");
    assert!(ticked, "the ticker fiber ran while every sleeper was parked");
}

#[test]
fn a_caller_that_set_non_blocking_still_gets_would_block() {
    let addr = silent_server();
    neverblock::run(move || {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.set_nonblocking(true).unwrap();
        let err = stream.read(&mut [0; 8]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::WouldBlock);
        let (mut a, _b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        assert_eq!(a.read(&mut [0; 8]).unwrap_err().kind(), ErrorKind::WouldBlock);
        stream.set_nonblocking(false).unwrap();
        stream.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        assert_eq!(stream.read(&mut [0; 8]).unwrap_err().kind(), ErrorKind::WouldBlock, "blocking again: parks");
    });
}

#[test]
fn a_read_timeout_set_with_so_rcvtimeo_ends_the_park() {
    let addr = silent_server();
    neverblock::run(move || {
        let ticks = Rc::new(Cell::new(0));
        let counter = ticks.clone();
        let ticker = neverblock::spawn(move || loop {
            neverblock::sleep(Duration::from_millis(5));
            counter.set(counter.get() + 1);
        });
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(DELAY)).unwrap();
        let start = Instant::now();
        let err = stream.read(&mut [0; 8]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::WouldBlock, "EAGAIN, as the kernel ends a timed-out read");
        assert!(start.elapsed() >= DELAY);
        assert!(ticks.get() > 0, "the fiber parked: the ticker ran meanwhile");
        ticker.cancel();
    });
}

#[test]
fn a_plain_thread_still_blocks_in_the_real_call() {
    let (mut a, mut b) = UnixStream::pair().unwrap();
    let writer = std::thread::spawn(move || {
        #[allow(clippy::disallowed_methods)] // a plain thread: the real sleep
        std::thread::sleep(Duration::from_millis(50));
        b.write_all(b"late").unwrap();
    });
    let mut buf = [0; 4];
    a.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"late", "the blocking read waited for the bytes");
    writer.join().unwrap();
    // A loop's blocking pool is plain threads too: the timeout is the kernel's there.
    let addr = silent_server();
    let err = neverblock::run(move || {
        neverblock::spawn_blocking(move || {
            let mut stream = TcpStream::connect(addr).unwrap();
            stream.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
            stream.read(&mut [0; 8]).unwrap_err().kind()
        })
    });
    assert_eq!(err, ErrorKind::WouldBlock);
}

#[test]
fn closing_an_fd_wakes_the_fiber_parked_on_it() {
    let addr = silent_server();
    neverblock::run(move || {
        let stream = TcpStream::connect(addr).unwrap();
        let fd = stream.as_raw_fd();
        // The reader's stream is closed under it by the other fiber, with libc's close.
        let stream = ManuallyDrop::new(stream);
        let reader = neverblock::spawn(move || (&*stream).read(&mut [0; 8]).unwrap_err().raw_os_error());
        neverblock::yield_now();
        // SAFETY: `fd` is the reader's stream, which is never dropped (ManuallyDrop): only this closes it.
        assert_eq!(unsafe { libc::close(fd) }, 0);
        assert_eq!(reader.join().unwrap(), Some(libc::EBADF));
    });
}

#[test]
fn errno_is_the_callers_across_a_park() {
    neverblock::run(|| {
        let (a, mut b) = UnixStream::pair().unwrap();
        let other = neverblock::spawn(move || {
            set_errno(libc::ENOENT);
            neverblock::yield_now();
            b.write_all(b"x").unwrap();
            set_errno(libc::EPIPE);
        });
        set_errno(libc::EEXIST);
        let mut byte = [0u8; 1];
        // SAFETY: one byte of room for one byte.
        let n = unsafe { libc::read(a.as_raw_fd(), byte.as_mut_ptr().cast(), 1) };
        assert_eq!(n, 1);
        assert_eq!(errno(), libc::EEXIST, "the read parked while the other fiber set errno");
        other.join().unwrap();
    });
}

#[test]
fn poll_waits_for_any_of_many_fds_with_duplicates_and_any_mask() {
    neverblock::run(|| {
        let pairs: Vec<_> = (0..8).map(|_| UnixStream::pair().unwrap()).collect();
        let mut set: Vec<libc::pollfd> =
            pairs.iter().map(|(a, _)| libc::pollfd { fd: a.as_raw_fd(), events: libc::POLLIN, revents: 0 }).collect();
        let last = pairs[7].0.as_raw_fd();
        set.push(libc::pollfd { fd: last, events: libc::POLLIN | libc::POLLPRI | libc::POLLRDHUP, revents: 0 });
        set.push(libc::pollfd { fd: -1, events: libc::POLLIN, revents: 0 });
        let mut writer = pairs[7].1.try_clone().unwrap();
        let ran = Rc::new(Cell::new(false));
        let other = {
            let ran = ran.clone();
            neverblock::spawn(move || {
                ran.set(true);
                writer.write_all(b"x").unwrap();
            })
        };
        // SAFETY: `set` holds `set.len()` pollfds.
        let ready = unsafe { libc::poll(set.as_mut_ptr(), set.len() as libc::nfds_t, 10_000) };
        assert!(ran.get(), "poll parked the fiber: the writer ran");
        assert_eq!(ready, 2, "the fd and its duplicate entry: {set:?}");
        assert_eq!(set[7].revents, libc::POLLIN);
        assert_eq!(set[8].revents, libc::POLLIN);
        assert!(set[..7].iter().chain(&set[9..]).all(|p| p.revents == 0), "{set:?}");
        other.join().unwrap();
        // SAFETY: as above; a timeout with nothing ready returns 0 once it passes.
        assert_eq!(unsafe { libc::poll(set.as_mut_ptr(), 7, 20) }, 0);
    });
}

#[test]
fn select_waits_on_a_fiber_and_leaves_the_ready_fd_set() {
    neverblock::run(|| {
        let (a, mut b) = UnixStream::pair().unwrap();
        let fd = a.as_raw_fd();
        let writer = neverblock::spawn(move || b.write_all(b"x").unwrap());
        // SAFETY: an fd_set of ours, emptied and given one fd below FD_SETSIZE.
        let mut readable = unsafe {
            let mut set = std::mem::zeroed::<libc::fd_set>();
            libc::FD_ZERO(&mut set);
            libc::FD_SET(fd, &mut set);
            set
        };
        let mut timeout = libc::timeval { tv_sec: 10, tv_usec: 0 };
        // SAFETY: our set and timeout.
        let ready =
            unsafe { libc::select(fd + 1, &mut readable, std::ptr::null_mut(), std::ptr::null_mut(), &mut timeout) };
        assert_eq!(ready, 1);
        // SAFETY: our set.
        assert!(unsafe { libc::FD_ISSET(fd, &readable) });
        assert!(timeout.tv_sec < 10 || timeout.tv_usec > 0, "the time left is written back");
        writer.join().unwrap();
    });
}

#[test]
fn a_name_lookup_in_a_fiber_runs_and_answers() {
    let found = neverblock::run(|| ("localhost", 80).to_socket_addrs().map(|addrs| addrs.count()));
    assert!(found.unwrap() > 0);
}

#[test]
fn a_listener_in_blocking_mode_accepts_on_a_fiber_while_others_run() {
    neverblock::run(|| {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let client = neverblock::spawn(move || {
            let mut stream = TcpStream::connect(addr).unwrap();
            stream.write_all(b"hi").unwrap();
        });
        let (mut conn, _) = listener.accept().unwrap();
        let mut buf = [0; 2];
        conn.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"hi");
        client.join().unwrap();
    });
}

#[test]
fn connect_timeout_and_udp_round_trips_work_on_fibers() {
    neverblock::run(|| {
        let addr = silent_server();
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
        assert!(!stream.peer_addr().unwrap().ip().is_unspecified());
        let a = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = a.local_addr().unwrap();
        let sender = neverblock::spawn(move || b.send_to(b"datagram", to).unwrap());
        let mut buf = [0; 16];
        let (n, _) = a.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"datagram");
        sender.join().unwrap();
    });
}

#[test]
fn a_file_read_on_a_fiber_goes_straight_through() {
    let text = neverblock::run(|| std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")));
    assert!(text.unwrap().contains("hooks"));
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap()
}

fn set_errno(value: i32) {
    // SAFETY: this thread's errno.
    unsafe { *libc::__errno_location() = value };
}

/// Other fibers' progress, and what the handler found.
static OTHERS_RAN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static HANDLER_SAW_OTHERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(usize::MAX);

extern "C" fn sleeps_in_handler(_: libc::c_int) {
    let before = OTHERS_RAN.load(std::sync::atomic::Ordering::SeqCst);
    // SAFETY: usleep takes a plain value; inside a handler it is libc's, blocking the thread.
    unsafe { libc::usleep(20_000) };
    let during = OTHERS_RAN.load(std::sync::atomic::Ordering::SeqCst) - before;
    HANDLER_SAW_OTHERS.store(during, std::sync::atomic::Ordering::SeqCst);
}

#[test]
fn a_signal_handler_on_a_fibers_thread_makes_the_real_call() {
    use std::sync::atomic::Ordering::SeqCst;
    neverblock::run(|| {
        let other = neverblock::spawn(|| loop {
            OTHERS_RAN.fetch_add(1, SeqCst);
            neverblock::yield_now();
        });
        neverblock::yield_now();
        let handler = sleeps_in_handler as extern "C" fn(libc::c_int) as libc::sighandler_t;
        // SAFETY: a handler that only sleeps and stores, installed for SIGUSR2, raised on this thread.
        unsafe {
            assert_ne!(libc::signal(libc::SIGUSR2, handler), libc::SIG_ERR);
            assert_eq!(libc::raise(libc::SIGUSR2), 0);
        }
        assert_eq!(HANDLER_SAW_OTHERS.load(SeqCst), 0, "the handler's usleep blocked the thread: no fiber ran");
        // SAFETY: asks for the installed action into a sigaction of ours.
        let installed = unsafe {
            let mut old = std::mem::zeroed::<libc::sigaction>();
            libc::sigaction(libc::SIGUSR2, std::ptr::null(), &mut old);
            libc::signal(libc::SIGUSR2, libc::SIG_DFL);
            old.sa_sigaction
        };
        assert_eq!(installed, handler, "the caller sees its own handler");
        other.cancel();
    });
}

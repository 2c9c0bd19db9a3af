//! The bridge: `block_on` on fibers (wakes from anywhere, timeouts, cancellation)
//! and `AsyncIo` against the blocking-style sockets.

use std::cell::Cell;
use std::future::{poll_fn, Future};
use std::io::{Read, Write};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use neverblock::bridge::AsyncIo;
use neverblock::net::{TcpListener, TcpStream};
use neverblock::runtime::{spawn_on, Builder};
use neverblock::{block_on, Elapsed};

/// A one-value channel as a future: the sender may live on any thread.
#[derive(Clone, Default)]
struct Slot(Arc<Mutex<(Option<u32>, Option<Waker>)>>);

impl Slot {
    fn send(&self, value: u32) {
        let waker = {
            let mut slot = self.0.lock().unwrap();
            slot.0 = Some(value);
            slot.1.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Waits until a receiver has registered its waker (so the send wakes a parked one).
    fn awaited(&self) -> bool {
        self.0.lock().unwrap().1.is_some()
    }

    fn recv(&self) -> impl Future<Output = u32> + '_ {
        poll_fn(move |cx| {
            let mut slot = self.0.lock().unwrap();
            match slot.0.take() {
                Some(value) => Poll::Ready(value),
                None => {
                    slot.1 = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
    }
}

/// Bounds a test's wait: a lost wake-up fails instead of hanging.
fn bounded<T>(f: impl FnOnce() -> T) -> T {
    neverblock::timeout(Duration::from_secs(20), f).expect("finished in time")
}

#[test]
fn block_on_returns_a_ready_futures_output_inside_and_outside_a_runtime() {
    assert_eq!(block_on(async { 1 + 1 }), Ok(2));
    assert_eq!(neverblock::run(|| block_on(async { "in a fiber" })), Ok("in a fiber"));
}

#[test]
fn a_future_woken_by_another_fiber_of_the_same_loop_completes() {
    neverblock::run(|| {
        let slot = Slot::default();
        let sender = slot.clone();
        neverblock::spawn(move || {
            while !sender.awaited() {
                neverblock::yield_now();
            }
            sender.send(7);
        });
        assert_eq!(bounded(|| block_on(slot.recv())), Ok(7));
    });
}

#[test]
fn a_future_woken_from_another_loops_thread_completes() {
    let got = Builder::new().threads(2).run(|| {
        let slot = Slot::default();
        let sender = slot.clone();
        let other = spawn_on(1, move || {
            while !sender.awaited() {
                neverblock::sleep(Duration::from_millis(1));
            }
            sender.send(8);
        });
        let got = bounded(|| block_on(slot.recv()));
        other.join().unwrap();
        got
    });
    assert_eq!(got, Ok(8));
}

#[test]
fn a_future_woken_from_a_plain_thread_completes_in_a_fiber_and_outside_a_runtime() {
    fn send_from_a_thread(slot: &Slot, value: u32) -> std::thread::JoinHandle<()> {
        let sender = slot.clone();
        std::thread::spawn(move || {
            while !sender.awaited() {
                std::thread::yield_now();
            }
            sender.send(value);
        })
    }
    let got = neverblock::run(|| {
        let slot = Slot::default();
        let thread = send_from_a_thread(&slot, 9);
        let got = bounded(|| block_on(slot.recv()));
        thread.join().unwrap();
        got
    });
    assert_eq!(got, Ok(9));
    let slot = Slot::default();
    let thread = send_from_a_thread(&slot, 10);
    assert_eq!(block_on(slot.recv()), Ok(10));
    thread.join().unwrap();
}

#[test]
fn a_wake_during_the_poll_is_not_lost() {
    /// Wakes itself and is pending on its first poll; ready on its second.
    struct WakesItself(bool);
    impl Future for WakesItself {
        type Output = &'static str;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<&'static str> {
            if std::mem::replace(&mut self.0, true) {
                return Poll::Ready("polled again");
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
    neverblock::run(|| assert_eq!(bounded(|| block_on(WakesItself(false))), Ok("polled again")));
    assert_eq!(block_on(WakesItself(false)), Ok("polled again"));
}

#[test]
fn many_fibers_parked_in_block_on_leave_the_loop_to_the_others() {
    neverblock::run(|| {
        let slots: Vec<Slot> = (0..100).map(|_| Slot::default()).collect();
        let waiting: Vec<_> =
            slots.iter().cloned().map(|slot| neverblock::spawn(move || bounded(|| block_on(slot.recv())))).collect();
        let ticks = Rc::new(Cell::new(0));
        let counter = {
            let ticks = ticks.clone();
            neverblock::spawn(move || {
                for _ in 0..50 {
                    ticks.set(ticks.get() + 1);
                    neverblock::yield_now();
                }
            })
        };
        counter.join().unwrap();
        assert_eq!(ticks.get(), 50, "the counter ran while 100 fibers waited in block_on");
        assert!(slots.iter().all(Slot::awaited), "every block_on is parked on its future");
        for (i, slot) in slots.iter().enumerate() {
            slot.send(i as u32);
        }
        let got: Vec<u32> = waiting.into_iter().map(|h| h.join().unwrap().unwrap()).collect();
        assert_eq!(got, (0..100).collect::<Vec<u32>>());
    });
}

#[test]
fn a_timeout_ends_block_on_with_elapsed_and_drops_the_future() {
    struct Dropped(Rc<Cell<bool>>);
    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.set(true);
        }
    }
    neverblock::run(|| {
        let dropped = Rc::new(Cell::new(false));
        let guard = Dropped(dropped.clone());
        let future = async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        };
        let result = neverblock::timeout(Duration::from_millis(10), || {
            assert_eq!(block_on(future), Err(Elapsed), "block_on itself says so");
        });
        assert_eq!(result, Err(Elapsed));
        assert!(dropped.get(), "the pending future was dropped when block_on gave up");
    });
}

#[test]
fn a_cancelled_task_unwinds_out_of_block_on_and_its_waker_stays_harmless() {
    neverblock::run(|| {
        let dropped = Arc::new(AtomicBool::new(false));
        let slot = Slot::default();
        let task = {
            let (slot, dropped) = (slot.clone(), dropped.clone());
            neverblock::spawn(move || {
                struct SetOnDrop(Arc<AtomicBool>);
                impl Drop for SetOnDrop {
                    fn drop(&mut self) {
                        self.0.store(true, Ordering::SeqCst);
                    }
                }
                let _set = SetOnDrop(dropped);
                block_on(slot.recv())
            })
        };
        while !slot.awaited() {
            neverblock::yield_now();
        }
        task.cancel();
        assert!(task.join().is_err(), "cancelled while parked in block_on");
        assert!(dropped.load(Ordering::SeqCst), "its stack unwound");
        slot.send(1); // the waker the cancelled block_on left behind
        neverblock::yield_now();
        assert_eq!(bounded(|| block_on(async { 2 })), Ok(2), "the loop goes on");
    });
}

#[test]
fn a_waker_kept_after_block_on_returned_may_be_woken_from_anywhere() {
    neverblock::run(|| {
        let kept = block_on(poll_fn(|cx| Poll::Ready(cx.waker().clone()))).unwrap();
        kept.wake_by_ref();
        let from_thread = kept.clone();
        std::thread::spawn(move || from_thread.wake()).join().unwrap();
        neverblock::sleep(Duration::from_millis(5));
        let slot = Slot::default();
        slot.send(3);
        assert_eq!(block_on(slot.recv()), Ok(3), "a later block_on is not disturbed");
    });
}

/// A pattern of `len` bytes no shorter period would repeat by accident.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ (i >> 12) as u8).collect()
}

#[test]
fn eight_mib_echo_between_blocking_style_io_and_the_async_adapter() {
    const LEN: usize = 8 << 20;
    neverblock::run(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        // The echo side in plain blocking style.
        let echo = neverblock::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut buf = vec![0; 64 << 10];
            loop {
                let n = conn.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                conn.write_all(&buf[..n]).unwrap();
            }
        });
        let io = AsyncIo::new(TcpStream::connect(addr).unwrap());
        let sent = pattern(LEN);
        let mut got = Vec::with_capacity(LEN);
        // One future writes and reads at once: it must not wait on one while the other could go.
        let (mut written, mut closed) = (0, false);
        let mut buf = vec![0; 64 << 10];
        let echoed = bounded(|| {
            block_on(poll_fn(|cx| {
                while written < LEN {
                    match io.poll_write(cx, &sent[written..]) {
                        Poll::Ready(n) => written += n.unwrap(),
                        Poll::Pending => break,
                    }
                }
                if written == LEN && !closed {
                    io.shutdown_write().unwrap();
                    closed = true;
                }
                loop {
                    match io.poll_read(cx, &mut buf) {
                        Poll::Ready(Ok(0)) => return Poll::Ready(()),
                        Poll::Ready(n) => got.extend_from_slice(&buf[..n.unwrap()]),
                        Poll::Pending => return Poll::Pending,
                    }
                }
            }))
        });
        assert_eq!(echoed, Ok(()));
        echo.join().unwrap();
        assert_eq!(got.len(), LEN);
        assert!(got == sent, "the echo is byte-exact");
    });
}

/// Bytes that have arrived at `socket` and are not read yet.
fn arrived(socket: &TcpStream) -> usize {
    rustix::io::ioctl_fionread(socket).unwrap() as usize
}

#[test]
fn a_batching_socket_holds_a_large_writes_last_segment_until_pushed_and_sends_small_ones_at_once() {
    neverblock::run(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = Rc::new(TcpStream::connect(listener.local_addr().unwrap()).unwrap());
        client.set_nodelay(true).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        let io = AsyncIo::batching(client.clone());
        let write = |bytes: &[u8]| bounded(|| block_on(poll_fn(|cx| io.poll_write(cx, bytes)))).unwrap().unwrap();
        // Loopback delivers a segment within the sending call: what is not there was held back.
        let small = pattern(100);
        assert_eq!(write(&small), small.len());
        assert_eq!(arrived(&server), small.len(), "a small write leaves at once");
        let mut got = vec![0; small.len()];
        server.read_exact(&mut got).unwrap();
        let large = pattern(20_000);
        assert_eq!(write(&large), large.len());
        assert_eq!(arrived(&server), 0, "a large write's partial segment waits for more");
        client.push().unwrap();
        assert_eq!(arrived(&server), large.len(), "the push sent it");
        let mut got = vec![0; large.len()];
        server.read_exact(&mut got).unwrap();
        assert!(got == large);
        // A push with nothing held is harmless.
        client.push().unwrap();
    });
}

#[test]
fn the_tokio_and_futures_traits_move_bytes_both_ways() {
    use std::io::IoSlice;

    fn drive<T>(f: impl FnMut(&mut Context<'_>) -> Poll<T>) -> T {
        bounded(|| block_on(poll_fn(f))).unwrap()
    }
    neverblock::run(|| {
        let (a, b) = neverblock::net::UnixStream::pair().unwrap();
        let (mut a, mut b) = (AsyncIo::new(a), AsyncIo::new(b));
        let reader = neverblock::spawn(move || {
            let mut buf = [0; 16];
            let mut storage = [0u8; 16];
            let n = drive(|cx| futures_io::AsyncRead::poll_read(Pin::new(&mut b), cx, &mut buf)).unwrap();
            let mut read_buf = tokio::io::ReadBuf::new(&mut storage);
            drive(|cx| tokio::io::AsyncRead::poll_read(Pin::new(&mut b), cx, &mut read_buf)).unwrap();
            let mut got = buf[..n].to_vec();
            got.extend_from_slice(read_buf.filled());
            got
        });
        neverblock::sleep(Duration::from_millis(2)); // the reader parks first
        let bufs = [IoSlice::new(b"fut"), IoSlice::new(b"ures")];
        let n = drive(|cx| futures_io::AsyncWrite::poll_write_vectored(Pin::new(&mut a), cx, &bufs)).unwrap();
        assert_eq!(n, 7);
        neverblock::sleep(Duration::from_millis(2));
        drive(|cx| tokio::io::AsyncWrite::poll_write(Pin::new(&mut a), cx, b"tokio")).unwrap();
        drive(|cx| tokio::io::AsyncWrite::poll_shutdown(Pin::new(&mut a), cx)).unwrap();
        assert_eq!(reader.join().unwrap(), b"futurestokio");
    });
}

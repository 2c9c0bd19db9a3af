//! A program whose fibers deadlock: the runtime reports it and names each fiber,
//! what it waits on and where it was spawned, instead of hanging.
//!
//! `cargo run --example deadlock mutex` (two fibers take two Mutexes in opposite
//! orders) or `cargo run --example deadlock channel` (two fibers each wait for a
//! message only the other could send) ends with a panic whose message starts
//! "neverblock: every fiber is parked and nothing can wake one (deadlock)".

use neverblock::sync::{unbounded, Mutex};
use std::rc::Rc;

fn main() {
    let scenario = std::env::args().nth(1).unwrap_or_else(|| "mutex".into());
    neverblock::run(move || match scenario.as_str() {
        "channel" => {
            let (to_main, from_worker) = unbounded::<u32>();
            let (to_worker, from_main) = unbounded::<u32>();
            let worker = neverblock::spawn_named("echo", move || {
                let n = from_main.recv().unwrap();
                to_main.send(n).unwrap();
            });
            // Waits for the echo before sending it anything.
            let n = from_worker.recv().unwrap();
            to_worker.send(n).unwrap();
            worker.join().unwrap();
        }
        _ => {
            let (a, b) = (Rc::new(Mutex::new(0)), Rc::new(Mutex::new(0)));
            let (a2, b2) = (a.clone(), b.clone());
            let left = neverblock::spawn_named("left", move || {
                let _a = a.lock().unwrap();
                neverblock::yield_now();
                let _b = b.lock().unwrap();
            });
            let right = neverblock::spawn_named("right", move || {
                let _b = b2.lock().unwrap();
                neverblock::yield_now();
                let _a = a2.lock().unwrap();
            });
            left.join().unwrap();
            right.join().unwrap();
        }
    });
}

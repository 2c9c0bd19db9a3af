//! Where `mprotect` guard pages stop: creating fibers until `vm.max_map_count` would
//! be passed returns a clear error instead of crashing.
//!
//! `cargo run --example map_count_limit` prints how many fibers fit and the error.

use neverblock::fiber::{Builder, Fiber, StackError};

fn main() {
    let mut fibers: Vec<Fiber<u8>> = Vec::new();
    let error = loop {
        match Builder::new().mprotect_guards(true).build(|x: u8| x) {
            Ok(fiber) => fibers.push(fiber),
            Err(e) => break e,
        }
    };
    let limit = matches!(error, StackError::MapCountLimit { .. });
    eprintln!("fibers: {}", fibers.len());
    eprintln!("error: {error}");
    eprintln!("map count limit: {limit}");
    // The process is still healthy: give the stacks back and make one more fiber.
    fibers.clear();
    let again = Builder::new().mprotect_guards(true).build(|x: u8| x + 1).expect("stacks were freed");
    eprintln!("after freeing: {}", again.resume(1).expect("fiber runs"));
}

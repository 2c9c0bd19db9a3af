//! What a fiber that runs off its stack does: the process stops with a message.
//!
//! `cargo run --example stack_overflow` (add `mprotect` to use `mprotect` guard pages)
//! prints "neverblock: a fiber's stack overflowed (stack size 16 KiB) …" and aborts,
//! naming `fiber::Builder::stack_size`; with `task`, a runtime task overflows its
//! stack and the message names the runtime's settings instead.

use neverblock::fiber::Builder;

fn recurse(depth: u64) -> u64 {
    let pad = std::hint::black_box([depth; 64]);
    if depth == u64::MAX {
        return 0;
    }
    recurse(depth + 1) + pad[3]
}

fn main() {
    if std::env::args().any(|a| a == "task") {
        neverblock::runtime::Builder::new().stack_size(16 * 1024).run(|| recurse(0));
        eprintln!("unreachable: the task returned");
        return;
    }
    let mprotect = std::env::args().any(|a| a == "mprotect");
    let fiber = Builder::new()
        .stack_size(16 * 1024)
        .mprotect_guards(mprotect)
        .build(|n: u64| recurse(n))
        .expect("a stack is available");
    let _ = fiber.resume(0);
    eprintln!("unreachable: the fiber returned");
}

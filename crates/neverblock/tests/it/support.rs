//! Helpers shared by the integration tests.

use std::process::{Command, Output};

/// Runs one of this crate's examples (cargo builds them with the tests) and waits.
pub fn run_example(name: &str, args: &[&str]) -> Output {
    let test_exe = std::env::current_exe().expect("test binary path");
    let examples = test_exe.parent().and_then(|deps| deps.parent()).expect("target dir").join("examples");
    let path = examples.join(name);
    Command::new(&path)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e} (cargo test builds examples)", path.display()))
}

/// How many mappings this process holds.
pub fn map_count() -> usize {
    std::fs::read_to_string("/proc/self/maps").expect("read /proc/self/maps").lines().count()
}

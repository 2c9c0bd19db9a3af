//! Helpers shared by the integration tests.

use std::cell::Cell;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::rc::Rc;
use std::sync::{Mutex, MutexGuard};

/// Runs one of this crate's examples, building it first if this test run did not.
pub(crate) fn run_example(name: &str, args: &[&str]) -> Output {
    let path = example_path(name);
    Command::new(&path).args(args).output().unwrap_or_else(|e| panic!("run {}: {e}", path.display()))
}

/// Like [`run_example`], killing the example if it runs longer than `seconds`
/// (coreutils' `timeout`), so a program that hangs fails the test instead.
pub(crate) fn run_example_bounded(name: &str, args: &[&str], seconds: u32) -> Output {
    let path = example_path(name);
    Command::new("timeout")
        .args(["--kill-after=5", &seconds.to_string()])
        .arg(&path)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {} under timeout: {e}", path.display()))
}

/// The path of one of this crate's examples, built first if this test run did not.
pub(crate) fn example_path(name: &str) -> PathBuf {
    let test_exe = std::env::current_exe().expect("test binary path");
    let profile_dir = test_exe.parent().and_then(|deps| deps.parent()).expect("target dir");
    let path: PathBuf = profile_dir.join("examples").join(name);
    // One build at a time: tests run in parallel, and two cargo builds of the examples'
    // dependencies into one target directory have been seen to trip over each other.
    static BUILDING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = BUILDING.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if !path.exists() {
        let release = profile_dir.ends_with("release");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(cargo);
        build.args(["build", "-q", "-p", "neverblock", "--example", name]);
        if release {
            build.arg("--release");
        }
        assert!(build.status().expect("run cargo").success(), "building example {name}");
    }
    path
}

/// How many mappings this process holds.
pub(crate) fn map_count() -> usize {
    std::fs::read_to_string("/proc/self/maps").expect("read /proc/self/maps").lines().count()
}

/// Serialises the tests that count this process's mappings or add many of them.
pub(crate) fn mappings_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Counts its drops into a shared counter.
pub(crate) struct Tracked(pub(crate) Rc<Cell<u32>>);

impl Drop for Tracked {
    fn drop(&mut self) {
        self.0.set(self.0.get() + 1);
    }
}

//! Peer programs (MRI Ruby, Go) run in the same invocation, each skipped with a
//! note when its runtime is not installed. Their sources live in `peers/` at the
//! repository root and are compiled into this binary, so `--peers` works anywhere.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use super::Row;

const RUBY_FIBER_CHAIN: &str = include_str!("../../../../peers/ruby/fiber_chain.rb");
const RUBY_FIBER_SWITCH: &str = include_str!("../../../../peers/ruby/fiber_switch.rb");
const GO_FIBERBENCH: &str = include_str!("../../../../peers/go/fiberbench/main.go");

/// Runs every installed peer of `bench` with `params` (`--name value` flags) and returns their rows.
pub(crate) fn run(bench: &str, params: &[(&str, String)]) -> Vec<Row> {
    let flags: Vec<String> = params.iter().flat_map(|(k, v)| [format!("--{k}"), v.clone()]).collect();
    let mut rows = Vec::new();
    let ruby_source = match bench {
        "fiber-chain" => RUBY_FIBER_CHAIN,
        _ => RUBY_FIBER_SWITCH,
    };
    match installed("ruby", "--version") {
        true => {
            let script = write_source(&format!("{bench}.rb"), ruby_source);
            rows.extend(run_peer("ruby", Command::new("ruby").arg(script).args(&flags)));
        }
        false => eprintln!("note: ruby peer skipped: `ruby` is not installed (apt-get install ruby)"),
    }
    match go_binary() {
        Some(binary) => rows.extend(run_peer("go", Command::new(binary).arg(bench).args(&flags))),
        None => eprintln!("note: go peer skipped: `go` is not installed or the peer did not build"),
    }
    rows
}

/// Runs only the Go peer of `bench` (the runtime experiments have no Ruby peer).
pub(crate) fn run_go(bench: &str, params: &[(&str, String)]) -> Vec<Row> {
    let flags: Vec<String> = params.iter().flat_map(|(k, v)| [format!("--{k}"), v.clone()]).collect();
    match go_binary() {
        Some(binary) => run_peer("go", Command::new(binary).arg(bench).args(&flags)),
        None => {
            eprintln!("note: go peer skipped: `go` is not installed or the peer did not build");
            Vec::new()
        }
    }
}

fn installed(program: &str, version_flag: &str) -> bool {
    Command::new(program).arg(version_flag).output().is_ok_and(|o| o.status.success())
}

/// A private directory for this process's peer sources and binaries.
fn work_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("neverblock-peers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create a temporary directory for the peers");
    dir
}

fn write_source(name: &str, source: &str) -> PathBuf {
    let path = work_dir().join(name);
    std::fs::write(&path, source).expect("write a peer's source");
    path
}

/// Builds the Go peer once per process.
fn go_binary() -> Option<&'static PathBuf> {
    static BINARY: OnceLock<Option<PathBuf>> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            if !installed("go", "version") {
                return None;
            }
            let source = write_source("fiberbench.go", GO_FIBERBENCH);
            let binary = work_dir().join("fiberbench");
            let built = Command::new("go")
                .args(["build", "-o"])
                .arg(&binary)
                .arg(&source)
                .env("GO111MODULE", "off")
                .status()
                .is_ok_and(|s| s.success());
            built.then_some(binary)
        })
        .as_ref()
}

/// Runs one peer and parses the JSON rows it prints.
fn run_peer(name: &str, command: &mut Command) -> Vec<Row> {
    match command.output() {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str::<Row>(line).ok())
            .collect(),
        Ok(out) => {
            eprintln!("note: {name} peer failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
            Vec::new()
        }
        Err(e) => {
            eprintln!("note: {name} peer could not start: {e}");
            Vec::new()
        }
    }
}

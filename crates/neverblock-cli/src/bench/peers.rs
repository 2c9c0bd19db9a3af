//! Peer programs (MRI Ruby, Go, Python gevent) run in the same invocation, each skipped with a
//! note when its runtime is not installed. Their sources live in `peers/` at the
//! repository root and are compiled into this binary, so `--peers` works anywhere.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use super::Row;

const RUBY_FIBER_CHAIN: &str = include_str!("../../../../peers/ruby/fiber_chain.rb");
const RUBY_FIBER_SWITCH: &str = include_str!("../../../../peers/ruby/fiber_switch.rb");
const GO_FIBERBENCH: &str = include_str!("../../../../peers/go/fiberbench/main.go");
const GO_DELAY_CLIENT: &str = include_str!("../../../../peers/go/delayclient/main.go");
const GO_DELAY_SERVER: &str = include_str!("../../../../peers/go/delayserver/main.go");
const RUBY_DELAY_CLIENT: &str = include_str!("../../../../peers/ruby/delay_client.rb");
const PYTHON_DELAY_CLIENT: &str = include_str!("../../../../peers/python/delay_client.py");
const GO_HTTP_SERVER: &str = include_str!("../../../../peers/go/httpserver/main.go");
const MINIHTTP_MANIFEST: &str = include_str!("../../../../peers/rust/minihttp/Cargo.toml");
const MINIHTTP_LOCK: &str = include_str!("../../../../peers/rust/minihttp/Cargo.lock");
const MINIHTTP_MAIN: &str = include_str!("../../../../peers/rust/minihttp/src/main.rs");

/// Runs every installed peer of `bench` with `params` (`--name value` flags) and returns their rows.
pub(crate) fn run(bench: &str, params: &[(&str, String)]) -> Vec<Row> {
    let mut rows = Vec::new();
    let ruby_source = match bench {
        "fiber-chain" => RUBY_FIBER_CHAIN,
        _ => RUBY_FIBER_SWITCH,
    };
    match installed("ruby", "--version") {
        true => {
            let script = write_source(&format!("{bench}.rb"), ruby_source);
            rows.extend(run_peer("ruby", Command::new("ruby").arg(script).args(flags(params))));
        }
        false => eprintln!("note: ruby peer skipped: `ruby` is not installed (apt-get install ruby)"),
    }
    rows.extend(run_go(bench, params));
    rows
}

/// Runs only the Go peer of `bench` (the runtime experiments have no Ruby peer).
pub(crate) fn run_go(bench: &str, params: &[(&str, String)]) -> Vec<Row> {
    match go_binary() {
        Some(binary) => run_peer("go", Command::new(binary).arg(bench).args(flags(params))),
        None => {
            eprintln!("note: go peer skipped: `go` is not installed or the peer did not build");
            Vec::new()
        }
    }
}

/// Runs the Go peer of `bench` in `processes` separate processes and keeps the
/// row with the lowest `metric`: Go's best, which is the strictest baseline. For
/// some benchmarks Go's time varies between processes on a VM (`neverblock bench
/// spawn-join --peers` shows it: its Go row's `slowest_per_fiber_ns` beside
/// `per_fiber_ns`), and a single run would make the
/// ratio hang on which one it landed in. The row also gets the slowest process's
/// figure (`slowest_<metric>`), so that spread shows.
pub(crate) fn run_go_best(bench: &str, params: &[(&str, String)], metric: &str, processes: usize) -> Vec<Row> {
    // A peer that did not run once (no `go`) is not tried again, so its note shows once.
    let mut rows: Vec<Row> =
        (0..processes).map_while(|_| Some(run_go(bench, params)).filter(|r| !r.is_empty())).flatten().collect();
    let figure = |row: &Row| row.get(metric).unwrap_or(f64::MAX);
    rows.sort_by(|a, b| figure(a).total_cmp(&figure(b)));
    let slowest = rows.last().map(figure);
    rows.into_iter().next().map(|best| best.metric(&format!("slowest_{metric}"), slowest)).into_iter().collect()
}

fn flags(params: &[(&str, String)]) -> Vec<String> {
    params.iter().flat_map(|(k, v)| [format!("--{k}"), v.clone()]).collect()
}

/// One installed delay-client peer: its row name, and the program and script to run.
struct DelayPeer {
    name: &'static str,
    program: PathBuf,
    script: Option<PathBuf>,
}

/// The delay-client peers that are installed, found (and built) once per process;
/// a note names each one skipped.
fn delay_peers() -> &'static [DelayPeer] {
    static PEERS: OnceLock<Vec<DelayPeer>> = OnceLock::new();
    PEERS.get_or_init(|| {
        let mut peers = Vec::new();
        match go_build("delayclient", GO_DELAY_CLIENT) {
            Some(program) => peers.push(DelayPeer { name: "go-goroutines", program, script: None }),
            None => eprintln!("note: go peer skipped: `go` is not installed or the peer did not build"),
        }
        match installed("ruby", "--version") {
            true => peers.push(DelayPeer {
                name: "ruby-threads",
                program: "ruby".into(),
                script: Some(write_source("delay_client.rb", RUBY_DELAY_CLIENT)),
            }),
            false => eprintln!("note: ruby peer skipped: `ruby` is not installed (apt-get install ruby)"),
        }
        match Command::new("python3").args(["-c", "import gevent"]).output().is_ok_and(|o| o.status.success()) {
            true => peers.push(DelayPeer {
                name: "python-gevent",
                program: "python3".into(),
                script: Some(write_source("delay_client.py", PYTHON_DELAY_CLIENT)),
            }),
            false => {
                eprintln!("note: python gevent peer skipped: `python3 -c 'import gevent'` failed (pip install gevent)")
            }
        }
        peers
    })
}

/// Runs each installed delay-client peer against `url` with `requests` GETs:
/// (name, ok, errors, seconds) per peer.
pub(crate) fn delay_client(url: &str, requests: usize) -> Vec<(String, usize, usize, f64)> {
    let n = requests.to_string();
    let mut results = Vec::new();
    for peer in delay_peers() {
        let mut command = Command::new(&peer.program);
        command.args(&peer.script).args([url, &n]);
        let Some(stdout) = peer_stdout(peer.name, &mut command) else { continue };
        let parsed: Option<serde_json::Value> = serde_json::from_slice(&stdout).ok();
        let field = |k: &str| parsed.as_ref().and_then(|v| v.get(k)).and_then(serde_json::Value::as_f64);
        match (field("ok"), field("errors"), field("seconds")) {
            (Some(ok), Some(errors), Some(seconds)) => {
                results.push((peer.name.to_owned(), ok as usize, errors as usize, seconds));
            }
            _ => eprintln!("note: {} peer printed no result: {}", peer.name, String::from_utf8_lossy(&stdout).trim()),
        }
    }
    results
}

fn installed(program: &str, version_flag: &str) -> bool {
    Command::new(program).arg(version_flag).output().is_ok_and(|o| o.status.success())
}

/// Where this process's peer sources and binaries go.
fn work_dir_path() -> PathBuf {
    std::env::temp_dir().join(format!("neverblock-peers-{}", std::process::id()))
}

/// This process's peer directory, made if it is not there yet.
pub(super) fn work_dir() -> PathBuf {
    let dir = work_dir_path();
    std::fs::create_dir_all(&dir).expect("create a temporary directory for the peers");
    dir
}

/// Removes this process's peer directory (sources and built binaries) when
/// dropped: when the benchmark returns, fails or panics (not on a signal).
pub(crate) struct WorkDirCleanup;

impl Drop for WorkDirCleanup {
    fn drop(&mut self) {
        match std::fs::remove_dir_all(work_dir_path()) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                eprintln!("note: could not remove {}: {e}", work_dir_path().display());
            }
            _ => {}
        }
    }
}

fn write_source(name: &str, source: &str) -> PathBuf {
    let path = work_dir().join(name);
    std::fs::write(&path, source).expect("write a peer's source");
    path
}

/// Builds the Go delay-server peer (net/http) once per process.
pub(crate) fn go_delay_server() -> Option<&'static PathBuf> {
    static BINARY: OnceLock<Option<PathBuf>> = OnceLock::new();
    BINARY.get_or_init(|| go_build("delayserver", GO_DELAY_SERVER)).as_ref()
}

/// Builds the Go fiber-benchmark peer once per process.
fn go_binary() -> Option<&'static PathBuf> {
    static BINARY: OnceLock<Option<PathBuf>> = OnceLock::new();
    BINARY.get_or_init(|| go_build("fiberbench", GO_FIBERBENCH)).as_ref()
}

/// Builds the Go net/http server peer once per process.
pub(crate) fn go_http_server() -> Option<&'static PathBuf> {
    static BINARY: OnceLock<Option<PathBuf>> = OnceLock::new();
    BINARY.get_or_init(|| go_build("httpserver", GO_HTTP_SERVER)).as_ref()
}

/// Builds the may_minihttp peer (once per process; cargo keeps the build between runs, in a
/// directory of its own under the temporary directory, so only the first run compiles it), or
/// `None` with a note when cargo is missing or the build fails (crates.io unreachable, say).
pub(crate) fn minihttp_binary() -> Option<&'static PathBuf> {
    static BINARY: OnceLock<Option<PathBuf>> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            let built = build_minihttp();
            if let Err(e) = &built {
                eprintln!("note: may_minihttp peer skipped: {e:#}");
            }
            built.ok()
        })
        .as_ref()
}

fn build_minihttp() -> anyhow::Result<PathBuf> {
    use anyhow::Context;
    anyhow::ensure!(installed("cargo", "--version"), "`cargo` is not installed");
    let dir = std::env::temp_dir().join("neverblock-peer-minihttp");
    std::fs::create_dir_all(dir.join("src"))?;
    // Written only when changed, so cargo sees the last build as fresh.
    for (name, text) in
        [("Cargo.toml", MINIHTTP_MANIFEST), ("Cargo.lock", MINIHTTP_LOCK), ("src/main.rs", MINIHTTP_MAIN)]
    {
        let path = dir.join(name);
        if std::fs::read_to_string(&path).ok().as_deref() != Some(text) {
            std::fs::write(&path, text)?;
        }
    }
    let target = dir.join("target");
    let binary = target.join("release").join("minihttp-peer");
    if !binary.exists() {
        eprintln!("note: building the may_minihttp peer in {} (a minute or so, once)", dir.display());
    }
    let out = Command::new("cargo")
        .args(["build", "--release", "--quiet", "--manifest-path"])
        .arg(dir.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        .output()
        .context("run cargo")?;
    anyhow::ensure!(out.status.success(), "cargo build failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    Ok(binary)
}

/// Builds a single-file Go program, or `None` when Go is missing or the build fails.
fn go_build(name: &str, source: &str) -> Option<PathBuf> {
    if !installed("go", "version") {
        return None;
    }
    let source = write_source(&format!("{name}.go"), source);
    let binary = work_dir().join(name);
    let built = Command::new("go")
        .args(["build", "-o"])
        .arg(&binary)
        .arg(&source)
        .env("GO111MODULE", "off")
        .status()
        .is_ok_and(|s| s.success());
    built.then_some(binary)
}

/// Runs one peer and parses the JSON rows it prints.
pub(super) fn run_peer(name: &str, command: &mut Command) -> Vec<Row> {
    let Some(stdout) = peer_stdout(name, command) else { return Vec::new() };
    String::from_utf8_lossy(&stdout).lines().filter_map(|line| serde_json::from_str::<Row>(line).ok()).collect()
}

/// Runs one peer to its end and returns what it printed; a note says why not.
fn peer_stdout(name: &str, command: &mut Command) -> Option<Vec<u8>> {
    match command.output() {
        Ok(out) if out.status.success() => Some(out.stdout),
        Ok(out) => {
            eprintln!("note: {name} peer failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
            None
        }
        Err(e) => {
            eprintln!("note: {name} peer could not start: {e}");
            None
        }
    }
}

//! The `neverblock` command end to end: each bench prints well-formed rows.

use std::process::Command;

use serde_json::Value;

#[path = "cli/serve_files.rs"]
mod serve_files;
#[path = "cli/serve_options.rs"]
mod serve_options;
#[path = "cli/serve_restarts.rs"]
mod serve_restarts;
#[path = "cli/serve_tls.rs"]
mod serve_tls;
#[path = "cli/serve_upstream.rs"]
mod serve_upstream;

fn neverblock(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_neverblock")).args(args).output().expect("run neverblock");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

/// Whether `program` runs here (`program version_flag` succeeds).
fn installed(program: &str, version_flag: &str) -> bool {
    Command::new(program).arg(version_flag).output().is_ok_and(|o| o.status.success())
}

fn rows(stdout: &str) -> Vec<Value> {
    stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))).collect()
}

#[test]
fn bench_all_draws_a_chart_per_benchmark_into_its_directory() {
    let dir = std::env::temp_dir().join(format!("neverblock-charts-{}", std::process::id()));
    let (ok, _, stderr) = neverblock(&["bench", "all", "--json", "--charts", dir.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    for bench in ["fiber-chain", "fiber-switch", "spawn-join", "channel-ping-pong"] {
        let svg = std::fs::read_to_string(dir.join(format!("{bench}.svg"))).unwrap_or_else(|e| panic!("{bench}: {e}"));
        assert!(svg.starts_with("<svg") && svg.contains(&format!("\n{bench}\n</text>")), "{bench}: {svg}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
    let (ok, _, stderr) = neverblock(&["bench", "all", "--chart", "one.svg"]);
    assert!(!ok && stderr.contains("--charts DIR"), "{stderr}");
}

#[test]
fn fiber_switch_prints_one_json_row_per_configuration() {
    let (ok, stdout, stderr) = neverblock(&["bench", "fiber-switch", "--t", "10", "--n", "50", "--json"]);
    assert!(ok, "{stderr}");
    let rows = rows(&stdout);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["bench"], "fiber-switch");
    assert_eq!(rows[0]["impl"], "neverblock");
    assert_eq!(rows[0]["params"]["t"], 10);
    assert!(rows[0]["metrics"]["round_trip_ns"].as_f64().unwrap() > 0.0);
}

#[test]
fn fiber_chain_with_peers_reports_ratios_to_neverblock() {
    let args = ["bench", "fiber-chain", "--t", "500", "--warmup", "1", "--runs", "3", "--json", "--peers"];
    let (ok, stdout, stderr) = neverblock(&args);
    assert!(ok, "{stderr}");
    let rows = rows(&stdout);
    let floor = rows.iter().find(|r| r["impl"] == "corosensei").expect("the raw corosensei floor always runs");
    assert!(floor["metrics"]["vs_neverblock_ratio"].as_f64().unwrap() > 0.0);
    for row in &rows {
        assert_eq!(row["params"]["t"], 500, "{row}");
        assert!(row["metrics"]["mean_s"].as_f64().unwrap() > 0.0, "{row}");
    }
}

#[test]
fn spawn_join_peer_rows_report_their_ratio_to_neverblock() {
    let (ok, stdout, stderr) = neverblock(&["bench", "spawn-join", "--n", "2000", "--json", "--peers"]);
    assert!(ok, "{stderr}");
    let rows = rows(&stdout);
    assert_eq!(rows.iter().any(|r| r["impl"] == "go"), installed("go", "version"), "{stderr}");
    for row in rows.iter().filter(|r| r["impl"] != "neverblock") {
        assert!(row["metrics"]["vs_neverblock_ratio"].as_f64().is_some_and(|r| r > 0.0), "{row}");
        let (best, slowest) = (&row["metrics"]["per_fiber_ns"], &row["metrics"]["slowest_per_fiber_ns"]);
        assert!(best.as_f64().unwrap() <= slowest.as_f64().unwrap(), "{row}");
    }
}

#[test]
fn a_run_with_peers_removes_the_peer_programs_it_built() {
    let child = Command::new(env!("CARGO_BIN_EXE_neverblock"))
        .args(["bench", "fiber-switch", "--t", "10", "--n", "50", "--json", "--peers"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run neverblock");
    let dir = std::env::temp_dir().join(format!("neverblock-peers-{}", child.id()));
    let out = child.wait_with_output().expect("wait for neverblock");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Ruby's script and Go's binary are written into `dir`: each runs when installed.
    let rows = rows(&String::from_utf8_lossy(&out.stdout));
    for (peer, version) in [("ruby", "--version"), ("go", "version")] {
        let ran = rows.iter().any(|r| r["impl"] == peer);
        assert_eq!(ran, installed(peer, version), "{peer}, run from {}", dir.display());
    }
    assert!(!dir.exists(), "{} is left behind", dir.display());
}

#[test]
fn fiber_chain_max_stops_at_the_cap_and_reports_memory() {
    let (ok, stdout, stderr) = neverblock(&["bench", "fiber-chain", "--max", "--t", "1000", "--cap", "3000", "--json"]);
    assert!(ok, "{stderr}");
    let rows = rows(&stdout);
    assert_eq!(rows[0]["metrics"]["max_fibers_count"], 3000);
    assert!(rows[0]["metrics"]["peak_rss_bytes"].as_u64().unwrap() > 0);
    assert!(rows[0]["params"]["stopped_by"].as_str().unwrap().contains("cap"));
    assert!(stderr.contains("t =      2000: ok"), "{stderr}");
}

#[test]
fn fiber_chain_max_names_the_limit_that_stopped_it() {
    // mprotect guard pages cost two mappings per fiber: vm.max_map_count stops the chain.
    let args = ["bench", "fiber-chain", "--max", "--mprotect-guards", "--t", "20000", "--cap", "100000", "--json"];
    let (ok, stdout, stderr) = neverblock(&args);
    assert!(ok, "{stderr}");
    let row = &rows(&stdout)[0];
    let max = row["metrics"]["max_fibers_count"].as_u64().unwrap();
    assert!((20_000..40_000).contains(&max), "{row}");
    assert!(row["params"]["stopped_by"].as_str().unwrap().contains("vm.max_map_count"), "{row}");
}

/// A `delay-server` child on a free port, killed on drop.
struct DelayServer(std::process::Child, String);

impl DelayServer {
    /// `delay-server --port 0` with `args`.
    fn start(args: &[&str]) -> DelayServer {
        let (child, url) = spawn_delay_server(&[&["--port", "0"], args].concat(), std::process::Stdio::null());
        assert!(url.starts_with("http://"), "delay-server printed no URL: {url:?}");
        DelayServer(child, url)
    }
}

/// Starts `delay-server` with `args`; returns it and the first line it prints
/// (its URL, or nothing if it failed to listen).
fn spawn_delay_server(args: &[&str], stderr: std::process::Stdio) -> (std::process::Child, String) {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_neverblock"))
        .arg("delay-server")
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("start delay-server");
    let mut url = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut url).unwrap();
    (child, url.trim().to_owned())
}

impl Drop for DelayServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn get_against_the_delay_server_reports_every_request() {
    let server = DelayServer::start(&["--delay", "5ms"]);
    for keepalive in [false, true] {
        let mut args = vec!["get", server.1.as_str(), "-n", "200", "-c", "50", "--json"];
        if keepalive {
            args.push("--keepalive");
        }
        let (ok, stdout, stderr) = neverblock(&args);
        assert!(ok, "{stderr}");
        let row: Value = serde_json::from_str(stdout.trim()).unwrap();
        assert_eq!(row["ok"], 200, "{row}");
        assert_eq!(row["errors"], serde_json::json!({}), "{row}");
        assert!(row["latency_ms"]["p50"].as_f64().unwrap() >= 5.0, "every answer waited the delay: {row}");
    }
}

/// The port of a `http://host:port/` URL.
fn port_of(url: &str) -> &str {
    url.trim_end_matches('/').rsplit(':').next().unwrap_or_default()
}

/// Sockets listening on 127.0.0.1:`port` (or any IPv4 address), from /proc/net/tcp.
fn listeners_on(port: &str) -> usize {
    let port: u16 = port.parse().unwrap_or_else(|e| panic!("not a port ({e}): {port:?}"));
    let table = std::fs::read_to_string("/proc/net/tcp").expect("read /proc/net/tcp");
    let local = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .filter(|fields| fields.len() > 3 && fields[1].ends_with(&local) && fields[3] == "0A")
        .count()
}

#[test]
fn delay_server_on_two_loops_listens_on_each_and_answers_a_burst() {
    let server = DelayServer::start(&["--threads", "2", "--delay", "0"]);
    assert_eq!(listeners_on(port_of(&server.1)), 2, "a listener per loop once the URL is out: {}", server.1);
    let (ok, stdout, stderr) = neverblock(&["get", &server.1, "-n", "400", "-c", "200", "--json"]);
    assert!(ok, "{stderr}");
    let row: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(row["ok"], 400, "{row}");
    assert_eq!(row["errors"], serde_json::json!({}), "{row}");
}

#[test]
fn delay_server_refuses_a_port_another_server_listens_on() {
    let first = DelayServer::start(&["--threads", "2", "--delay", "0"]);
    let port = port_of(&first.1);
    // SO_REUSEPORT alone would let this one join the first's port and take half its connections.
    let (mut second, url) = spawn_delay_server(&["--port", port, "--threads", "2"], std::process::Stdio::piped());
    if !url.is_empty() {
        let _ = second.kill();
        let _ = second.wait();
        panic!("a second server listens on the first's port: {url}");
    }
    let out = second.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains(&format!("listen on 127.0.0.1:{port}")), "{stderr}");
}

#[test]
fn get_reports_refused_connections_as_errors() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}/");
    let (ok, stdout, _) = neverblock(&["get", &url, "-n", "10", "-c", "2", "--json"]);
    assert!(!ok, "a run where nothing succeeded fails");
    assert!(stdout.contains("\"Refused\":10"), "{stdout}");
}

#[test]
fn delay_client_bench_prints_a_row_per_client() {
    let chart = std::env::temp_dir().join(format!("neverblock-delay-chart-{}.svg", std::process::id()));
    let args = ["bench", "delay-client", "--delays", "0,20", "-n", "50", "--json", "--chart", chart.to_str().unwrap()];
    let (ok, stdout, stderr) = neverblock(&args);
    assert!(ok, "{stderr}");
    let svg = std::fs::read_to_string(&chart).expect("the chart was written");
    std::fs::remove_file(&chart).unwrap();
    for text in ["requests/s", "server delay (ms)", "neverblock", "blocking", "os-threads"] {
        assert!(svg.contains(&format!("\n{text}\n</text>")), "{text} in the chart: {svg}");
    }
    let rows = rows(&stdout);
    for implementation in ["neverblock", "blocking", "os-threads"] {
        let mine: Vec<_> = rows.iter().filter(|r| r["impl"] == implementation).collect();
        assert_eq!(mine.len(), 2, "{implementation}: {stdout}");
        assert!(mine.iter().all(|r| r["metrics"]["ok"] == 50), "{implementation}: {stdout}");
    }
    let fibers = rows.iter().find(|r| r["impl"] == "neverblock" && r["params"]["delay_ms"] == 20).unwrap();
    // 50 requests at once overlap their delays; one after another would reach 2 % of the bound.
    assert!(fibers["metrics"]["bound_pct"].as_f64().unwrap() > 10.0, "{stdout}");
}

/// A `neverblock serve` child process (started through `sh`, which can lower its descriptor
/// limit first), killed on drop, and the URL its startup line names.
struct Serve {
    child: std::process::Child,
    url: String,
    /// What it has written to stderr (its log), and the thread that collects it.
    log: std::sync::Arc<std::sync::Mutex<String>>,
    collector: Option<std::thread::JoinHandle<()>>,
}

impl Serve {
    /// Serves `dir` with one loop on a free port, under `ulimit -n fd_limit` (soft and hard) when given.
    fn start(dir: &std::path::Path, fd_limit: Option<u32>) -> Serve {
        Serve::start_after(dir, &fd_limit.map_or(String::new(), |n| format!("ulimit -n {n} && ")))
    }

    /// Serves `dir` with one loop on a free port, started by a shell after `prefix`.
    fn start_after(dir: &std::path::Path, prefix: &str) -> Serve {
        Serve::start_with(dir, prefix, "--workers 1")
    }

    /// Serves `dir` on a free port with the options `options`, started by a shell after `prefix`.
    fn start_with(dir: &std::path::Path, prefix: &str, options: &str) -> Serve {
        use std::io::BufRead;
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(format!("{prefix}exec \"$0\" serve \"$1\" --listen 127.0.0.1:0 {options}"))
            .arg(env!("CARGO_BIN_EXE_neverblock"))
            .arg(dir)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start neverblock serve");
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let (stderr, sink) = (child.stderr.take().unwrap(), log.clone());
        let collector = std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push_str(&(line + "\n"));
            }
        });
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let url = line.split_whitespace().find(|w| w.starts_with("http://")).unwrap_or_default().to_owned();
        assert!(line.starts_with("serving ") && !url.is_empty(), "the startup line says where: {line:?}");
        Serve { child, url, log, collector: Some(collector) }
    }

    fn addr(&self) -> String {
        self.url.trim_start_matches("http://").trim_end_matches('/').to_owned()
    }

    /// `GET path` on a fresh connection (closed after it): the whole answer, as bytes.
    fn get(&self, path: &str) -> Vec<u8> {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(self.addr()).unwrap();
        stream.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
        stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes()).unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).expect("an answer within the bound");
        answer
    }

    /// Stops it gracefully and returns its whole log.
    fn stop(&mut self) -> String {
        self.signal("TERM");
        assert!(self.child.wait().unwrap().success());
        self.collector.take().unwrap().join().unwrap();
        self.log.lock().unwrap().clone()
    }

    fn signal(&self, name: &str) {
        // The shell's own `kill`: no procps needed.
        let status = Command::new("sh").arg("-c").arg(format!("kill -{name} {}", self.child.id())).status().unwrap();
        assert!(status.success());
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh directory beside the test binary, removed on drop.
struct Dir(std::path::PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let exe = std::env::current_exe().unwrap();
        let dir = exe.parent().unwrap().join(format!("cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn serve_says_where_it_listens_serves_the_directory_and_stops_on_sigterm() {
    let dir = Dir::new("serve");
    std::fs::write(dir.0.join("index.html"), "<h1>hi</h1>").unwrap();
    let mut server = Serve::start(&dir.0, None);
    let answer = String::from_utf8(server.get("/")).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n") && answer.ends_with("\r\n\r\n<h1>hi</h1>"), "{answer}");
    server.signal("TERM");
    let status = server.child.wait().unwrap();
    assert!(status.success(), "a graceful stop: {status}");
}

#[test]
fn serve_finishes_a_download_in_flight_when_told_to_stop() {
    use std::io::{BufRead, BufReader, Read, Write};
    let dir = Dir::new("serve-drain");
    let content: Vec<u8> = (0..16u32 << 20).map(|i| (i % 253) as u8).collect();
    std::fs::write(dir.0.join("big.bin"), &content).unwrap();
    let mut server = Serve::start(&dir.0, None);
    let mut stream = std::net::TcpStream::connect(server.addr()).unwrap();
    stream.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    stream.write_all(b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    while reader.read_line(&mut line).unwrap() > 2 {
        line.clear();
    }
    let mut body = vec![0u8; 1];
    reader.read_exact(&mut body).unwrap();
    server.signal("INT");
    reader.read_to_end(&mut body).unwrap();
    assert!(body == content, "the download in flight ended whole: {} of {} bytes", body.len(), content.len());
    assert!(server.child.wait().unwrap().success());
}

#[test]
fn serve_keeps_serving_fresh_clients_past_its_descriptor_limit() {
    use std::io::Read;
    let dir = Dir::new("serve-fds");
    std::fs::write(dir.0.join("hello.txt"), "hello").unwrap();
    let mut server = Serve::start(&dir.0, Some(64));
    // Twice as many idle connections as the server has descriptors; they send nothing, and
    // would hold their descriptors until the 20 s header timeout.
    let idle: Vec<_> = (0..128).map(|_| std::net::TcpStream::connect(server.addr()).unwrap()).collect();
    for round in 0..3 {
        let answer = String::from_utf8(server.get("/hello.txt")).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n") && answer.ends_with("hello"), "round {round}: {answer}");
    }
    let mut oldest = &idle[0];
    oldest.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    assert_eq!(oldest.read(&mut [0u8; 1]).unwrap(), 0, "the connection idle longest was closed");
    let log = server.stop();
    assert!(log.contains("Too many open files") && log.contains("connections idle longest"), "{log}");
}

#[test]
fn serve_raises_its_soft_descriptor_limit_to_the_hard_one() {
    let dir = Dir::new("serve-nofile");
    let hard: u64 = rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum.expect("Linux caps it");
    // Half the hard limit, below the soft limit it would be raised to.
    let mut server = Serve::start_after(&dir.0, &format!("ulimit -S -n {} && ", hard / 2));
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", server.child.id())).unwrap();
    let line = limits.lines().find(|l| l.starts_with("Max open files")).expect("a line for open files");
    let numbers: Vec<&str> = line.split_whitespace().skip(3).take(2).collect();
    assert_ne!(numbers[0], (hard / 2).to_string(), "the soft limit was raised: {line}");
    assert_eq!(numbers[0], numbers[1], "soft equals hard: {line}");
    server.stop();
}

#[test]
fn serve_pins_each_loop_to_a_cpu_of_its_own_unless_told_not_to() {
    let allowed = rustix::thread::sched_getaffinity(None).unwrap();
    if allowed.count() < 2 {
        eprintln!("skipped: one CPU allowed, so no loop is pinned");
        return;
    }
    let dir = Dir::new("serve-pin");
    std::fs::write(dir.0.join("a.txt"), "a").unwrap();
    let everywhere = cpus_allowed(&std::fs::read_to_string("/proc/thread-self/status").unwrap());
    for (options, pinned) in [("--workers 2", true), ("--workers 2 --no-pin", false)] {
        let mut server = Serve::start_with(&dir.0, "", options);
        // Answered, so its loops run (the startup line comes before they start).
        assert!(String::from_utf8(server.get("/a.txt")).unwrap().starts_with("HTTP/1.1 200 OK\r\n"));
        let second_loop = cpus_allowed(&thread_status(server.child.id(), "neverblock-1"));
        if pinned {
            assert!(second_loop.parse::<usize>().is_ok(), "{options}: one CPU, not {second_loop}");
        } else {
            assert_eq!(second_loop, everywhere, "{options}");
        }
        server.stop();
    }
}

/// The `status` of the thread named `name` of process `pid`.
fn thread_status(pid: u32, name: &str) -> String {
    // A thread may end between the listing and the reading (a blocking-pool thread gone idle).
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().filter_map(Result::ok);
    let mut statuses = tasks.filter_map(|task| std::fs::read_to_string(task.path().join("status")).ok());
    statuses.find(|status| status.lines().next() == Some(&format!("Name:\t{name}"))).expect("the thread")
}

/// The CPUs a thread's `status` says it may run on, as listed there (`0-1`, `1`).
fn cpus_allowed(status: &str) -> String {
    let line = status.lines().find(|l| l.starts_with("Cpus_allowed_list:")).unwrap();
    line.split_whitespace().nth(1).unwrap().to_owned()
}

#[test]
fn sigquit_prints_a_fiber_dump_and_the_server_goes_on() {
    let dir = Dir::new("serve-dump");
    std::fs::write(dir.0.join("a.txt"), "a").unwrap();
    let mut server = Serve::start(&dir.0, None);
    // Answered, so its loop runs (the startup line comes before the loops start).
    assert!(String::from_utf8(server.get("/a.txt")).unwrap().starts_with("HTTP/1.1 200 OK\r\n"));
    server.signal("QUIT");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !server.log.lock().unwrap().contains(" tasks):") && std::time::Instant::now() < deadline {
        #[expect(clippy::disallowed_methods, reason = "a plain test thread polls the child's log")]
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let answer = String::from_utf8(server.get("/a.txt")).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "still serving after the dump: {answer}");
    let log = server.stop();
    assert!(log.contains("fiber dump (SIGQUIT):"), "{log}");
    assert!(log.contains("is parked on an fd to become readable"), "the accept loop waits on its listener: {log}");
}

#[test]
fn pg_sleep_bench_starts_its_own_server_and_prints_both_rows() {
    let (ok, stdout, stderr) = neverblock(&["bench", "pg-sleep", "--queries", "3", "--seconds", "0.2", "--json"]);
    assert!(ok, "{stderr}");
    let rows = rows(&stdout);
    let seconds = |name: &str| {
        let row = rows.iter().find(|r| r["impl"] == name).unwrap_or_else(|| panic!("no {name} row: {stdout}"));
        assert_eq!(row["bench"], "pg-sleep");
        assert_eq!(row["params"]["queries"], 3);
        row["metrics"]["seconds"].as_f64().unwrap()
    };
    assert!(seconds("blocking") >= 0.6, "three sleeps of 0.2 s one after another");
    assert!(seconds("neverblock") >= 0.2);
    assert!(stderr.contains("throwaway PostgreSQL"), "{stderr}");
}

#[test]
fn pg_select1_via_pgbouncer_reports_the_hops_cost_beside_the_direct_rows() {
    let args = ["bench", "pg-select1", "--via-pgbouncer", "--seconds", "0.3", "--threads", "1"];
    let (ok, stdout, stderr) = neverblock(&[&args[..], &["--connections", "4", "--fibers", "16", "--json"]].concat());
    assert!(ok, "{stderr}");
    let rows = rows(&stdout);
    let row = |name: &str| rows.iter().find(|r| r["impl"] == name).unwrap_or_else(|| panic!("no {name} row: {stdout}"));
    for name in ["neverblock", "neverblock-shared", "neverblock-uncached", "neverblock-shared-uncached"] {
        assert!(row(name)["metrics"]["queries_per_s"].as_f64().unwrap() > 0.0, "{stdout}");
    }
    for name in ["neverblock-pgbouncer", "neverblock-shared-pgbouncer"] {
        assert_eq!(row(name)["bench"], "pg-select1");
        assert!(row(name)["metrics"]["queries_per_s"].as_f64().unwrap() > 0.0, "{stdout}");
        assert!(row(name)["metrics"]["vs_direct_ratio"].as_f64().unwrap() > 0.0, "the hop's cost: {stdout}");
    }
    assert!(stderr.contains("throwaway PgBouncer"), "{stderr}");
}

#[test]
fn app_sleep_bench_serves_every_client_at_once_beside_one_blocking_worker() {
    let (ok, stdout, stderr) =
        neverblock(&["bench", "app-sleep", "--clients", "3", "--seconds", "0.2", "--window", "1s", "--json"]);
    assert!(ok, "{stderr}");
    let rows = rows(&stdout);
    let metric = |name: &str, key: &str| {
        let row = rows.iter().find(|r| r["impl"] == name).unwrap_or_else(|| panic!("no {name} row: {stdout}"));
        row["metrics"][key].as_f64().unwrap()
    };
    assert_eq!(metric("neverblock", "errors"), 0.0, "{stdout}");
    assert!(metric("neverblock", "answered") >= 3.0, "every client got answers: {stdout}");
    // One worker sleeping 0.2 s per request cannot pass 5 a second, whatever the machine.
    assert!(metric("blocking", "requests_per_s") <= 5.0, "{stdout}");
}

/// Runs `neverblock args`, killing it if it has not ended within `limit` (a hang guard); its exit
/// status, stdout and stderr.
fn neverblock_within(args: &[&str], limit: std::time::Duration) -> (std::process::ExitStatus, String, String) {
    let child = Command::new(env!("CARGO_BIN_EXE_neverblock"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run neverblock");
    finish_within(child, limit)
}

/// Waits for `child` (stdout and stderr piped) for at most `limit`, then kills it; its exit status,
/// stdout and stderr.
fn finish_within(
    mut child: std::process::Child,
    limit: std::time::Duration,
) -> (std::process::ExitStatus, String, String) {
    use std::io::Read;
    let collect = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = collect(Box::new(child.stdout.take().expect("stdout is piped")));
    let stderr = collect(Box::new(child.stderr.take().expect("stderr is piped")));
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for neverblock") {
            break status;
        }
        if std::time::Instant::now() >= deadline {
            // Not yet reaped, so the pid is still this child's.
            let _ = child.kill();
            break child.wait().expect("wait for neverblock");
        }
        #[expect(clippy::disallowed_methods, reason = "a plain test thread polls a child process")]
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    (status, stdout.join().unwrap(), stderr.join().unwrap())
}

/// A one-connection HTTP server on a std thread: reads a request head, then runs `answer` on the
/// socket. Returns the URL.
fn one_shot_server(answer: impl FnOnce(&mut std::net::TcpStream) + Send + 'static) -> String {
    use std::io::Read;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
            head.push(byte[0]);
        }
        answer(&mut stream);
    });
    url
}

#[test]
fn get_drops_bodies_as_it_reads_them_so_memory_does_not_grow_with_them() {
    use std::io::Write;
    const BODY: usize = 256 << 20;
    let url = one_shot_server(|stream| {
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {BODY}\r\nConnection: close\r\n\r\n");
        stream.write_all(head.as_bytes()).unwrap();
        let piece = vec![b'x'; 1 << 20];
        for _ in 0..BODY / piece.len() {
            if stream.write_all(&piece).is_err() {
                return;
            }
        }
    });
    let (status, stdout, stderr) =
        neverblock_within(&["get", &url, "-n", "1", "-c", "1", "--json"], std::time::Duration::from_secs(120));
    assert!(status.success(), "{stderr}");
    let row: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(row["ok"], 1, "{row}");
    let peak = row["peak_rss_bytes"].as_u64().expect("the peak is reported");
    assert!(peak < (BODY / 4) as u64, "a {BODY}-byte body took the client to {peak} bytes of memory");
}

#[test]
fn get_without_keepalive_opens_a_connection_per_request_even_when_the_server_keeps_them_open() {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    // A server that answers every request keep-alive and never closes, whatever `Connection` says.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let (connections, requests) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (accepted, answered) = (connections.clone(), requests.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            accepted.fetch_add(1, Ordering::SeqCst);
            let answered = answered.clone();
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                while let Ok(n @ 1..) = stream.read(&mut chunk) {
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        answered.fetch_add(1, Ordering::SeqCst);
                        let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
                    }
                }
            });
        }
    });
    let args = ["get", &url, "-n", "3", "-c", "1", "--json"];
    let (status, stdout, stderr) = neverblock_within(&args, std::time::Duration::from_secs(30));
    assert!(status.success(), "{stderr}");
    let row: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout} {stderr}"));
    assert_eq!(row["ok"], 3, "{row}");
    assert_eq!(requests.load(Ordering::SeqCst), 3);
    assert_eq!(
        connections.load(Ordering::SeqCst),
        3,
        "a request that sent `Connection: close` is its connection's last"
    );
}

#[test]
fn get_total_timeout_ends_a_request_the_server_never_answers() {
    let url = one_shot_server(|stream| {
        use std::io::Read;
        // Holds the connection open, answering nothing, until the client leaves.
        let _ = stream.read(&mut [0u8; 1]);
    });
    let args = ["get", &url, "-n", "1", "-c", "1", "--timeout", "60s", "--total-timeout", "300ms", "--json"];
    let (status, stdout, stderr) = neverblock_within(&args, std::time::Duration::from_secs(30));
    assert!(!status.success(), "{stderr}");
    let row: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout} {stderr}"));
    assert_eq!(row["errors"], serde_json::json!({"TotalTimeout": 1}), "{row}");
}

/// `neverblock args` under `ulimit -n fd_limit` (soft and hard), through `sh`; as [`neverblock_within`].
fn neverblock_with_fd_limit(
    fd_limit: u32,
    args: &[&str],
    limit: std::time::Duration,
) -> (std::process::ExitStatus, String, String) {
    let child = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -n {fd_limit} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_neverblock"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run neverblock through sh");
    finish_within(child, limit)
}

#[test]
fn get_failures_say_why_and_fail_the_run_even_when_some_succeed() {
    let server = DelayServer::start(&["--delay", "50ms"]);
    // 100 connections at once, about 30 descriptors: most connects fail with EMFILE.
    let args = ["get", server.1.as_str(), "-n", "300", "-c", "100", "--threads", "1", "--json"];
    let (status, stdout, stderr) = neverblock_with_fd_limit(40, &args, std::time::Duration::from_secs(60));
    assert!(!status.success(), "a run with failures fails: {stdout}");
    assert!(stderr.contains("requests failed"), "{stderr}");
    let row: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout} {stderr}"));
    assert!(row["ok"].as_u64().unwrap() > 0, "{row}");
    assert!(row["errors"]["Io"].as_u64().unwrap() > 0, "{row}");
    let why = row["first_errors"]["Io"].as_str().unwrap_or_default();
    assert!(why.contains("Too many open files"), "the first Io error says why: {row}");
}

#[test]
fn get_progress_counts_finished_requests_and_errors() {
    // Three rounds of two 400 ms requests: at the first progress line (after 1 s) at most four
    // have finished, although all six were claimed by then.
    let server = DelayServer::start(&["--delay", "400ms"]);
    let args = ["get", server.1.as_str(), "-n", "6", "-c", "2", "--threads", "1"];
    let (status, stdout, stderr) = neverblock_within(&args, std::time::Duration::from_secs(60));
    assert!(status.success(), "{stdout}{stderr}");
    let line =
        stderr.split(['\r', '\n']).find(|l| l.contains("done")).unwrap_or_else(|| panic!("no progress: {stderr:?}"));
    let finished: usize = line.split('/').next().unwrap().trim().parse().unwrap_or_else(|e| panic!("{e}: {line:?}"));
    assert!(finished < 6, "{line:?}");
    assert!(line.contains("/6 done, 0 errors"), "{line:?}");
}

#[test]
fn get_stops_on_ctrl_c_and_prints_the_summary_so_far() {
    let server = DelayServer::start(&["--delay", "100ms"]);
    // Far more requests than the run will see: only Ctrl-C ends it.
    let child = Command::new(env!("CARGO_BIN_EXE_neverblock"))
        .args(["get", server.1.as_str(), "-n", "1000000", "-c", "4", "--threads", "1", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run neverblock");
    // Some requests finish first (about 40 a second); four are in flight when the signal comes.
    #[expect(clippy::disallowed_methods, reason = "a plain test thread lets the child run a while")]
    std::thread::sleep(std::time::Duration::from_millis(1500));
    // The child is not reaped yet, so its pid is still its own.
    let kill = Command::new("sh").arg("-c").arg(format!("kill -INT {}", child.id())).status().unwrap();
    assert!(kill.success());
    let (status, stdout, stderr) = finish_within(child, std::time::Duration::from_secs(30));
    assert_eq!(status.code(), Some(130), "{status}: {stdout} {stderr}");
    let row: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout:?} {stderr}"));
    assert_eq!(row["interrupted"], true, "{row}");
    assert!(row["ok"].as_u64().unwrap() > 0, "{row}");
    assert_eq!(row["errors"], serde_json::json!({}), "requests cut short are not failures: {row}");
}

#[test]
fn get_refuses_more_threads_than_the_descriptor_limit_allows() {
    let args = ["get", "http://127.0.0.1:1/", "-n", "200", "-c", "200", "--threads", "100"];
    let (status, stdout, stderr) = neverblock_with_fd_limit(64, &args, std::time::Duration::from_secs(60));
    assert!(!status.success(), "{stdout}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.contains("--threads 100 needs about") && stderr.contains("open-files limit of 64"), "{stderr}");
}

/// Whether nginx runs here (Debian installs it in /usr/sbin, which may not be on PATH).
fn nginx_installed() -> bool {
    installed("nginx", "-v") || installed("/usr/sbin/nginx", "-v")
}

/// The JSON rows of a bench that must succeed, every one checked to be a row of that bench.
fn bench_rows(args: &[&str]) -> (Vec<Value>, String) {
    let (ok, stdout, stderr) = neverblock(args);
    assert!(ok, "{stderr}");
    let rows = rows(&stdout);
    for row in &rows {
        assert_eq!(row["bench"], args[1], "{row}");
    }
    (rows, stderr)
}

#[test]
fn http_hello_bench_measures_each_server_beside_neverblock() {
    let args = ["bench", "http-hello", "--workers", "1", "-c", "8", "--duration", "300ms", "--warmup", "100ms"];
    let (rows, stderr) = bench_rows(&[&args[..], &["--runs", "1", "--json", "--peers"]].concat());
    let ours = rows.iter().find(|r| r["impl"] == "neverblock").expect("neverblock's row");
    assert!(ours["metrics"]["requests_per_s"].as_f64().unwrap() > 0.0, "{ours}");
    assert_eq!(ours["metrics"]["errors"], 0, "{ours}");
    assert_eq!(ours["params"]["connections"], 8);
    assert_eq!(rows.iter().any(|r| r["impl"] == "nginx"), nginx_installed(), "{stderr}");
    assert_eq!(rows.iter().any(|r| r["impl"] == "go-net-http"), installed("go", "version"), "{stderr}");
    for row in rows.iter().filter(|r| r["impl"] != "neverblock") {
        assert!(row["metrics"]["vs_neverblock_ratio"].as_f64().is_some_and(|r| r > 0.0), "{row}");
        assert_eq!(row["metrics"]["errors"], 0, "every server answers the 13 bytes: {row}");
    }
}

#[test]
fn http_static_bench_measures_both_files_from_serve_and_its_peers() {
    let args = ["bench", "http-static", "--workers", "1", "-c", "4", "--duration", "300ms", "--warmup", "100ms"];
    let (rows, stderr) = bench_rows(&[&args[..], &["--runs", "1", "--json", "--peers"]].concat());
    for file in ["hello.txt", "1mib.bin"] {
        let ours = rows.iter().find(|r| r["impl"] == "neverblock" && r["params"]["file"] == file).expect(file);
        assert!(ours["metrics"]["requests_per_s"].as_f64().unwrap() > 0.0, "{ours}");
        assert_eq!(ours["metrics"]["errors"], 0, "{ours}");
        let nginx = rows.iter().any(|r| r["impl"] == "nginx" && r["params"]["file"] == file);
        assert_eq!(nginx, nginx_installed(), "{stderr}");
        let h2o = rows.iter().find(|r| r["impl"] == "h2o" && r["params"]["file"] == file);
        assert_eq!(h2o.is_some(), installed("h2o", "--version"), "{stderr}");
        if let Some(h2o) = h2o {
            assert_eq!(h2o["metrics"]["errors"], 0, "h2o serves the file asked for: {h2o}");
            assert!(h2o["metrics"]["server_cpu_us_per_req"].as_f64().is_some_and(|us| us > 0.0), "{h2o}");
        }
    }
    let go = rows.iter().filter(|r| r["impl"] == "go-file-server").count();
    assert_eq!(go, if installed("go", "version") { 2 } else { 0 }, "{stderr}");
}

#[test]
fn https_bench_measures_full_and_resumed_handshakes_and_kept_alive_connections() {
    let args = ["bench", "https", "-c", "4", "--duration", "300ms", "--warmup", "100ms", "--runs", "1", "--json"];
    if !installed("openssl", "version") {
        let (ok, _, stderr) = neverblock(&args);
        assert!(!ok && stderr.contains("install it") && stderr.contains("openssl"), "{stderr}");
        return;
    }
    let (rows, stderr) = bench_rows(&args);
    let kinds: Vec<(&str, &str, &str)> = rows
        .iter()
        .map(|r| {
            let param = |name: &str| r["params"][name].as_str().unwrap();
            (param("connection"), param("cert"), param("file"))
        })
        .collect();
    let expected = [
        ("new+full-handshake", "ecdsa-p256", "hello.txt"),
        ("new+full-handshake", "rsa-2048", "hello.txt"),
        ("new+resumed", "ecdsa-p256", "hello.txt"),
        ("kept-alive", "ecdsa-p256", "hello.txt"),
        ("kept-alive", "ecdsa-p256", "1mib.bin"),
    ];
    assert_eq!(kinds, expected, "{stderr}");
    for row in &rows {
        assert_eq!((row["impl"].as_str(), row["params"]["tls"].as_str()), (Some("neverblock"), Some("1.3")), "{row}");
        assert!(row["metrics"]["requests_per_s"].as_f64().unwrap() > 0.0, "{row}");
        assert_eq!(row["metrics"]["errors"], 0, "every handshake is the kind asked for: {row}");
        let large = row["params"]["file"] == "1mib.bin";
        assert_eq!(row["metrics"]["mb_per_s"].as_f64().is_some(), large, "{row}");
    }
}

#[test]
fn slow_clients_bench_downloads_whole_files_under_the_throttle_and_checks_them() {
    // 3 clients at 1 MB/s, a 100 kB file: about ten whole downloads each in the window.
    let args = ["bench", "slow-clients", "-c", "3", "--window", "1s", "--file-size", "100kB", "--rate", "1MB"];
    let (rows, stderr) = bench_rows(&[&args[..], &["--workers", "1", "--json", "--peers"]].concat());
    assert_eq!(rows.iter().any(|r| r["impl"] == "nginx"), nginx_installed(), "{stderr}");
    assert!(rows.iter().any(|r| r["impl"] == "neverblock"), "{stderr}");
    for row in &rows {
        let metrics = &row["metrics"];
        assert_eq!(metrics["bad_downloads"], 0, "{row}");
        assert!(metrics["completed"].as_u64().unwrap() >= 3, "clients that finish start again: {row}");
        let rate = metrics["mb_per_s"].as_f64().unwrap();
        assert!(rate > 0.0 && rate <= 3.3, "the throttle holds each client to about 1 MB/s: {row}");
        assert!(metrics["ttfb_p99_ms"].as_f64().unwrap() > 0.0, "{row}");
    }
}

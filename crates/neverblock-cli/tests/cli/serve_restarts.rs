//! `neverblock serve` replaced without dropping a request: SIGUSR2 upgrades under keep-alive load
//! (`neverblock get --keepalive`, 50 connections) lose nothing and change the pid each time; an
//! upgrade whose program exits at once or never serves leaves the old process serving; and
//! systemd's socket activation (LISTEN_FDS, LISTEN_PID) on sockets this test holds and hands to
//! each process in turn, as systemd does, across a SIGTERM and a new process.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use neverblock::net::{ListenFds, PARENT_PID_VAR};

use crate::serve_tls::{client, connect, get, write_pair};
use crate::Dir;

/// How long one step may take before the test fails: far above what any takes.
const PATIENCE: Duration = Duration::from_secs(60);

/// The command under test.
fn program() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_neverblock"))
}

/// Waits until `done` holds, looking every 20 ms, for at most [`PATIENCE`].
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "waited {PATIENCE:?} for {what}");
        pause(Duration::from_millis(20));
    }
}

/// Lets the load run a while.
fn pause(time: Duration) {
    #[expect(clippy::disallowed_methods, reason = "a plain test thread paces the children")]
    std::thread::sleep(time);
}

/// Sends signal `name` (`USR2`, `TERM`, `INT`) to process `pid`, with the shell's own `kill`.
fn signal(pid: u32, name: &str) {
    let status = Command::new("sh").arg("-c").arg(format!("kill -{name} {pid}")).status().unwrap();
    assert!(status.success(), "kill -{name} {pid}");
}

/// Whether process `pid` has ended (gone, or a zombie its parent has not waited for).
fn ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

/// The pid `pid_file` names once it names one other than `old`.
fn next_pid(pid_file: &Path, old: Option<u32>) -> u32 {
    let mut pid = None;
    wait_for("the pid file to name a new process", || {
        pid = std::fs::read_to_string(pid_file)
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .filter(|&p| Some(p) != old);
        pid.is_some()
    });
    pid.unwrap_or_default()
}

/// The body of `GET /` on a fresh connection to `addr`.
fn body_at(addr: &str) -> String {
    let mut stream = std::net::TcpStream::connect(addr).expect("connected, not refused");
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or(answer)
}

/// A site whose `/` says `hello`.
fn site(name: &str) -> Dir {
    let dir = Dir::new(name);
    std::fs::write(dir.0.join("index.html"), "hello").unwrap();
    dir
}

/// Every process the test started, its serving ones' descendants included: killed when the test
/// ends, however it ends, unless they ended before.
#[derive(Default)]
struct Processes(Vec<u32>);

impl Drop for Processes {
    fn drop(&mut self) {
        for &pid in self.0.iter().filter(|&&pid| !ended(pid)) {
            let _ = Command::new("sh").arg("-c").arg(format!("kill -KILL {pid}")).status();
        }
    }
}

/// A `neverblock serve` process (and those that replace it: they share its standard output and
/// error): where it listens, and what they all wrote to standard error.
struct Served {
    child: Child,
    /// The addresses of its startup line, `http://` ones then `https://` ones.
    addrs: Vec<String>,
    stderr: Arc<Mutex<String>>,
    collectors: Vec<JoinHandle<()>>,
}

impl Served {
    /// Starts `command` (a `serve`) and reads its startup line.
    fn start(command: &mut Command) -> Served {
        let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start neverblock serve");
        let stderr = Arc::new(Mutex::new(String::new()));
        let errors = stderr.clone();
        let mut from = BufReader::new(child.stderr.take().unwrap());
        let collector = std::thread::spawn(move || {
            let mut line = String::new();
            while from.read_line(&mut line).is_ok_and(|n| n > 0) {
                errors.lock().unwrap().push_str(&std::mem::take(&mut line));
            }
        });
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert!(line.starts_with("serving "), "a startup line, not {line:?}: {}", stderr.lock().unwrap());
        let addrs = ["http://", "https://"]
            .iter()
            .flat_map(|scheme| line.split_whitespace().filter_map(move |word| word.strip_prefix(scheme)))
            .map(|url| url.trim_end_matches('/').to_owned())
            .collect();
        let drain = std::thread::spawn(move || drain(stdout));
        Served { child, addrs, stderr, collectors: vec![collector, drain] }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits for the process it started (not its replacements) to end; whether it succeeded.
    fn wait(&mut self) -> bool {
        let pid = self.child.id();
        wait_for("the server to end", || self.child.try_wait().unwrap().is_some() || ended(pid));
        self.child.wait().unwrap().success()
    }

    /// Sends SIGTERM to the process it started and checks that it ended well.
    fn terminate(&mut self) {
        signal(self.child.id(), "TERM");
        assert!(self.wait(), "{}", self.stderr());
    }

    /// Waits until every process that wrote to its standard output and error has ended.
    fn join(mut self) -> String {
        self.collectors.drain(..).for_each(|c| c.join().unwrap());
        self.stderr()
    }
}

/// Reads the later startup lines of replacements, so that the pipe never fills.
fn drain(mut stdout: BufReader<ChildStdout>) {
    let _ = std::io::copy(&mut stdout, &mut std::io::sink());
}

/// `neverblock serve DIR --listen 127.0.0.1:0 --workers 2 --pid-file PID_FILE EXTRA…`, started as
/// `program`.
fn serve(program: &Path, dir: &Dir, pid_file: &Path, extra: &[&str]) -> Command {
    let mut command = Command::new(program);
    command.args(["serve", dir.0.to_str().unwrap(), "--listen", "127.0.0.1:0", "--workers", "2", "--pid-file"]);
    command.arg(pid_file).args(extra);
    command
}

/// `neverblock serve ARGS…` started as systemd's socket activation starts it: `sockets` at 3, 4, …
/// with LISTEN_FDS and LISTEN_PID (the shell sets it to its own pid, which the command keeps by
/// `exec`) or, with `listen_pid`, that pid instead.
fn activated(sockets: &[&TcpListener], listen_pid: Option<u32>, args: &[&str]) -> Command {
    let mut command = Command::new("sh");
    let pid = listen_pid.map_or("$$".to_owned(), |pid| pid.to_string());
    command.arg("-c").arg(format!("LISTEN_PID={pid} exec \"$0\" \"$@\"")).arg(program()).arg("serve").args(args);
    let fds = sockets.iter().map(|socket| ("web".to_owned(), OwnedFd::from(socket.try_clone().unwrap()))).collect();
    ListenFds::pass(&mut command, fds).unwrap();
    command.env_remove(PARENT_PID_VAR);
    command
}

/// `neverblock get --keepalive -c 50` against `url`, until [`Load::finish`] interrupts it.
struct Load(Child);

impl Load {
    fn start(url: &str) -> Load {
        let child = Command::new(program())
            .args(["get", "--keepalive", "-c", "50", "-n", "1000000000", "--json", url])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start neverblock get");
        Load(child)
    }

    /// Interrupts the load (Ctrl-C: requests in flight are not counted) and returns its report.
    fn finish(self) -> serde_json::Value {
        signal(self.0.id(), "INT");
        let out = self.0.wait_with_output().unwrap();
        let report = String::from_utf8_lossy(&out.stdout);
        serde_json::from_str(report.trim())
            .unwrap_or_else(|e| panic!("a JSON report ({e}): {report:?} {}", String::from_utf8_lossy(&out.stderr)))
    }
}

/// Asserts that `report` counts answers and no failure.
fn assert_no_failure(report: &serde_json::Value, server_log: &str) {
    assert!(report["ok"].as_u64().is_some_and(|ok| ok > 0), "{report}");
    assert_eq!(report["errors"], serde_json::json!({}), "{report}\n{server_log}");
}

#[test]
fn three_upgrades_under_keep_alive_load_lose_no_request_and_change_the_pid() {
    let (dir, mut processes) = (site("upgrades"), Processes::default());
    let pid_file = dir.0.join("serve.pid");
    let served = Served::start(&mut serve(&program(), &dir, &pid_file, &[]));
    let mut pids = vec![next_pid(&pid_file, None)];
    processes.0.push(pids[0]);
    let load = Load::start(&format!("http://{}/", served.addrs[0]));
    pause(Duration::from_secs(1));
    for _ in 0..3 {
        let old = *pids.last().unwrap();
        signal(old, "USR2");
        let new = next_pid(&pid_file, Some(old));
        processes.0.push(new);
        wait_for("the old process to end", || ended(old));
        pids.push(new);
        pause(Duration::from_millis(500));
    }
    pause(Duration::from_secs(1));
    let report = load.finish();
    let last = *pids.last().unwrap();
    signal(last, "TERM");
    wait_for("the last process to end", || ended(last));
    let log = served.join();
    assert_no_failure(&report, &log);
    let mut distinct = pids.clone();
    distinct.dedup();
    assert_eq!(distinct.len(), 4, "a new pid each time: {pids:?}");
    assert_eq!(log.matches("serves now; this one stops accepting").count(), 3, "{log}");
    assert!(!pid_file.exists(), "the last process removed its pid file");
}

#[test]
fn an_upgrade_that_fails_leaves_the_old_process_serving() {
    let (dir, mut processes) = (site("failed-upgrade"), Processes::default());
    // The server is started through a symbolic link, as a release directory often is: an upgrade
    // points the link elsewhere, and SIGUSR2 starts what it points at then.
    let link = dir.0.join("neverblock");
    let point_at = |target: &Path| {
        let fresh = dir.0.join("neverblock.new");
        std::os::unix::fs::symlink(target, &fresh).unwrap();
        std::fs::rename(&fresh, &link).unwrap();
    };
    let script = |name: &str, body: &str| {
        let path = dir.0.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        path
    };
    point_at(&program());
    let pid_file = dir.0.join("serve.pid");
    let mut served = Served::start(&mut serve(&link, &dir, &pid_file, &["--upgrade-timeout", "2s"]));
    let pid = next_pid(&pid_file, None);
    processes.0.push(pid);
    let addr = served.addrs[0].clone();
    let failures = [
        (script("exits.sh", "exit 3"), "ended before it served"),
        (script("hangs.sh", "exec sleep 60"), "did not serve within 2s"),
    ];
    for (count, (broken, why)) in failures.iter().enumerate() {
        point_at(broken);
        signal(pid, "USR2");
        wait_for(why, || served.stderr().matches("no upgrade, this process goes on serving").count() > count);
        assert!(served.stderr().contains(why), "{}", served.stderr());
        assert_eq!(body_at(&addr), "hello", "still served");
        assert_eq!(std::fs::read_to_string(&pid_file).unwrap().trim(), pid.to_string());
    }
    point_at(&program());
    signal(pid, "USR2");
    let new = next_pid(&pid_file, Some(pid));
    processes.0.push(new);
    assert!(served.wait(), "the old process ended well once replaced");
    assert_eq!(body_at(&addr), "hello", "served by the new one");
    signal(new, "TERM");
    wait_for("the new process to end", || ended(new));
    served.join();
}

#[test]
fn socket_activation_serves_on_the_sockets_handed_over_cleartext_and_tls() {
    let dir = site("activation");
    let (cert, key) = (dir.0.join("cert.pem"), dir.0.join("key.pem"));
    let root = write_pair(&cert, &key);
    let cleartext = TcpListener::bind("127.0.0.1:0").unwrap();
    let tls = TcpListener::bind("127.0.0.1:0").unwrap();
    let (cert, key) = (cert.to_str().unwrap(), key.to_str().unwrap());
    let args =
        [dir.0.to_str().unwrap(), "--listen", "fd:3", "--tls-listen", "fd:4", "--tls-cert", cert, "--tls-key", key];
    let mut served = Served::start(&mut activated(&[&cleartext, &tls], None, &args));
    let (plain_addr, tls_addr) = (cleartext.local_addr().unwrap().to_string(), tls.local_addr().unwrap().to_string());
    assert_eq!(served.addrs, [plain_addr.clone(), tls_addr.clone()]);
    assert_eq!(body_at(&plain_addr), "hello");
    let mut stream = connect(&tls_addr, &client(&[&root]));
    assert_eq!(get(&mut stream, "/"), (200, "hello".to_owned()));
    drop(stream);
    served.terminate();
    served.join();
}

#[test]
fn socket_activation_for_another_pid_is_ignored() {
    let dir = site("activation-elsewhere");
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let site = dir.0.to_str().unwrap();
    let out = activated(&[&held], Some(1), &[site, "--listen", "fd:3"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("--listen fd:3: the sockets in LISTEN_FDS are not for this process (LISTEN_PID is 1"),
        "{stderr}"
    );
    let mut served = Served::start(&mut activated(&[&held], Some(1), &[site, "--listen", "127.0.0.1:0"]));
    let own = served.addrs[0].clone();
    assert_ne!(own, held.local_addr().unwrap().to_string());
    assert_eq!(body_at(&own), "hello");
    // A connection to the socket handed over waits for this test, which holds it: nobody else took it.
    let _client = std::net::TcpStream::connect(held.local_addr().unwrap()).unwrap();
    held.set_nonblocking(true).unwrap();
    let (accepted, _) = held.accept().expect("the connection, left to this test");
    drop(accepted);
    served.terminate();
    served.join();
}

#[test]
fn a_socket_activated_server_replaced_after_sigterm_under_load_refuses_no_connection() {
    let dir = site("activation-restart");
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap();
    let args = [dir.0.to_str().unwrap(), "--listen", "fd:3", "--workers", "2"];
    let mut first = Served::start(&mut activated(&[&held], None, &args));
    let load = Load::start(&format!("http://{addr}/"));
    pause(Duration::from_secs(1));
    first.terminate();
    // Connections made meanwhile wait in the socket's backlog, which this test keeps open.
    let mut second = Served::start(&mut activated(&[&held], None, &args));
    pause(Duration::from_secs(1));
    let report = load.finish();
    second.terminate();
    let log = first.join() + &second.join();
    assert_no_failure(&report, &log);
}

#[test]
fn reuse_port_lets_two_processes_share_a_port_and_without_it_the_port_is_taken() {
    let dir = site("reuse-port");
    let site = dir.0.to_str().unwrap();
    let shared = |listen: &str| {
        let mut command = Command::new(program());
        command.args(["serve", site, "--workers", "1", "--reuse-port", "--listen", listen]);
        command
    };
    let mut first = Served::start(&mut shared("127.0.0.1:0"));
    let port = first.addrs[0].clone();
    let mut second = Served::start(&mut shared(&port));
    assert_eq!(second.addrs[0], port);
    let taken = Command::new(program()).args(["serve", site, "--listen", &port]).output().unwrap();
    let stderr = String::from_utf8_lossy(&taken.stderr);
    assert!(!taken.status.success() && stderr.contains(&format!("--listen {port}")), "{stderr}");
    for served in [&mut first, &mut second] {
        assert_eq!(body_at(&port), "hello");
        served.terminate();
    }
    first.join();
    second.join();
}

//! `neverblock serve`'s access log and metrics options, end to end against the command.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

/// A `neverblock serve` child with extra options, killed on drop: where it listens, and what it
/// wrote to standard output after its startup line and to standard error.
pub(crate) struct Serving {
    child: Child,
    addr: String,
    /// Where it listens over TLS, when asked to (`--tls-listen`).
    pub(crate) tls_addr: Option<String>,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    collectors: Vec<JoinHandle<()>>,
}

/// Collects what `from` writes into `into`, line by line.
fn collect(from: impl Read + Send + 'static, into: Arc<Mutex<String>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines().map_while(Result::ok) {
            into.lock().unwrap().push_str(&(line + "\n"));
        }
    })
}

impl Serving {
    /// `neverblock serve --listen 127.0.0.1:0 --workers 1 ARGS…` with `env` set.
    pub(crate) fn start(args: &[&str], env: &[(&str, &str)]) -> Serving {
        let mut command = Command::new(env!("CARGO_BIN_EXE_neverblock"));
        command.args(["serve", "--listen", "127.0.0.1:0", "--workers", "1"]).args(args).envs(env.iter().copied());
        Serving::spawned(&mut command)
    }

    /// The same, allowed at most `limit` open descriptors (the shell's `ulimit -n`).
    pub(crate) fn start_under_fd_limit(limit: usize, args: &[&str]) -> Serving {
        let mut command = Command::new("sh");
        command.arg("-c").arg(format!("ulimit -n {limit} && exec \"$0\" \"$@\""));
        command.arg(env!("CARGO_BIN_EXE_neverblock")).args(["serve", "--listen", "127.0.0.1:0", "--workers", "1"]);
        Serving::spawned(command.args(args))
    }

    /// Starts `command`, a `neverblock serve`, and reads its startup line.
    fn spawned(command: &mut Command) -> Serving {
        let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start neverblock serve");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let addr_of = |scheme: &str| {
            let url = line.split_whitespace().find_map(|w| w.strip_prefix(scheme))?;
            Some(url.trim_end_matches('/').to_owned())
        };
        let (addr, tls_addr) = (addr_of("http://"), addr_of("https://"));
        assert!(line.starts_with("serving ") && addr.is_some(), "the startup line says where: {line:?}");
        let (out, err) = (Arc::new(Mutex::new(String::new())), Arc::new(Mutex::new(String::new())));
        let collectors = vec![collect(stdout, out.clone()), collect(child.stderr.take().unwrap(), err.clone())];
        Serving { child, addr: addr.unwrap(), tls_addr, stdout: out, stderr: err, collectors }
    }

    /// Sends `request` on a fresh connection and returns everything that comes back.
    pub(crate) fn send(&self, request: &str) -> String {
        let mut stream = std::net::TcpStream::connect(&self.addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).expect("an answer within the bound");
        String::from_utf8_lossy(&answer).into_owned()
    }

    /// `GET path`, closing the connection after.
    pub(crate) fn get(&self, path: &str) -> String {
        self.send(&format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
    }

    pub(crate) fn stdout(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    pub(crate) fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    pub(crate) fn signal(&self, name: &str) {
        // The shell's own `kill`: no procps needed.
        let status = Command::new("sh").arg("-c").arg(format!("kill -{name} {}", self.child.id())).status().unwrap();
        assert!(status.success());
    }

    /// Stops it gracefully (SIGTERM), waits for it, and returns what it wrote to standard output.
    pub(crate) fn stop(&mut self) -> String {
        self.signal("TERM");
        assert!(self.child.wait().unwrap().success(), "a graceful stop: {}", self.stderr());
        self.collectors.drain(..).for_each(|c| c.join().unwrap());
        self.stdout()
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits (up to 10 s) until `ready` holds.
pub(crate) fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ready() {
        assert!(Instant::now() < deadline, "waited 10 s for {what}");
        #[expect(clippy::disallowed_methods, reason = "a plain test thread polls the child")]
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `at` in the common log format at the fixed offset +05:30, made from httpdate's UTC text.
fn clf_at_plus_0530(at: SystemTime) -> String {
    // "Wed, 25 Nov 2026 19:33:12 GMT"
    let shifted = httpdate::fmt_http_date(at + Duration::from_secs(5 * 3600 + 1800));
    let parts: Vec<&str> = shifted.split([' ', ',']).filter(|p| !p.is_empty()).collect();
    format!("[{}/{}/{}:{} +0530]", parts[1], parts[2], parts[3], parts[4])
}

pub(crate) fn site(name: &str) -> crate::Dir {
    let dir = crate::Dir::new(name);
    std::fs::write(dir.0.join("hello.txt"), "hello, file\n").unwrap();
    dir
}

pub(crate) fn dir_arg(dir: &crate::Dir) -> &str {
    dir.0.to_str().unwrap()
}

#[test]
fn serve_writes_the_common_log_to_stdout_in_local_time() {
    let dir = site("serve-log-stdout");
    let mut server = Serving::start(&[dir_arg(&dir), "--access-log", "common"], &[("TZ", "<+0530>-5:30")]);
    let before = SystemTime::now();
    assert!(server.get("/hello.txt?a=%22b").ends_with("hello, file\n"));
    server.get("/none");
    let after = SystemTime::now();
    let out = server.stop();
    let lines: Vec<&str> = out.lines().collect();
    let times: Vec<String> = [before, after].iter().map(|&t| clf_at_plus_0530(t)).collect();
    let expected = [
        |time: &str| format!("127.0.0.1 - - {time} \"GET /hello.txt?a=%22b HTTP/1.1\" 200 12"),
        |time: &str| format!("127.0.0.1 - - {time} \"GET /none HTTP/1.1\" 404 28"),
    ];
    assert_eq!(lines.len(), 2, "{lines:?}");
    for (line, expected) in lines.iter().zip(expected) {
        assert!(times.iter().any(|time| *line == expected(time)), "{line:?} is not {:?}", expected(&times[0]));
    }
}

#[test]
fn serve_loses_no_log_line_when_stopped_and_reopens_its_file_on_sighup() {
    let dir = site("serve-log-file");
    let path = dir.0.join("access.log");
    let rotated = dir.0.join("access.log.1");
    let args = [dir_arg(&dir), "--access-log-file", path.to_str().unwrap(), "--access-log", "%>s %U"];
    let mut server = Serving::start(&args, &[]);
    server.get("/hello.txt");
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    wait_until("the first line", || read(&path) == "200 /hello.txt\n");
    std::fs::rename(&path, &rotated).unwrap();
    server.signal("HUP");
    wait_until("a new file at the log's path", || path.exists());
    for i in 0..200 {
        server.get(&format!("/after/{i}"));
    }
    server.stop();
    assert_eq!(read(&rotated), "200 /hello.txt\n");
    let expected: String = (0..200).map(|i| format!("404 /after/{i}\n")).collect();
    assert_eq!(read(&path), expected, "every line, in the new file");
}

#[test]
fn serve_refuses_a_log_format_it_cannot_write() {
    let out = Command::new(env!("CARGO_BIN_EXE_neverblock"))
        .args(["serve", "--listen", "127.0.0.1:0", "--access-log", "%h %Y"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--access-log") && stderr.contains("%Y"), "{stderr}");
}

#[test]
fn serve_has_no_metrics_unless_asked_and_serves_them_at_the_path_given() {
    let dir = site("serve-metrics");
    let plain = Serving::start(&[dir_arg(&dir)], &[]);
    assert!(plain.get("/metrics").starts_with("HTTP/1.1 404 "), "off by default");
    let server = Serving::start(&[dir_arg(&dir), "--metrics-path", "/-/metrics"], &[]);
    for _ in 0..3 {
        server.get("/hello.txt");
    }
    let page = server.get("/-/metrics");
    assert!(page.starts_with("HTTP/1.1 200 OK\r\n"), "{page}");
    assert!(page.contains("\nneverblock_http_requests_total{method=\"GET\",status=\"2xx\"} 3\n"), "{page}");
    assert!(page.contains("\nneverblock_connections_accepted_total 4\n"), "{page}");
    assert!(page.contains("\nneverblock_fibers{loop=\"0\"} "), "{page}");
}

#[test]
fn serve_speaks_http2_by_prior_knowledge_unless_told_no_http2() {
    let dir = site("serve-http2");
    let mut server = Serving::start(&[dir_arg(&dir), "--access-log", "%H %>s %U"], &[]);
    let url = format!("http://{}/hello.txt", server.addr);
    let curl = std::process::Command::new("curl")
        .args(["-sS", "--max-time", "10", "--http2-prior-knowledge", &url])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&curl.stdout), "hello, file\n");
    wait_until("the log line", || server.stdout().contains("HTTP/2.0 200 /hello.txt\n"));
    server.stop();

    let http1_only = Serving::start(&[dir_arg(&dir), "--no-http2"], &[]);
    let answer = http1_only.send("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 505 "), "{answer}");
}

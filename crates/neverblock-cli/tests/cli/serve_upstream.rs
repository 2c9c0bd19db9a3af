//! `neverblock serve --upstream` end to end: the command in front of a real application (the
//! Python program in `peers/`), with files, X-Sendfile, the access log and metrics.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, Stdio};

use crate::serve_options::{wait_until, Serving};

/// `peers/python/upstream_app.py` on a port of its own, killed on drop.
struct App {
    child: Child,
    _stdin: ChildStdin,
    url: String,
}

impl App {
    fn start(root: &std::path::Path, port: u16) -> App {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../peers/python/upstream_app.py");
        let mut child = Command::new("python3")
            .arg(script)
            .arg("--root")
            .arg(root)
            .args(["--port", &port.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the Python application (python3 must be installed)");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().strip_prefix("listening on http://127.0.0.1:").and_then(|p| p.strip_suffix('/'));
        let port = port.unwrap_or_else(|| panic!("{line:?}")).to_owned();
        let stdin = child.stdin.take().unwrap();
        App { child, _stdin: stdin, url: format!("http://127.0.0.1:{port}") }
    }

    fn port(&self) -> u16 {
        self.url.rsplit(':').next().unwrap().parse().unwrap()
    }
}

impl Drop for App {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| b'a' + (i * 17 % 26) as u8).collect()
}

/// The body of a whole answer.
fn body(answer: &str) -> &str {
    answer.split_once("\r\n\r\n").map_or("", |(_, body)| body)
}

#[test]
fn serve_upstream_answers_from_files_first_then_from_the_application() {
    let dir = crate::Dir::new("serve-upstream");
    std::fs::write(dir.0.join("hello.txt"), "from a file\n").unwrap();
    let app = App::start(&dir.0, 0);
    let server = Serving::start(&[dir.0.to_str().unwrap(), "--upstream", &app.url], &[]);
    assert_eq!(body(&server.get("/hello.txt")), "from a file\n");
    let page = server.get("/hello");
    assert!(page.starts_with("HTTP/1.1 200 OK\r\n"), "{page}");
    assert_eq!(body(&page), "hello, world!\n");
    let posted = server.send("POST /hello.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi");
    assert!(posted.starts_with("HTTP/1.1 404 "), "a POST goes to the application, which has no such route: {posted}");
    assert_eq!(body(&posted), "no such route\n");

    let alone = Serving::start(&["--upstream", &app.url], &[]);
    assert_eq!(body(&alone.get("/hello")), "hello, world!\n");
    assert_eq!(body(&alone.get("/hello.txt")), "no such route\n", "without DIR every request goes upstream");
}

#[test]
fn serve_upstream_sends_x_sendfile_answers_from_the_root_and_refuses_others() {
    let dir = crate::Dir::new("serve-xsendfile");
    std::fs::write(dir.0.join("file.bin"), pattern(100_000)).unwrap();
    let outside = crate::Dir::new("serve-xsendfile-outside");
    std::fs::write(outside.0.join("secret.txt"), "SECRET").unwrap();
    let app = App::start(&dir.0, 0);
    let root = dir.0.to_str().unwrap();
    let location = format!("/files/={root}");
    let args = [
        "--upstream",
        &app.url,
        "--x-sendfile-root",
        root,
        "--x-accel-location",
        &location,
        "--access-log",
        "%>s %U%q",
    ];
    let mut server = Serving::start(&args, &[]);
    let range = server.send(
        "GET /file?path=file.bin&mode=sendfile HTTP/1.1\r\nHost: x\r\nRange: bytes=5-9\r\nConnection: close\r\n\r\n",
    );
    assert!(range.starts_with("HTTP/1.1 206 Partial Content\r\n"), "{range}");
    assert!(range.contains("\r\nContent-Range: bytes 5-9/100000\r\n") && !range.contains("X-Sendfile"), "{range}");
    assert_eq!(body(&range).as_bytes(), &pattern(100_000)[5..10]);
    let accel = server.get("/file?path=file.bin&mode=accel");
    assert!(accel.starts_with("HTTP/1.1 200 OK\r\n") && !accel.contains("X-Accel-Redirect"), "{accel}");
    let secret = outside.0.join("secret.txt");
    let refused = server.get(&format!("/sendfile?path={}", secret.display()));
    assert!(
        refused.starts_with("HTTP/1.1 404 ") && !refused.contains("SECRET") && !refused.contains("X-Sendfile"),
        "{refused}"
    );
    wait_until("the warning", || server.stderr().contains(secret.to_str().unwrap()));
    let log = server.stop();
    assert_eq!(
        log.lines().collect::<Vec<_>>(),
        [
            "206 /file?path=file.bin&mode=sendfile".to_owned(),
            "200 /file?path=file.bin&mode=accel".to_owned(),
            format!("404 /sendfile?path={}", secret.display()),
        ]
    );
}

#[test]
fn serve_upstream_answers_502_while_the_application_is_down_and_goes_on() {
    let dir = crate::Dir::new("serve-upstream-down");
    let app = App::start(&dir.0, 0);
    let port = app.port();
    let server = Serving::start(&["--upstream", &app.url, "--metrics-path", "/metrics"], &[]);
    assert_eq!(body(&server.get("/hello")), "hello, world!\n");
    drop(app);
    let down = server.get("/hello");
    assert!(down.starts_with("HTTP/1.1 502 Bad Gateway\r\n"), "{down}");
    wait_until("the warning", || server.stderr().contains("answering 502"));
    let page = server.get("/metrics");
    assert!(page.contains("\nneverblock_proxy_upstream_errors_total{kind=\"refused\"} 1\n"), "{page}");
    let _again = App::start(&dir.0, port);
    assert_eq!(body(&server.get("/hello")), "hello, world!\n", "back with the application");
}

#[test]
fn xsendfile_bench_prints_both_ways_with_every_download_right() {
    let out = Command::new(env!("CARGO_BIN_EXE_neverblock"))
        .args([
            "bench",
            "xsendfile",
            "-c",
            "3",
            "--window",
            "1500ms",
            "--file-size",
            "400000",
            "--rate",
            "1000000",
            "--json",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let rows: Vec<serde_json::Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows.len(), 2, "{rows:?}");
    for (row, name) in rows.iter().zip(["neverblock", "app-streaming"]) {
        assert_eq!((row["bench"].as_str(), row["impl"].as_str()), (Some("xsendfile"), Some(name)), "{row}");
        assert_eq!(row["params"]["clients"], 3);
        let metrics = &row["metrics"];
        assert_eq!(metrics["downloads_bad"], 0, "{row}");
        assert!(metrics["downloads_complete"].as_u64().unwrap() >= 3, "each client's 0.4 s download ended: {row}");
        assert!(metrics["aggregate_mb_per_s"].as_f64().unwrap() > 0.0, "{row}");
        assert!(metrics["p99_first_byte_ms"].as_f64().unwrap() > 0.0, "{row}");
    }
}

#[test]
fn proxy_hello_bench_measures_the_proxy_beside_the_upstream_alone() {
    let out = Command::new(env!("CARGO_BIN_EXE_neverblock"))
        .args(["bench", "proxy-hello", "-c", "10", "--duration", "300ms", "--warmup", "100ms", "--runs", "1", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<serde_json::Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let names: Vec<&str> = rows.iter().map(|r| r["impl"].as_str().unwrap()).collect();
    assert_eq!(names, ["neverblock", "upstream-alone"], "no nginx row without --peers");
    for row in &rows {
        assert!(row["metrics"]["requests_per_s"].as_f64().unwrap() > 0.0, "{row}");
        assert_eq!(row["params"]["connections"], 10);
    }
}

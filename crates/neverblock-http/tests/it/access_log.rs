//! Access logs: whole lines compared with what Apache writes for the same exchange, escaping of
//! what a client sends, no line lost to a shutdown, and rotation.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use neverblock_http::server::{AccessLog, LogFormat, Request, Response, Server};

use crate::serving::{Running, TempDir};

/// The application: `/hello` says hello, `/cookies` sets two cookies, `/slow` takes 1.1 s, the
/// rest are 404.
fn app(request: &mut Request<'_>) -> Response {
    match request.path() {
        "/cookies" => Response::new(204).header("Set-Cookie", "a=1").header("Set-Cookie", "b=2; Path=/"),
        "/slow" => {
            neverblock::sleep(Duration::from_millis(1100));
            Response::new(200).body("late\n")
        }
        "/missing" => Response::new(404).header("Content-Type", "text/html").body("<p>no</p>"),
        _ => Response::new(200).header("Content-Type", "text/plain; charset=utf-8").body("hello"),
    }
}

/// A server of `app` logging in `pattern` to a file, and the file.
struct Logged {
    server: Running,
    log: AccessLog,
    path: PathBuf,
    dir: TempDir,
}

fn logged(pattern: &str) -> Logged {
    let dir = TempDir::new("access-log");
    let path = dir.path().join("access.log");
    let log = AccessLog::file(&path, pattern.parse().unwrap()).unwrap().server_name("test.example");
    let server = Running::with(Server::builder().workers(1).on_response(log.hook()), app);
    Logged { server, log, path, dir }
}

impl Logged {
    /// Shuts the server down gracefully, closes the log, and returns its lines.
    fn lines(self) -> Vec<String> {
        self.finish().0
    }

    /// [`lines`](Logged::lines), and the directory the log is in.
    fn finish(self) -> (Vec<String>, TempDir) {
        self.server.handle.shutdown();
        self.server.join().unwrap();
        self.log.close();
        let text = std::fs::read_to_string(&self.path).unwrap();
        assert!(text.ends_with('\n') || text.is_empty(), "{text:?}");
        (text.lines().map(str::to_owned).collect(), self.dir)
    }

    fn port(&self) -> u16 {
        self.server.addr.port()
    }
}

#[test]
fn every_directive_is_written_as_apache_writes_it() {
    let site = logged(
        r#"%h %a %A %l %u "%r" %>s %s %b %B %m %U %q %H %v %V %p "%{User-Agent}i" "%{X-Multi}i" %{Content-Type}o %{Set-Cookie}o %{X-None}i %%"#,
    );
    site.server.send(
        "GET /a%20b/./c//d?x=1&y=%22 HTTP/1.1\r\nHost: Test.Example.COM:8080\r\nUser-Agent: agent \"7\" \\ x\r\n\
         X-Multi: one\r\nX-Multi: two\r\nConnection: close\r\n\r\n",
    );
    site.server.send("HEAD /h HTTP/1.0\r\n\r\n");
    site.server.send("GET /cookies HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let port = site.port();
    let lines = site.lines();
    let expected = [
        format!(
            "127.0.0.1 127.0.0.1 127.0.0.1 - - \"GET /a%20b/./c//d?x=1&y=%22 HTTP/1.1\" 200 200 5 5 GET /a b/c/d ?x=1&y=%22 \
             HTTP/1.1 test.example test.example.com {port} \"agent \\\"7\\\" \\\\ x\" \"one, two\" text/plain - - %"
        ),
        format!(
            "127.0.0.1 127.0.0.1 127.0.0.1 - - \"HEAD /h HTTP/1.0\" 200 200 - 0 HEAD /h  HTTP/1.0 test.example \
             test.example {port} \"-\" \"-\" text/plain - - %"
        ),
        format!(
            "127.0.0.1 127.0.0.1 127.0.0.1 - - \"GET /cookies HTTP/1.1\" 204 204 - 0 GET /cookies  HTTP/1.1 test.example \
             x {port} \"-\" \"-\" - a=1, b=2; Path=/ - %"
        ),
    ];
    assert_eq!(lines, expected);
}

#[test]
fn a_request_line_with_a_quote_and_a_control_byte_is_escaped() {
    let site = logged(r#"%h %l %u "%r" %>s %m %U %q %H "%{User-Agent}i""#);
    let answer = site.server.send("GET /q\"\x01?a=\\ HTTP/1.1\r\nHost: x\r\nUser-Agent: ua\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    let control_in_field = site.server.send("GET /ok HTTP/1.1\r\nHost: x\r\nUser-Agent: a\x7fb\r\n\r\n");
    assert!(control_in_field.starts_with("HTTP/1.1 400 "), "{control_in_field}");
    site.server.send("GET /tab\"quote HTTP/1.1\r\nHost: x\r\nUser-Agent: caf\u{e9}\r\nConnection: close\r\n\r\n");
    assert_eq!(
        site.lines(),
        [
            r#"127.0.0.1 - - "GET /q\"\x01?a=\\ HTTP/1.1" 400 GET /q\"\x01 ?a=\\ HTTP/1.1 "-""#,
            r#"127.0.0.1 - - "GET /ok HTTP/1.1" 400 GET /ok  HTTP/1.1 "-""#,
            r#"127.0.0.1 - - "GET /tab\"quote HTTP/1.1" 200 GET /tab\"quote  HTTP/1.1 "caf\xc3\xa9""#,
        ]
    );
}

#[test]
fn the_common_and_combined_formats_are_apaches() {
    let site = logged("combined");
    site.server.send("GET /missing HTTP/1.1\r\nHost: x\r\nReferer: http://r.example/\r\nConnection: close\r\n\r\n");
    let before = SystemTime::now();
    let lines = site.lines();
    assert_eq!(lines.len(), 1);
    let line = &lines[0];
    let (head, rest) = line.split_once(" [").unwrap();
    let (time, tail) = rest.split_once("] ").unwrap();
    assert_eq!(head, "127.0.0.1 - -");
    assert_eq!(tail, r#""GET /missing HTTP/1.1" 404 9 "http://r.example/" "-""#);
    // [25/Nov/2026:19:33:12 +0000]: day, month, year, time, and the zone's offset as +hhmm.
    let (date, zone) = time.split_once(' ').unwrap();
    assert!(zone.len() == 5 && (zone.starts_with('+') || zone.starts_with('-')), "{time}");
    assert_eq!(date.len(), "25/Nov/2026:19:33:12".len(), "{time}");
    let year = before.duration_since(UNIX_EPOCH).unwrap().as_secs() / 31_556_952 + 1970;
    assert!(date.contains(&format!("/{year}:")) || date.contains(&format!("/{}:", year - 1)), "{time}");
    assert_eq!(LogFormat::common().pattern(), r#"%h %l %u %t "%r" %>s %b"#);
}

#[test]
fn conditions_durations_and_epoch_times() {
    let site = logged("%200{X-Only}i|%!200{X-Only}i|%D|%T|%{ms}T|%{sec}t|%{end:msec}t|%{%Y}t");
    let before = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    site.server.send("GET /slow HTTP/1.1\r\nHost: x\r\nX-Only: yes\r\nConnection: close\r\n\r\n");
    site.server.send("GET /missing HTTP/1.1\r\nHost: x\r\nX-Only: yes\r\nConnection: close\r\n\r\n");
    let after = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let lines = site.lines();
    let fields: Vec<Vec<&str>> = lines.iter().map(|l| l.split('|').collect()).collect();
    assert_eq!(&fields[0][..2], ["yes", "-"], "{lines:?}");
    assert_eq!(&fields[1][..2], ["-", "yes"], "{lines:?}");
    let number = |s: &str| s.parse::<u128>().unwrap_or_else(|_| panic!("a number: {s:?}"));
    let (micros, seconds, millis) = (number(fields[0][2]), number(fields[0][3]), number(fields[0][4]));
    assert!(micros >= 1_100_000 && seconds >= 1 && millis >= 1100, "{lines:?}");
    assert_eq!(seconds, micros / 1_000_000);
    let (started, ended) = (number(fields[0][5]), number(fields[0][6]));
    assert!(u128::from(before.as_secs()) <= started && started <= u128::from(after.as_secs()), "{lines:?}");
    assert!(ended >= started * 1000 + 1100 && ended <= after.as_millis(), "{lines:?}");
    let year = number(fields[0][7]);
    assert!((2020..3000).contains(&year), "strftime's %Y: {lines:?}");
}

#[test]
fn a_graceful_shutdown_loses_no_line() {
    let site = logged("%>s %U");
    let (clients, per_client) = (8, 250);
    let addr = site.server.addr;
    let threads: Vec<_> = (0..clients)
        .map(|c| {
            std::thread::spawn(move || {
                let mut stream = std::net::TcpStream::connect(addr).unwrap();
                let requests: String =
                    (0..per_client).map(|i| format!("GET /{c}/{i} HTTP/1.1\r\nHost: x\r\n\r\n")).collect();
                stream.write_all(requests.as_bytes()).unwrap();
                stream.shutdown(std::net::Shutdown::Write).unwrap();
                let mut answers = String::new();
                stream.read_to_string(&mut answers).unwrap();
                answers.matches("HTTP/1.1 200 OK").count()
            })
        })
        .collect();
    let answered: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(answered, clients * per_client);
    let lines = site.lines();
    assert_eq!(lines.len(), clients * per_client, "a line for every request");
    for c in 0..clients {
        let mine: Vec<&String> = lines.iter().filter(|l| l.starts_with(&format!("200 /{c}/"))).collect();
        let expected: Vec<String> = (0..per_client).map(|i| format!("200 /{c}/{i}")).collect();
        assert_eq!(mine, expected.iter().collect::<Vec<_>>(), "client {c}'s lines, in order");
    }
}

#[test]
fn a_reopened_log_writes_to_a_new_file_at_its_path() {
    let site = logged("%U");
    site.server.send("GET /before HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let rotated = site.path.with_extension("log.1");
    std::fs::rename(&site.path, &rotated).unwrap();
    site.log.reopen();
    site.server.send("GET /after HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let (lines, _dir) = site.finish();
    assert_eq!(lines, ["/after"]);
    assert_eq!(std::fs::read_to_string(rotated).unwrap(), "/before\n");
}

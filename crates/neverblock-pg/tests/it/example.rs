//! The example web app, run as a user would: it serves a table as JSON.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};

use crate::support;

/// The example built beside this test binary.
fn example() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let example = exe.parent().and_then(|deps| deps.parent()).unwrap().join("examples").join("web_app");
    assert!(example.exists(), "cargo test builds the examples: {}", example.display());
    example
}

/// Starts the example on `database_url`; returns it and its address.
fn start(database_url: &str) -> (std::process::Child, String) {
    let mut child = Command::new(example())
        .env("DATABASE_URL", database_url)
        .env("LISTEN", "127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the example");
    let mut url = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut url).unwrap();
    let addr = url.trim().trim_start_matches("http://").trim_end_matches("/items").to_owned();
    (child, addr)
}

/// `GET /items` from the example at `addr`: the whole answer.
fn get_items(addr: &str) -> String {
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
    conn.write_all(b"GET /items HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    answer
}

/// Stops the example as a service manager would, and says whether it stopped cleanly.
fn stop(mut child: std::process::Child) -> std::process::ExitStatus {
    // The shell's own `kill`: no procps needed.
    let _ = Command::new("sh").arg("-c").arg(format!("kill -TERM {}", child.id())).status();
    child.wait().unwrap()
}

#[test]
fn the_web_app_example_serves_its_table_as_json_and_stops_on_sigterm() {
    let (child, addr) = start(&support::postgres().url());
    let answer = get_items(&addr);
    let status = stop(child);
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(answer.contains("\r\nContent-Type: application/json\r\n"), "{answer}");
    let body = &answer[answer.find("\r\n\r\n").unwrap() + 4..];
    let items: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(items[0]["name"], "fiber", "{body}");
    assert_eq!(items.as_array().map(Vec::len), Some(3), "{body}");
    assert!(status.success(), "a graceful stop: {status}");
}

#[test]
fn the_web_app_example_serves_while_its_database_is_down_and_says_why() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (child, addr) = start(&format!("postgres://app:hunter2@127.0.0.1:{port}/shop"));
    let answers = [get_items(&addr), get_items(&addr)];
    let status = stop(child);
    for answer in answers {
        assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
        assert!(answer.contains(&format!("cannot connect to PostgreSQL at 127.0.0.1:{port}")), "{answer}");
        assert!(!answer.contains("hunter2"), "{answer}");
    }
    assert!(status.success(), "a graceful stop: {status}");
}

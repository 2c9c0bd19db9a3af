//! The throwaway server itself: dropping it, or a signal to the whole process group, leaves no
//! process and no directory; its port is outside the kernel's ephemeral range.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use neverblock_pg::throwaway::Postgres;

#[test]
fn a_dropped_server_leaves_no_process_and_no_directory() {
    let postgres = Postgres::start().unwrap();
    let dir = postgres.dir().to_owned();
    let pid_file = std::fs::read_to_string(dir.join("data/postmaster.pid")).unwrap();
    let pid = pid_file.lines().next().unwrap().trim().to_owned();
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    drop(postgres);
    assert!(!dir.exists(), "{} is gone", dir.display());
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "postmaster {pid} is gone");
}

#[test]
fn its_port_is_below_the_ephemeral_range_a_connect_may_take() {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap();
    let low: u16 = range.split_whitespace().next().unwrap().parse().unwrap();
    let port = crate::support::postgres().port();
    assert!(port < low, "port {port} is not below the ephemeral range {range}");
}

/// Starts the web_app example (which starts a throwaway server of its own) in a process group of
/// its own, signals the group with `signal`, and returns the server's directory once the example
/// has exited.
fn throwaway_dir_after_a_group_signal(signal: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let example = exe.parent().and_then(|deps| deps.parent()).unwrap().join("examples").join("web_app");
    let mut child = std::os::unix::process::CommandExt::process_group(
        Command::new(example).env_remove("DATABASE_URL").env("LISTEN", "127.0.0.1:0"),
        0,
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.starts_with("http://"), "it serves: {line:?}");
    let dir = std::env::temp_dir().join(format!("neverblock-pg-{}-0", child.id()));
    assert!(dir.join("data").exists(), "its throwaway server is at {}", dir.display());
    // The shell's own `kill`, to the whole group, as `timeout` and Ctrl-C do.
    let killed = Command::new("sh").arg("-c").arg(format!("kill -{signal} -{}", child.id())).status().unwrap();
    assert!(killed.success(), "the group was signalled");
    child.wait().unwrap();
    dir
}

#[test]
fn a_signal_to_the_whole_process_group_still_removes_the_directory() {
    for signal in ["TERM", "INT"] {
        let dir = throwaway_dir_after_a_group_signal(signal);
        let deadline = Instant::now() + Duration::from_secs(20);
        while dir.exists() && Instant::now() < deadline {
            #[expect(clippy::disallowed_methods, reason = "a plain test thread waits for another process")]
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!dir.exists(), "SIGTERM to the group left {} behind", dir.display());
    }
}

//! The throwaway server itself: dropping it, or a signal to the whole process group, leaves no
//! process and no directory; its port is outside the kernel's ephemeral range.

use neverblock_pg::throwaway::Postgres;

use crate::support::{assert_gone, signal_group_and_assert_removed, start_example_in_own_group};

#[test]
fn a_dropped_server_leaves_no_process_and_no_directory() {
    let postgres = Postgres::start().unwrap();
    let dir = postgres.dir().to_owned();
    let pid_file = std::fs::read_to_string(dir.join("data/postmaster.pid")).unwrap();
    let pid = pid_file.lines().next().unwrap().trim().to_owned();
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    drop(postgres);
    assert_gone(&pid, &dir);
}

#[test]
fn its_port_is_below_the_ephemeral_range_a_connect_may_take() {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap();
    let low: u16 = range.split_whitespace().next().unwrap().parse().unwrap();
    let port = crate::support::postgres().port();
    assert!(port < low, "port {port} is not below the ephemeral range {range}");
}

#[test]
fn a_signal_to_the_whole_process_group_still_removes_the_directory() {
    for signal in ["TERM", "INT"] {
        // The web_app example starts a throwaway server of its own.
        let (mut child, line) = start_example_in_own_group("web_app", &[("LISTEN", "127.0.0.1:0")]);
        assert!(line.starts_with("http://"), "it serves: {line:?}");
        let dir = std::env::temp_dir().join(format!("neverblock-pg-{}-0", child.id()));
        assert!(dir.join("data").exists(), "its throwaway server is at {}", dir.display());
        signal_group_and_assert_removed(&mut child, signal, &[dir]);
    }
}

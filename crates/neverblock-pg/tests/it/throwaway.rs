//! The throwaway server itself: dropping it leaves no process and no directory.

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

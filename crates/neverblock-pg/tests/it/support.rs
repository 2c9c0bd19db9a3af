//! The shared fixture: one throwaway server per test binary, and helpers.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use neverblock_pg::throwaway::pgbouncer::PgBouncer;
use neverblock_pg::throwaway::Postgres;
use neverblock_pg::{Config, Connection};

/// The binary's server, started by the first test that asks. Its supervisor
/// stops it and removes its directory when this process exits.
pub(crate) fn postgres() -> &'static Postgres {
    static POSTGRES: OnceLock<Postgres> = OnceLock::new();
    POSTGRES.get_or_init(|| Postgres::start().unwrap_or_else(|e| panic!("cannot start a throwaway PostgreSQL: {e}")))
}

/// The binary's PgBouncer (transaction pooling) in front of its server, started
/// by the first test that asks; gone with this process, as the server is.
pub(crate) fn pgbouncer() -> &'static PgBouncer {
    static PGBOUNCER: OnceLock<PgBouncer> = OnceLock::new();
    PGBOUNCER.get_or_init(|| {
        PgBouncer::start(&postgres().config()).unwrap_or_else(|e| panic!("cannot start a throwaway PgBouncer: {e}"))
    })
}

/// The superuser over the unix socket.
pub(crate) fn config() -> Config {
    postgres().config()
}

/// Runs `f` in a fiber of a new runtime, failing the test if it takes over a minute
/// (a hang guard only: nothing here is expected to come near it).
pub(crate) fn run<T: 'static>(f: impl FnOnce() -> T + 'static) -> T {
    postgres(); // started outside the runtime: its start-up waits block the thread (so is PgBouncer, where used)
    neverblock::run(|| neverblock::timeout(Duration::from_secs(60), f).expect("the test hung for a minute"))
}

/// A connection as the superuser.
pub(crate) fn admin() -> Connection {
    Connection::connect(&config()).expect("the superuser connects")
}

/// A name no other test uses (tables, roles).
pub(crate) fn unique(prefix: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!("{prefix}_{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// How many statements `conn`'s server session has prepared.
pub(crate) fn prepared_statements(conn: &mut Connection) -> i64 {
    conn.query_one("select count(*) from pg_prepared_statements", &[]).expect("pg_prepared_statements").get(0)
}

/// How many sessions of `application_name` the server has now.
pub(crate) fn sessions_named(admin: &mut Connection, name: &str) -> i64 {
    admin
        .query_one("select count(*) from pg_stat_activity where application_name = $1", &[&name])
        .expect("pg_stat_activity")
        .get(0)
}

/// A process's pid and directory, both gone once it has stopped (asserted).
pub(crate) fn assert_gone(pid: &str, dir: &Path) {
    assert!(!dir.exists(), "{} is gone", dir.display());
    assert!(!Path::new(&format!("/proc/{pid}")).exists(), "{pid} is gone");
}

/// Starts the example program `name` (built beside this test binary) in a process group of its
/// own; returns it and the first line it prints.
pub(crate) fn start_example_in_own_group(name: &str, env: &[(&str, &str)]) -> (Child, String) {
    let exe = std::env::current_exe().unwrap();
    let example = exe.parent().and_then(|deps| deps.parent()).unwrap().join("examples").join(name);
    let mut command = Command::new(example);
    command.env_remove("DATABASE_URL").envs(env.iter().copied());
    let mut child = std::os::unix::process::CommandExt::process_group(&mut command, 0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    (child, line)
}

/// Sends `signal` to `child`'s whole process group with the shell's own `kill`, as `timeout` and
/// Ctrl-C do, waits for `child` to exit, then up to 20 s for every one of `dirs` to be removed
/// (asserted).
pub(crate) fn signal_group_and_assert_removed(child: &mut Child, signal: &str, dirs: &[PathBuf]) {
    let killed = Command::new("sh").arg("-c").arg(format!("kill -{signal} -{}", child.id())).status().unwrap();
    assert!(killed.success(), "the group was signalled");
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while dirs.iter().any(|d| d.exists()) && Instant::now() < deadline {
        #[expect(clippy::disallowed_methods, reason = "a plain test thread waits for other processes")]
        std::thread::sleep(Duration::from_millis(20));
    }
    for dir in dirs {
        assert!(!dir.exists(), "SIG{signal} to the group left {} behind", dir.display());
    }
}

//! A throwaway PgBouncer in front of a server, for tests and benchmarks:
//! transaction pooling, its own temporary directory and free loopback port,
//! stopped and removed when dropped or when the process is gone, as the
//! throwaway PostgreSQL is (the same kind of `sh` supervisor, reading a pipe
//! from this process, which a signal to the whole process group does not end).
//!
//! Clients log in without a password (`auth_type = trust`, for the user the
//! server's [`Config`] names); PgBouncer logs in to the server as that user,
//! with the config's password if it has one. As root, PgBouncer (which refuses
//! to run as root) runs as the `postgres` user (else `nobody`).

use std::fmt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Stdio};
use std::time::Duration;

use super::{free_port, fresh_dir, wait_serving, Account};
use crate::config::Host;
use crate::{Config, Error};

/// What to tell someone whose machine has no PgBouncer.
///
/// # Examples
///
/// ```
/// assert!(neverblock_pg::throwaway::pgbouncer::INSTALL_HINT.contains("apt-get install pgbouncer"));
/// ```
pub const INSTALL_HINT: &str = "PgBouncer was not found on PATH or in /usr/sbin: install it \
     (Debian/Ubuntu: `apt-get install pgbouncer`)";

/// How long a starting PgBouncer may take to pass a query through.
const READY_DEADLINE: Duration = Duration::from_secs(30);

const SUPERVISOR: &str = r#"
set -u
# As the throwaway server's supervisor: a signal to the whole process group must not end this
# shell before its cleanup, which comes when its input ends. (PgBouncer sets its own handlers.)
trap '' INT TERM HUP QUIT
"$PGB_BIN" "$PGB_DIR/pgbouncer.ini" </dev/null >>"$PGB_DIR/pgbouncer.log" 2>&1 &
pid=$!
while read -r _; do :; done
# SIGTERM: PgBouncer's immediate shutdown (SIGINT would wait for clients' transactions).
kill -TERM "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
rm -rf "$PGB_DIR"
"#;

/// A running throwaway PgBouncer in transaction pooling mode; dropping it stops
/// it and removes its directory.
///
/// Behind it a session's prepared statements are not the next transaction's,
/// so connect with the statement cache off: [`config`](PgBouncer::config) and
/// [`url`](PgBouncer::url) do.
///
/// # Examples
///
/// ```
/// use neverblock_pg::throwaway::{pgbouncer::PgBouncer, Postgres};
///
/// # if Postgres::binaries().is_err() || PgBouncer::binary().is_err() { return; } // not installed here
/// let postgres = Postgres::start().unwrap();
/// let pgbouncer = PgBouncer::start(&postgres.config()).unwrap();
/// let config = pgbouncer.config();
/// assert_eq!(config.get_statement_cache_capacity(), 0);
/// let n: i32 = neverblock::run(move || {
///     let mut conn = neverblock_pg::Connection::connect(&config).unwrap();
///     conn.query_one("select $1::int4 + 1", &[&41i32]).unwrap().get(0)
/// });
/// assert_eq!(n, 42);
/// let dir = pgbouncer.dir().to_owned();
/// drop(pgbouncer);
/// assert!(!dir.exists(), "stopped and removed");
/// ```
pub struct PgBouncer {
    dir: PathBuf,
    port: u16,
    user: String,
    dbname: String,
    supervisor: Child,
    commands: Option<ChildStdin>,
}

impl PgBouncer {
    /// The `pgbouncer` program: the first on `PATH`, else in `/usr/sbin`
    /// (Debian's, which a user's `PATH` may not include).
    ///
    /// # Errors
    ///
    /// [`Error::Usage`] with [`INSTALL_HINT`] when there is none.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_pg::throwaway::pgbouncer::PgBouncer;
    ///
    /// match PgBouncer::binary() {
    ///     Ok(path) => assert!(path.ends_with("pgbouncer")),
    ///     Err(e) => assert!(e.to_string().contains("apt-get install pgbouncer")),
    /// }
    /// ```
    pub fn binary() -> Result<PathBuf, Error> {
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .chain(["/usr/sbin".into(), "/usr/local/sbin".into()])
            .map(|dir| dir.join("pgbouncer"))
            .find(|candidate| candidate.is_file())
            .ok_or_else(|| Error::Usage(INSTALL_HINT.into()))
    }

    /// Starts PgBouncer in front of the server `server` points at, for its user
    /// (and password, if it has one), and waits until a query passes through.
    /// It blocks the thread: call it outside a runtime (or in `spawn_blocking`).
    ///
    /// # Errors
    ///
    /// [`Error::Usage`] when PgBouncer is not installed, or does not start or
    /// reach the server (with its log); [`Error::Io`] for its directory.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use neverblock_pg::throwaway::{pgbouncer::PgBouncer, Postgres};
    ///
    /// let postgres = Postgres::start().unwrap();
    /// let pgbouncer = PgBouncer::start(&postgres.config()).unwrap();
    /// println!("{}", pgbouncer.url());
    /// ```
    pub fn start(server: &Config) -> Result<PgBouncer, Error> {
        let bin = PgBouncer::binary()?;
        let account = Account::unprivileged();
        let dir = fresh_dir()?;
        let written = account.own(&dir).and_then(|()| free_port()).and_then(|port| {
            write_files(&dir, server, port)?;
            Ok(port)
        });
        let port = match written {
            Ok(port) => port,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        let mut child = account
            .command("sh")
            .args(["-c", SUPERVISOR])
            .env("PGB_BIN", &bin)
            .env("PGB_DIR", &dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| Error::Usage(format!("cannot start PgBouncer's supervisor: {e}")))?;
        let pgbouncer = PgBouncer {
            dir,
            port,
            user: server.get_user().to_owned(),
            dbname: server.get_dbname().to_owned(),
            commands: child.stdin.take(),
            supervisor: child,
        };
        pgbouncer.wait_ready()?;
        Ok(pgbouncer)
    }

    /// The server config's user and database through PgBouncer over TCP on
    /// 127.0.0.1, with the statement cache off.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let postgres = neverblock_pg::throwaway::Postgres::start().unwrap();
    /// let pgbouncer = neverblock_pg::throwaway::pgbouncer::PgBouncer::start(&postgres.config()).unwrap();
    /// assert_eq!(pgbouncer.config().get_host().to_string(), format!("127.0.0.1:{}", pgbouncer.port()));
    /// ```
    pub fn config(&self) -> Config {
        Config::new().tcp("127.0.0.1", self.port).user(&self.user).dbname(&self.dbname).statement_cache_capacity(0)
    }

    /// The same as a URL (what `--url` takes).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let postgres = neverblock_pg::throwaway::Postgres::start().unwrap();
    /// let pgbouncer = neverblock_pg::throwaway::pgbouncer::PgBouncer::start(&postgres.config()).unwrap();
    /// assert!(pgbouncer.url().ends_with("?statement_cache_capacity=0"));
    /// ```
    pub fn url(&self) -> String {
        let (user, port, dbname) = (&self.user, self.port, &self.dbname);
        format!("postgres://{user}@127.0.0.1:{port}/{dbname}?statement_cache_capacity=0")
    }

    /// The TCP port it listens on (also the number in its socket's name, in [`dir`](PgBouncer::dir)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let postgres = neverblock_pg::throwaway::Postgres::start().unwrap();
    /// let pgbouncer = neverblock_pg::throwaway::pgbouncer::PgBouncer::start(&postgres.config()).unwrap();
    /// assert_ne!(pgbouncer.port(), postgres.port());
    /// ```
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The temporary directory: `pgbouncer.ini`, `userlist.txt`, `pgbouncer.log`, `pgbouncer.pid`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let postgres = neverblock_pg::throwaway::Postgres::start().unwrap();
    /// let pgbouncer = neverblock_pg::throwaway::pgbouncer::PgBouncer::start(&postgres.config()).unwrap();
    /// assert!(pgbouncer.dir().join("pgbouncer.ini").exists());
    /// ```
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Waits until a query passes through PgBouncer to the server.
    fn wait_ready(&self) -> Result<(), Error> {
        wait_serving(&self.config(), READY_DEADLINE, "the throwaway PgBouncer", &self.dir.join("pgbouncer.log"))
    }
}

/// Writes `pgbouncer.ini` (listening on `listen_port`) and `userlist.txt` for `server` into `dir`.
fn write_files(dir: &Path, server: &Config, listen_port: u16) -> Result<(), Error> {
    let unquotable = |s: &str| s.is_empty() || s.chars().any(|c| c.is_whitespace() || "'\"\\;".contains(c));
    let (host, port) = match server.get_host() {
        Host::Tcp(host, port) => (host.clone(), *port),
        Host::Unix(socket_dir, port) => (socket_dir.to_string_lossy().into_owned(), *port),
    };
    if unquotable(&host) || dir.to_str().is_none_or(unquotable) {
        return Err(Error::Usage(format!("PgBouncer's settings cannot name {host:?} or {}", dir.display())));
    }
    let dir_name = dir.display();
    let ini = format!(
        "[databases]\n\
         * = host={host} port={port}\n\
         [pgbouncer]\n\
         pool_mode = transaction\n\
         listen_addr = 127.0.0.1\n\
         listen_port = {listen_port}\n\
         unix_socket_dir = {dir_name}\n\
         auth_type = trust\n\
         auth_file = {dir_name}/userlist.txt\n\
         pidfile = {dir_name}/pgbouncer.pid\n\
         max_client_conn = 1000\n\
         log_connections = 0\n\
         log_disconnections = 0\n"
    );
    let quoted = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    let userlist = format!("{} {}\n", quoted(server.get_user()), quoted(server.get_password().unwrap_or("")));
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(Error::Io)?;
    std::fs::write(dir.join("pgbouncer.ini"), ini).map_err(Error::Io)?;
    std::fs::write(dir.join("userlist.txt"), userlist).map_err(Error::Io)
}

impl Drop for PgBouncer {
    /// Ends the supervisor's input and waits while it stops PgBouncer and removes the directory.
    fn drop(&mut self) {
        drop(self.commands.take());
        let _ = self.supervisor.wait();
    }
}

impl fmt::Debug for PgBouncer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgBouncer").field("dir", &self.dir).field("port", &self.port).finish_non_exhaustive()
    }
}

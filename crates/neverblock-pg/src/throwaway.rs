//! A throwaway PostgreSQL server in a temporary directory, for tests and
//! benchmarks: `initdb`, then `postgres` on a unix socket in that directory and
//! a free loopback port, stopped and removed when dropped — or, if the process
//! ends without dropping it (a `static` fixture, a crash, a kill), when the
//! process is gone.
//!
//! The server runs under a small `sh` supervisor whose standard input is a pipe
//! from this process. The supervisor starts `postgres` and then reads commands
//! (`restart`) from the pipe; at end of input — this process dropped the
//! server or exited, however it exited — it stops `postgres` (fast shutdown)
//! and removes the directory. As root (PostgreSQL refuses to run as root) both
//! run as the `postgres` user (else `nobody`), through `CommandExt::uid`.
//!
//! Authentication: the superuser `postgres` and every role are trusted, except
//! members of `md5_users` (md5) and of `scram_users` (SCRAM-SHA-256), over the
//! socket and TCP alike. The server is tuned for throwaway data (`fsync=off`).
//!
//! [`Postgres::start_with_tls`] also turns TLS on, with a throwaway CA of its own
//! and a server certificate it signed for `localhost` and `127.0.0.1`; over TCP,
//! members of `tls_users` may then log in only over TLS, and members of
//! `cert_users` only over TLS with a client certificate (`cert`), which the CA
//! issued for the role [`CLIENT_CERT_USER`].

use std::fmt;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::{Config, Connection, Error};

pub mod pgbouncer;

/// What to tell someone whose machine has no PostgreSQL.
///
/// # Examples
///
/// ```
/// assert!(neverblock_pg::throwaway::INSTALL_HINT.contains("apt-get install postgresql"));
/// ```
pub const INSTALL_HINT: &str =
    "PostgreSQL's server programs (initdb, postgres) were not found via `pg_config --bindir` \
     or in /usr/lib/postgresql/*/bin: install them (Debian/Ubuntu: `apt-get install postgresql`), \
     or point at a running server with a postgres:// URL";

/// How long a starting server may take to accept logins.
const READY_DEADLINE: Duration = Duration::from_secs(60);

const SUPERVISOR: &str = r#"
set -u
# A signal to the whole process group (Ctrl-C, `timeout`, a service manager) must not end the
# supervisor before its cleanup: it goes on until its input ends, which happens when the process
# that started it is gone. (postgres sets its own handlers: it still obeys these signals.)
trap '' INT TERM HUP QUIT
start() {
  "$PG_BIN/postgres" -D "$PG_DIR/data" -p "$PG_PORT" -k "$PG_DIR" -c listen_addresses=127.0.0.1 \
    -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300 \
    -c log_min_messages=warning -c log_connections=off </dev/null >>"$PG_DIR/postgres.log" 2>&1 &
  pid=$!
}
stop() { kill -INT "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }
start
while read -r command; do
  case "$command" in
    restart) stop; start; echo restarted ;;
    stop) stop; echo stopped ;;
    start) start; echo started ;;
  esac
done
stop
rm -rf "$PG_DIR"
"#;

const HBA: &str = "\
local all +md5_users md5
local all +scram_users scram-sha-256
local all all trust
host all +md5_users 127.0.0.1/32 md5
host all +scram_users 127.0.0.1/32 scram-sha-256
host all all 127.0.0.1/32 trust
";

/// Put before [`HBA`] on a server with TLS.
const TLS_HBA: &str = "\
hostnossl all +tls_users 127.0.0.1/32 reject
hostssl all +cert_users 127.0.0.1/32 cert
host all +cert_users 127.0.0.1/32 reject
";

/// The login role (a member of `cert_users`) that the client certificate of a server started
/// with [`Postgres::start_with_tls`] names.
///
/// # Examples
///
/// ```
/// assert_eq!(neverblock_pg::throwaway::CLIENT_CERT_USER, "cert_user");
/// ```
pub const CLIENT_CERT_USER: &str = "cert_user";

/// A running throwaway PostgreSQL server; dropping it stops it and removes its directory.
///
/// # Examples
///
/// ```
/// use neverblock_pg::throwaway::Postgres;
///
/// # if Postgres::binaries().is_err() { return; } // no PostgreSQL installed here
/// let postgres = Postgres::start().unwrap();
/// let config = postgres.config();
/// let one: i32 = neverblock::run(move || {
///     let mut conn = neverblock_pg::Connection::connect(&config).unwrap();
///     conn.query_one("select 1::int4", &[]).unwrap().get(0)
/// });
/// assert_eq!(one, 1);
/// let dir = postgres.dir().to_owned();
/// drop(postgres);
/// assert!(!dir.exists(), "stopped and removed");
/// ```
pub struct Postgres {
    dir: PathBuf,
    port: u16,
    /// The certificate files, when TLS is on.
    tls: Option<TlsFiles>,
    supervisor: Mutex<Supervisor>,
}

/// What a server with TLS wrote into its directory for clients.
struct TlsFiles {
    ca_cert: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

struct Supervisor {
    child: Child,
    commands: Option<ChildStdin>,
    replies: BufReader<ChildStdout>,
}

impl Postgres {
    /// The directory holding `initdb` and `postgres`: `pg_config --bindir`, else
    /// the newest `/usr/lib/postgresql/*/bin`.
    ///
    /// # Errors
    ///
    /// [`Error::Usage`] with [`INSTALL_HINT`] when neither has them.
    ///
    /// # Examples
    ///
    /// ```
    /// match neverblock_pg::throwaway::Postgres::binaries() {
    ///     Ok(dir) => assert!(dir.join("postgres").exists()),
    ///     Err(e) => assert!(e.to_string().contains("apt-get install postgresql")),
    /// }
    /// ```
    pub fn binaries() -> Result<PathBuf, Error> {
        let has_server = |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
        let from_pg_config = Command::new("pg_config")
            .arg("--bindir")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
        if let Some(dir) = from_pg_config.filter(|d| has_server(d)) {
            return Ok(dir);
        }
        let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
            .filter(|(_, dir)| has_server(dir))
            .collect();
        versions.sort();
        versions.pop().map(|(_, dir)| dir).ok_or_else(|| Error::Usage(INSTALL_HINT.into()))
    }

    /// Makes a database cluster in a new temporary directory and starts a server
    /// on it. It waits for `initdb` with the thread blocked: call it outside a
    /// runtime (or in `spawn_blocking`).
    ///
    /// # Errors
    ///
    /// [`Error::Usage`] when PostgreSQL is not installed, or `initdb` or the
    /// server fails (with the server's log); [`Error::Io`] for the directory.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let postgres = neverblock_pg::throwaway::Postgres::start().unwrap();
    /// println!("{}", postgres.url());
    /// ```
    pub fn start() -> Result<Postgres, Error> {
        Postgres::start_with(false)
    }

    /// Like [`start`](Postgres::start), with TLS on (`ssl=on`): a throwaway CA (see
    /// [`ca_cert_path`](Postgres::ca_cert_path)) signs the server's certificate for
    /// `localhost` and `127.0.0.1`, and a client certificate for [`CLIENT_CERT_USER`].
    ///
    /// # Errors
    ///
    /// As [`start`](Postgres::start); [`Error::Usage`] when the certificates cannot be made.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_pg::{config::SslMode, throwaway::Postgres, Connection};
    ///
    /// # if Postgres::binaries().is_err() { return; } // no PostgreSQL installed here
    /// let postgres = Postgres::start_with_tls().unwrap();
    /// let config = postgres
    ///     .tcp_config()
    ///     .tcp("localhost", postgres.port())
    ///     .ssl_mode(SslMode::VerifyFull)
    ///     .ssl_root_cert(postgres.ca_cert_path().unwrap());
    /// let over_tls: bool = neverblock::run(move || {
    ///     let mut conn = Connection::connect(&config).unwrap();
    ///     conn.query_one("select ssl from pg_stat_ssl where pid = pg_backend_pid()", &[]).unwrap().get(0)
    /// });
    /// assert!(over_tls);
    /// ```
    pub fn start_with_tls() -> Result<Postgres, Error> {
        Postgres::start_with(true)
    }

    fn start_with(tls: bool) -> Result<Postgres, Error> {
        let bin = Postgres::binaries()?;
        let account = Account::unprivileged();
        let dir = fresh_dir()?;
        account.own(&dir)?;
        let initdb = account
            .command(bin.join("initdb"))
            .args(["-D"])
            .arg(dir.join("data"))
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync"])
            .output();
        match initdb {
            Ok(out) if out.status.success() => {}
            Ok(out) => {
                let _ = std::fs::remove_dir_all(&dir);
                let log = String::from_utf8_lossy(&out.stderr).into_owned();
                return Err(Error::Usage(format!("initdb failed: {log}")));
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(Error::Usage(format!("cannot run initdb: {e}")));
            }
        }
        let tls = match tls {
            true => Some(turn_tls_on(&dir, &account).inspect_err(|_| {
                let _ = std::fs::remove_dir_all(&dir);
            })?),
            false => None,
        };
        let hba = if tls.is_some() { format!("{TLS_HBA}{HBA}") } else { HBA.to_owned() };
        std::fs::write(dir.join("data/pg_hba.conf"), hba).map_err(Error::Io)?;
        let port = free_port()?;
        let mut child = account
            .command("sh")
            .args(["-c", SUPERVISOR])
            .env("PG_BIN", &bin)
            .env("PG_DIR", &dir)
            .env("PG_PORT", port.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| Error::Usage(format!("cannot start the server's supervisor: {e}")))?;
        let supervisor = Supervisor {
            commands: child.stdin.take(),
            replies: BufReader::new(child.stdout.take().expect("piped")),
            child,
        };
        let postgres = Postgres { dir, port, tls, supervisor: Mutex::new(supervisor) };
        postgres.wait_ready()?;
        let mut admin = Connection::connect(&postgres.config())?;
        admin.batch_execute("create role md5_users nologin; create role scram_users nologin")?;
        if postgres.tls.is_some() {
            admin.batch_execute(&format!(
                "create role tls_users nologin; create role cert_users nologin; \
                 create role {CLIENT_CERT_USER} login in role cert_users"
            ))?;
        }
        Ok(postgres)
    }

    /// The superuser `postgres` on database `postgres`, over the unix socket.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let postgres = neverblock_pg::throwaway::Postgres::start().unwrap();
    /// assert_eq!(postgres.config().get_user(), "postgres");
    /// ```
    pub fn config(&self) -> Config {
        Config::new().unix(&self.dir, self.port).user("postgres").dbname("postgres")
    }

    /// The superuser over TCP on 127.0.0.1.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let postgres = neverblock_pg::throwaway::Postgres::start().unwrap();
    /// assert_eq!(postgres.tcp_config().get_host().to_string(), format!("127.0.0.1:{}", postgres.port()));
    /// ```
    pub fn tcp_config(&self) -> Config {
        Config::new().tcp("127.0.0.1", self.port).user("postgres").dbname("postgres")
    }

    /// A URL for the superuser over TCP (what `--url` takes).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let postgres = neverblock_pg::throwaway::Postgres::start().unwrap();
    /// assert!(postgres.url().starts_with("postgres://postgres@127.0.0.1:"));
    /// ```
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The TCP port (also the number in the socket's name).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let postgres = neverblock_pg::throwaway::Postgres::start().unwrap();
    /// assert!(postgres.url().contains(&postgres.port().to_string()));
    /// ```
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The throwaway CA's certificate (PEM), for `sslrootcert`; `None` without TLS.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let postgres = neverblock_pg::throwaway::Postgres::start_with_tls().unwrap();
    /// let config = postgres.tcp_config().ssl_root_cert(postgres.ca_cert_path().unwrap());
    /// ```
    pub fn ca_cert_path(&self) -> Option<&Path> {
        self.tls.as_ref().map(|tls| tls.ca_cert.as_path())
    }

    /// The client certificate (PEM) the CA issued for [`CLIENT_CERT_USER`], for `sslcert`;
    /// `None` without TLS.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use neverblock_pg::throwaway::{Postgres, CLIENT_CERT_USER};
    ///
    /// let postgres = Postgres::start_with_tls().unwrap();
    /// let config = postgres
    ///     .tcp_config()
    ///     .user(CLIENT_CERT_USER)
    ///     .ssl_cert(postgres.client_cert_path().unwrap())
    ///     .ssl_key(postgres.client_key_path().unwrap());
    /// ```
    pub fn client_cert_path(&self) -> Option<&Path> {
        self.tls.as_ref().map(|tls| tls.client_cert.as_path())
    }

    /// The client certificate's private key (PEM), for `sslkey`; `None` without TLS.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let postgres = neverblock_pg::throwaway::Postgres::start_with_tls().unwrap();
    /// assert!(postgres.client_key_path().unwrap().exists());
    /// ```
    pub fn client_key_path(&self) -> Option<&Path> {
        self.tls.as_ref().map(|tls| tls.client_key.as_path())
    }

    /// The temporary directory: the data, the socket, `postgres.log`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let postgres = neverblock_pg::throwaway::Postgres::start().unwrap();
    /// assert!(postgres.dir().join("postgres.log").exists());
    /// ```
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Stops the server (fast shutdown: every session ends) and starts it again
    /// on the same port, returning once it accepts logins. It blocks the
    /// thread: inside a runtime, call it in `spawn_blocking`.
    ///
    /// # Errors
    ///
    /// [`Error::Usage`] when the supervisor is gone or the server does not come back.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let postgres = neverblock_pg::throwaway::Postgres::start().unwrap();
    /// postgres.restart().unwrap(); // every session ends; new ones connect
    /// ```
    pub fn restart(&self) -> Result<(), Error> {
        self.tell_supervisor("restart", "restarted")?;
        self.wait_ready()
    }

    /// Stops the server (a fast shutdown: sessions end, nothing listens) until
    /// [`start_again`](Postgres::start_again). Blocks the thread, like [`restart`](Postgres::restart).
    ///
    /// # Errors
    ///
    /// [`Error::Usage`] when the supervisor is gone.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let postgres = neverblock_pg::throwaway::Postgres::start().unwrap();
    /// postgres.stop().unwrap(); // an outage
    /// postgres.start_again().unwrap();
    /// ```
    pub fn stop(&self) -> Result<(), Error> {
        self.tell_supervisor("stop", "stopped")
    }

    /// Starts the server [`stop`](Postgres::stop) stopped, on the same port, and waits
    /// until it accepts logins.
    ///
    /// # Errors
    ///
    /// [`Error::Usage`] when the supervisor is gone or the server does not come back.
    pub fn start_again(&self) -> Result<(), Error> {
        self.tell_supervisor("start", "started")?;
        self.wait_ready()
    }

    /// Sends the supervisor `command` and waits for its `reply`.
    fn tell_supervisor(&self, command: &str, reply: &str) -> Result<(), Error> {
        let mut supervisor = self.supervisor.lock().unwrap_or_else(|p| p.into_inner());
        let gone = || Error::Usage("the server's supervisor is gone".into());
        let commands = supervisor.commands.as_mut().ok_or_else(gone)?;
        writeln!(commands, "{command}").and_then(|()| commands.flush()).map_err(|_| gone())?;
        let mut line = String::new();
        supervisor.replies.read_line(&mut line).map_err(|_| gone())?;
        if line.trim() != reply {
            return Err(gone());
        }
        Ok(())
    }

    /// Waits until the superuser can log in and run a query.
    fn wait_ready(&self) -> Result<(), Error> {
        wait_serving(&self.config(), READY_DEADLINE, "the throwaway server", &self.dir.join("postgres.log"))
    }
}

/// Waits until `config` logs in and runs a query; after `deadline`, an error naming `what`
/// with its `log`.
fn wait_serving(config: &Config, deadline: Duration, what: &str, log: &Path) -> Result<(), Error> {
    let start = Instant::now();
    loop {
        let attempt = Connection::connect(config).and_then(|mut c| c.batch_execute("select 1"));
        match attempt {
            Ok(()) => return Ok(()),
            Err(e) if start.elapsed() > deadline => {
                let log = std::fs::read_to_string(log).unwrap_or_default();
                return Err(Error::Usage(format!("{what} did not start ({e}); its log:\n{log}")));
            }
            Err(_) => neverblock::sleep(Duration::from_millis(20)),
        }
    }
}

impl Drop for Postgres {
    /// Ends the supervisor's input and waits while it stops the server and removes the directory.
    fn drop(&mut self) {
        let supervisor = self.supervisor.get_mut().unwrap_or_else(|p| p.into_inner());
        drop(supervisor.commands.take());
        let _ = supervisor.child.wait();
    }
}

impl fmt::Debug for Postgres {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Postgres")
            .field("dir", &self.dir)
            .field("port", &self.port)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

/// The account the server runs as: `postgres` (else `nobody`) when we are root, else ourselves.
struct Account {
    ids: Option<(u32, u32)>,
}

impl Account {
    fn unprivileged() -> Account {
        if rustix::process::geteuid().as_raw() != 0 {
            return Account { ids: None };
        }
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
        let ids_of = |name: &str| {
            passwd.lines().find_map(|line| {
                let fields: Vec<&str> = line.split(':').collect();
                (fields.len() > 3 && fields[0] == name)
                    .then(|| Some((fields[2].parse().ok()?, fields[3].parse().ok()?)))?
            })
        };
        Account { ids: ids_of("postgres").or_else(|| ids_of("nobody")) }
    }

    fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new(program);
        if let Some((uid, gid)) = self.ids {
            command.uid(uid).gid(gid);
        }
        command
    }

    fn own(&self, dir: &Path) -> Result<(), Error> {
        match self.ids {
            Some((uid, gid)) => std::os::unix::fs::chown(dir, Some(uid), Some(gid)).map_err(Error::Io),
            None => Ok(()),
        }
    }
}

/// Makes a CA, a server certificate and a client certificate in `dir`, and has the server in
/// `dir/data` use them: its key belongs to `account` and only it may read it, or PostgreSQL
/// refuses to start.
fn turn_tls_on(dir: &Path, account: &Account) -> Result<TlsFiles, Error> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose};

    let failed = |e: rcgen::Error| Error::Usage(format!("cannot make the throwaway server's certificates: {e}"));
    let ca_key = KeyPair::generate().map_err(failed)?;
    let mut ca_params = CertificateParams::new(Vec::new()).map_err(failed)?;
    ca_params.distinguished_name.push(DnType::CommonName, "neverblock-pg throwaway CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = ca_params.self_signed(&ca_key).map_err(failed)?;
    let leaf = |names: Vec<String>, common_name: &str, purpose| {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(names)?;
        params.distinguished_name.push(DnType::CommonName, common_name);
        params.extended_key_usages = vec![purpose];
        Ok::<_, rcgen::Error>((params.signed_by(&key, &ca, &ca_key)?, key))
    };
    let names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    let (server, server_key) = leaf(names, "localhost", ExtendedKeyUsagePurpose::ServerAuth).map_err(failed)?;
    let (client, client_key) =
        leaf(Vec::new(), CLIENT_CERT_USER, ExtendedKeyUsagePurpose::ClientAuth).map_err(failed)?;

    let files = TlsFiles {
        ca_cert: dir.join("ca.crt"),
        client_cert: dir.join("client.crt"),
        client_key: dir.join("client.key"),
    };
    let (server_cert_path, server_key_path) = (dir.join("server.crt"), dir.join("server.key"));
    let write = |path: &Path, text: String, mode: u32| {
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(path)?;
        file.write_all(text.as_bytes())
    };
    write(&files.ca_cert, ca.pem(), 0o644).map_err(Error::Io)?;
    write(&server_cert_path, server.pem(), 0o644).map_err(Error::Io)?;
    write(&server_key_path, server_key.serialize_pem(), 0o600).map_err(Error::Io)?;
    account.own(&server_key_path)?;
    write(&files.client_cert, client.pem(), 0o644).map_err(Error::Io)?;
    write(&files.client_key, client_key.serialize_pem(), 0o600).map_err(Error::Io)?;

    let quoted = |path: &Path| format!("'{}'", path.display().to_string().replace('\'', "''"));
    let settings = format!(
        "\nssl = on\nssl_cert_file = {}\nssl_key_file = {}\nssl_ca_file = {}\n",
        quoted(&server_cert_path),
        quoted(&server_key_path),
        quoted(&files.ca_cert)
    );
    std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("data/postgresql.conf"))
        .and_then(|mut conf| conf.write_all(settings.as_bytes()))
        .map_err(Error::Io)?;
    Ok(files)
}

/// A new, empty directory under the system's temporary directory.
fn fresh_dir() -> Result<PathBuf, Error> {
    static MADE: AtomicUsize = AtomicUsize::new(0);
    loop {
        let n = MADE.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("neverblock-pg-{}-{n}", std::process::id()));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Error::Io(e)),
        }
    }
}

/// A loopback port nothing listens on now, below the kernel's ephemeral range when there is room:
/// a port inside it can be taken at any moment as the source port of some connect, and then the
/// server cannot bind it (after a restart, say).
fn free_port() -> Result<u16, Error> {
    const LOWEST: u16 = 10_000;
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(0);
    if ephemeral_low > LOWEST {
        // Start at a place of this process's own, so that parallel test binaries rarely probe the same ports.
        let span = ephemeral_low - LOWEST;
        let start = (std::process::id() as u64 * 7_919 + PORTS_TRIED.fetch_add(1, Ordering::Relaxed) as u64 * 101)
            % u64::from(span);
        for i in 0..span {
            let port = LOWEST + ((start + u64::from(i)) % u64::from(span)) as u16;
            if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return Ok(port);
            }
        }
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(Error::Io)?;
    Ok(listener.local_addr().map_err(Error::Io)?.port())
}

/// How many ports this process has looked for.
static PORTS_TRIED: AtomicUsize = AtomicUsize::new(0);

//! TLS: each `sslmode` against a server with TLS (a throwaway of its own, with its own CA) and
//! one without; certificate checks; client certificates; SCRAM with channel binding; and a
//! pool's shared connections, whose two fibers share one TLS session.

use std::io::Write;
use std::net::Shutdown;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::OnceLock;
use std::time::Duration;

use neverblock::net::{TcpListener, TcpStream};
use neverblock_pg::config::{ChannelBinding, SslMode};
use neverblock_pg::throwaway::{Postgres, CLIENT_CERT_USER};
use neverblock_pg::{Config, Connection, Error, Pool};

use crate::support::{postgres, run, unique};

/// The binary's server with TLS, started by the first test that asks.
fn tls_server() -> &'static Postgres {
    static SERVER: OnceLock<Postgres> = OnceLock::new();
    SERVER.get_or_init(|| {
        Postgres::start_with_tls().unwrap_or_else(|e| panic!("cannot start a throwaway PostgreSQL with TLS: {e}"))
    })
}

/// Like `support::run`, with the TLS server started first (outside the runtime).
fn run_tls<T: 'static>(f: impl FnOnce() -> T + 'static) -> T {
    tls_server();
    run(f)
}

/// The superuser over TCP to `localhost` on the TLS server, trusting its CA, in `mode`.
fn tls_config(mode: SslMode) -> Config {
    let server = tls_server();
    server.tcp_config().tcp("localhost", server.port()).ssl_mode(mode).ssl_root_cert(server.ca_cert_path().unwrap())
}

fn uses_tls(conn: &mut Connection) -> bool {
    conn.query_one("select ssl from pg_stat_ssl where pid = pg_backend_pid()", &[]).unwrap().get(0)
}

/// Connects, and says whether the session is over TLS.
fn connect_and_check(config: &Config) -> Result<bool, Error> {
    let mut conn = Connection::connect(config)?;
    Ok(uses_tls(&mut conn))
}

/// A new login role on the TLS server, in `group`, with `password` stored as SCRAM.
fn tls_server_role(group: &str, password: &str) -> String {
    let name = unique("tls_role");
    let mut admin = Connection::connect(&tls_server().config()).unwrap();
    admin
        .batch_execute(&format!(
            "set password_encryption = 'scram-sha-256'; create role {name} login password '{password}' in role {group}"
        ))
        .unwrap();
    name
}

/// A file in the temporary directory with `text` in it, readable by its owner alone (as a key
/// must be); removed when dropped.
struct TempFile(PathBuf);

impl TempFile {
    fn new(text: &str) -> TempFile {
        let path = std::env::temp_dir().join(format!("{}-{}.pem", unique("neverblock-pg-tls"), std::process::id()));
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path).unwrap();
        file.write_all(text.as_bytes()).unwrap();
        TempFile(path)
    }

    fn path(&self) -> String {
        self.0.display().to_string()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Another CA's certificate, which signed nothing the server has.
fn another_ca() -> TempFile {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    TempFile::new(&params.self_signed(&key).unwrap().pem())
}

/// Whether libpq's default file `~/.postgresql/NAME` exists here: the tests that leave a TLS
/// file unset expect what its absence means, and check less when a user has one.
fn home_has(name: &str) -> bool {
    std::env::var_os("HOME").is_some_and(|home| PathBuf::from(home).join(".postgresql").join(name).exists())
}

/// A path where no file is.
const NO_FILE: &str = "/nonexistent/neverblock-pg/file.pem";

fn assert_tls_error(result: Result<bool, Error>, says: &str) {
    match result {
        Err(Error::Tls(message)) => assert!(message.contains(says), "{message}"),
        other => panic!("expected a TLS error saying {says:?}, got {other:?}"),
    }
}

fn assert_config_error(result: Result<bool, Error>, says: &[&str]) {
    match result {
        Err(Error::Config(message)) => assert!(says.iter().all(|s| message.contains(s)), "{message}"),
        other => panic!("expected a configuration error saying {says:?}, got {other:?}"),
    }
}

#[test]
fn verify_full_connects_over_tls_by_name_and_by_address() {
    run_tls(|| {
        assert!(connect_and_check(&tls_config(SslMode::VerifyFull)).unwrap());
        let by_address = tls_config(SslMode::VerifyFull).tcp("127.0.0.1", tls_server().port());
        assert!(connect_and_check(&by_address).unwrap());
        let url = format!(
            "postgres://postgres@localhost:{}/postgres?sslmode=verify-full&sslrootcert={}",
            tls_server().port(),
            tls_server().ca_cert_path().unwrap().display()
        );
        assert!(connect_and_check(&Config::parse(&url).unwrap()).unwrap());
    });
}

#[test]
fn a_certificate_from_another_ca_is_not_trusted() {
    run_tls(|| {
        let other = another_ca();
        for mode in [SslMode::VerifyFull, SslMode::VerifyCa, SslMode::Require] {
            let config = tls_config(mode).ssl_root_cert(&other.0);
            assert_tls_error(connect_and_check(&config), "is not trusted");
            let message = Connection::connect(&config).unwrap_err().to_string();
            assert!(message.contains(&other.0.display().to_string()), "names the roots: {message}");
        }
        let no_roots = tls_server().tcp_config().ssl_mode(SslMode::Require).ssl_root_cert(NO_FILE);
        assert!(connect_and_check(&no_roots).unwrap(), "require without a root file checks nothing, as libpq");
        if !home_has("root.crt") {
            let unset = tls_server().tcp_config().ssl_mode(SslMode::Require);
            assert!(connect_and_check(&unset).unwrap(), "nor without sslrootcert and ~/.postgresql/root.crt");
        }
        for mode in [SslMode::VerifyCa, SslMode::VerifyFull] {
            let missing = tls_config(mode).ssl_root_cert(NO_FILE);
            assert_config_error(connect_and_check(&missing), &["sslrootcert", NO_FILE, "does not exist"]);
        }
    });
}

#[test]
fn an_untrusted_certificate_makes_prefer_fall_back_to_cleartext_and_allow_stay_there() {
    run_tls(|| {
        let other = another_ca();
        for mode in [SslMode::Prefer, SslMode::Allow] {
            let config = tls_config(mode).ssl_root_cert(&other.0);
            assert!(!connect_and_check(&config).unwrap(), "{mode}: the root file is checked, and cleartext used");
        }
        assert!(connect_and_check(&tls_config(SslMode::Prefer)).unwrap(), "the right CA: TLS");
    });
}

#[test]
fn verify_full_refuses_a_host_the_certificate_does_not_name_and_verify_ca_accepts_it() {
    run_tls(|| {
        let port = relay_from_another_address(tls_server().port());
        let unnamed = |mode| tls_config(mode).tcp("127.0.0.2", port);
        assert_tls_error(connect_and_check(&unnamed(SslMode::VerifyFull)), "does not name the host");
        let message = Connection::connect(&unnamed(SslMode::VerifyFull)).unwrap_err().to_string();
        assert!(message.contains("127.0.0.2"), "{message}");
        assert!(connect_and_check(&unnamed(SslMode::VerifyCa)).unwrap());
    });
}

/// Relays connections from a port on 127.0.0.2 to the TLS server on 127.0.0.1: a host its
/// certificate does not name. Returns the port.
fn relay_from_another_address(server_port: u16) -> u16 {
    let listener = TcpListener::bind("127.0.0.2:0").expect("127.0.0.2 is a loopback address on Linux");
    let port = listener.local_addr().unwrap().port();
    neverblock::spawn(move || {
        for client in listener.incoming() {
            let client = Rc::new(client.unwrap());
            let server = Rc::new(TcpStream::connect(("127.0.0.1", server_port)).unwrap());
            for (from, to) in [(client.clone(), server.clone()), (server, client)] {
                neverblock::spawn(move || {
                    let _ = std::io::copy(&mut &*from, &mut &*to);
                    let _ = to.shutdown(Shutdown::Write);
                });
            }
        }
    });
    port
}

#[test]
fn each_sslmode_against_a_server_with_tls_and_one_without() {
    run_tls(|| {
        let ca = tls_server().ca_cert_path().unwrap();
        for (mode, with_tls, without_tls) in [
            (SslMode::Disable, false, Some(false)),
            (SslMode::Allow, false, Some(false)),
            (SslMode::Prefer, true, Some(false)),
            (SslMode::Require, true, None),
            (SslMode::VerifyCa, true, None),
            (SslMode::VerifyFull, true, None),
        ] {
            assert_eq!(connect_and_check(&tls_config(mode)).unwrap(), with_tls, "{mode}, TLS offered");
            let plain = postgres().tcp_config().tcp("localhost", postgres().port()).ssl_mode(mode).ssl_root_cert(ca);
            match without_tls {
                Some(over_tls) => assert_eq!(connect_and_check(&plain).unwrap(), over_tls, "{mode}, no TLS offered"),
                None => assert_tls_error(
                    connect_and_check(&plain),
                    &format!("does not accept TLS (its ssl setting is off), and sslmode={mode} demands it"),
                ),
            }
        }
        assert_eq!(Config::new().get_ssl_mode(), SslMode::Prefer, "the default");
        if !home_has("root.crt") {
            assert!(connect_and_check(&tls_server().tcp_config()).unwrap(), "the default, no roots: TLS unchecked");
        }
    });
}

#[test]
fn a_role_that_must_use_tls_is_refused_in_cleartext_and_allow_retries_with_tls() {
    run_tls(|| {
        let name = tls_server_role("tls_users", "unused");
        let as_role = |mode| tls_config(mode).user(&name);
        let refused = Connection::connect(&as_role(SslMode::Disable)).unwrap_err();
        assert_eq!(refused.code(), Some("28000"), "{refused}");
        assert!(refused.to_string().contains("no encryption"), "{refused}");
        for mode in [SslMode::Allow, SslMode::Prefer, SslMode::Require, SslMode::VerifyFull] {
            assert!(connect_and_check(&as_role(mode)).unwrap(), "{mode}");
        }
        let other = another_ca();
        for mode in [SslMode::Allow, SslMode::Prefer] {
            // Both attempts fail, cleartext refused and TLS not trusted, and the error tells both.
            match connect_and_check(&as_role(mode).ssl_root_cert(&other.0)) {
                Err(Error::Tls(m)) => {
                    let both = m.contains("is not trusted") && m.contains("no encryption");
                    assert!(both && m.contains(&format!("sslmode={mode}")), "{m}");
                }
                other => panic!("{mode}: expected a TLS error telling both attempts, got {other:?}"),
            }
        }
    });
}

#[test]
fn scram_over_tls_binds_the_channel() {
    run_tls(|| {
        let name = tls_server_role("scram_users", "bound secret");
        let scram = |mode| tls_config(mode).user(&name).password("bound secret");
        for binding in [ChannelBinding::Disable, ChannelBinding::Prefer, ChannelBinding::Require] {
            assert!(connect_and_check(&scram(SslMode::VerifyFull).channel_binding(binding)).unwrap(), "{binding}");
        }
        let wrong = Connection::connect(&scram(SslMode::Require).password("guess")).unwrap_err();
        assert_eq!(wrong.code(), Some("28P01"), "{wrong}");
        assert!(!connect_and_check(&scram(SslMode::Disable)).unwrap(), "prefer binds only when it can");
    });
}

#[test]
fn channel_binding_require_fails_clearly_without_a_bound_scram_login() {
    run_tls(|| {
        let name = tls_server_role("scram_users", "bound secret");
        let required =
            |mode| tls_config(mode).user(&name).password("bound secret").channel_binding(ChannelBinding::Require);
        let cleartext = Connection::connect(&required(SslMode::Disable)).unwrap_err();
        assert!(matches!(&cleartext, Error::Auth(m) if m.contains("no TLS")), "{cleartext}");
        let over_socket = tls_server().config().user(&name).password("bound secret");
        let err = Connection::connect(&over_socket.channel_binding(ChannelBinding::Require)).unwrap_err();
        assert!(matches!(&err, Error::Auth(m) if m.contains("no TLS")), "{err}");
        let trusted = tls_config(SslMode::Require).channel_binding(ChannelBinding::Require);
        let err = Connection::connect(&trusted).unwrap_err();
        assert!(matches!(&err, Error::Auth(m) if m.contains("without SCRAM-SHA-256-PLUS")), "{err}");
    });
}

#[test]
fn a_client_certificate_logs_its_role_in() {
    run_tls(|| {
        let server = tls_server();
        let as_cert_user = tls_config(SslMode::VerifyFull).user(CLIENT_CERT_USER);
        let with_cert = as_cert_user
            .clone()
            .ssl_cert(server.client_cert_path().unwrap())
            .ssl_key(server.client_key_path().unwrap());
        let mut conn = Connection::connect(&with_cert).unwrap();
        assert_eq!(conn.query_one("select current_user::text", &[]).unwrap().get::<String>(0), CLIENT_CERT_USER);
        assert!(uses_tls(&mut conn));
        let group_readable = TempFile::new(&std::fs::read_to_string(server.client_key_path().unwrap()).unwrap());
        std::fs::set_permissions(&group_readable.0, std::fs::Permissions::from_mode(0o640)).unwrap();
        let config = with_cert.clone().ssl_key(&group_readable.0);
        match std::fs::metadata(&group_readable.0).unwrap().uid() {
            0 => assert!(connect_and_check(&config).unwrap(), "0640 will do when root owns the key, as libpq"),
            _ => assert_config_error(connect_and_check(&config), &["sslkey", "group or world access"]),
        }
        if !home_has("postgresql.crt") {
            let without = Connection::connect(&as_cert_user).unwrap_err();
            assert_eq!(without.code(), Some("28000"), "{without}");
            assert!(without.to_string().contains("certificate"), "{without}");
        }
        let missing = as_cert_user.ssl_cert(NO_FILE).ssl_key(server.client_key_path().unwrap());
        let refused = Connection::connect(&missing).unwrap_err();
        assert_eq!(refused.code(), Some("28000"), "no certificate file: none sent, as libpq; {refused}");
    });
}

#[test]
fn unusable_client_certificate_files_are_config_errors_naming_them() {
    run_tls(|| {
        let server = tls_server();
        let base = tls_config(SslMode::VerifyFull).user(CLIENT_CERT_USER);
        let (cert, key) = (server.client_cert_path().unwrap(), server.client_key_path().unwrap());
        let with_cert = base.clone().ssl_cert(cert);
        let other_key = TempFile::new(&rcgen::KeyPair::generate().unwrap().serialize_pem());
        let mismatched = with_cert.clone().ssl_key(&other_key.0);
        assert_config_error(connect_and_check(&mismatched), &["is not the key", &other_key.path()]);
        let not_a_key = TempFile::new(&std::fs::read_to_string(cert).unwrap());
        assert_config_error(connect_and_check(&with_cert.clone().ssl_key(&not_a_key.0)), &["holds no private key"]);
        let world_readable = TempFile::new(&std::fs::read_to_string(key).unwrap());
        std::fs::set_permissions(&world_readable.0, std::fs::Permissions::from_mode(0o644)).unwrap();
        let open_key = with_cert.clone().ssl_key(&world_readable.0);
        assert_config_error(connect_and_check(&open_key), &["sslkey", &world_readable.path(), "group or world access"]);
        let no_key = with_cert.clone().ssl_key(NO_FILE);
        assert_config_error(connect_and_check(&no_key), &["sslkey", NO_FILE, "does not exist"]);
        if !home_has("postgresql.key") {
            assert_config_error(connect_and_check(&with_cert), &["sslkey", "postgresql.key", "does not exist"]);
        }
        let not_a_cert = TempFile::new("no certificates here\n");
        let garbled = base.clone().ssl_cert(&not_a_cert.0).ssl_key(key);
        assert_config_error(connect_and_check(&garbled), &["sslcert", "holds no PEM certificate"]);
        let empty_roots = TempFile::new("no certificates here\n");
        let no_roots = base.ssl_root_cert(&empty_roots.0);
        assert_config_error(connect_and_check(&no_roots), &["sslrootcert", "holds no PEM certificate"]);
        if !home_has("postgresql.crt") {
            let key_alone = tls_config(SslMode::VerifyFull).ssl_key(NO_FILE);
            assert!(connect_and_check(&key_alone).unwrap(), "sslkey without a certificate is not read, as libpq");
        }
    });
}

#[test]
fn verify_modes_without_roots_read_libpq_default_file_or_say_to_set_sslrootcert() {
    run_tls(|| {
        let server = tls_server();
        let default = std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".postgresql/root.crt"));
        let config = server.tcp_config().tcp("localhost", server.port()).ssl_mode(SslMode::VerifyCa);
        match default.filter(|path| path.exists()) {
            None => assert_config_error(connect_and_check(&config), &["set sslrootcert", "root.crt"]),
            Some(path) => assert!(
                matches!(connect_and_check(&config), Ok(true) | Err(Error::Tls(_))),
                "{} was read",
                path.display()
            ),
        }
    });
}

#[test]
fn sslmode_is_ignored_on_a_unix_socket_as_libpq_documents() {
    run_tls(|| {
        let ca = tls_server().ca_cert_path().unwrap();
        for mode in [SslMode::Prefer, SslMode::Require, SslMode::VerifyCa, SslMode::VerifyFull] {
            let on_socket = tls_server().config().ssl_mode(mode).ssl_root_cert(ca);
            assert!(!connect_and_check(&on_socket).unwrap(), "{mode}: cleartext on a socket");
        }
    });
}

#[test]
fn system_roots_need_verify_full() {
    run_tls(|| {
        for mode in [SslMode::Disable, SslMode::Prefer, SslMode::Require, SslMode::VerifyCa] {
            let weaker = tls_config(mode).ssl_root_cert("system");
            assert_config_error(connect_and_check(&weaker), &[&format!("sslmode={mode} is too weak"), "system"]);
        }
        let system_full = tls_server().tcp_config().tcp("localhost", tls_server().port()).ssl_root_cert("system");
        assert_tls_error(connect_and_check(&system_full), "is not trusted");
    });
}

#[test]
fn large_requests_and_replies_cross_a_tls_connection_whole() {
    run_tls(|| {
        let mut conn = Connection::connect(&tls_config(SslMode::VerifyFull)).unwrap();
        let big: String = (0..300_000).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
        let echoed: String = conn.query_one("select $1::text", &[&big]).unwrap().get(0);
        assert!(echoed == big, "300 kB out and back");
        let rows = conn.query("select repeat(n::text, 5000) from generate_series(1, 200) n", &[]).unwrap();
        assert_eq!(rows.len(), 200);
        assert!(rows.iter().enumerate().all(|(i, row)| row.get::<&str>(0) == (i + 1).to_string().repeat(5000)));
    });
}

#[test]
fn a_timed_out_query_over_tls_is_cancelled_and_the_connection_goes_on() {
    run_tls(|| {
        let mut conn = Connection::connect(&tls_config(SslMode::VerifyFull)).unwrap();
        let timed_out = neverblock::timeout(Duration::from_millis(200), || conn.query("select pg_sleep(30)", &[]));
        assert!(matches!(timed_out, Ok(Err(Error::Timeout)) | Err(_)), "{timed_out:?}");
        assert_eq!(conn.query_one("select 6::int4", &[]).unwrap().get::<i32>(0), 6, "cancelled, not waited out");
        assert!(uses_tls(&mut conn));
    });
}

#[test]
fn an_idle_tls_connection_the_server_closed_is_not_lent() {
    run_tls(|| {
        let pool = Pool::new(tls_config(SslMode::VerifyFull), 2);
        let pid = pool.get().unwrap().backend_pid().unwrap();
        let mut admin = Connection::connect(&tls_server().config()).unwrap();
        admin.query("select pg_terminate_backend($1)", &[&pid]).unwrap();
        while admin.query_one("select count(*) from pg_stat_activity where pid = $1", &[&pid]).unwrap().get::<i64>(0)
            > 0
        {
            neverblock::sleep(Duration::from_millis(5));
        }
        let mut conn = pool.get().unwrap();
        assert_ne!(conn.backend_pid(), Some(pid));
        assert_eq!(conn.query_one("select 3::int4", &[]).unwrap().get::<i32>(0), 3, "works first time");
    });
}

#[test]
fn shared_connections_over_tls_serve_many_fibers_with_large_rows() {
    run_tls(|| {
        let name = unique("shared_tls");
        let config = tls_config(SslMode::VerifyFull).application_name(&name);
        let pool = Pool::builder(config).max_size(4).shared(4).build();
        let fibers: Vec<_> = (0..400i32)
            .map(|i| {
                let pool = pool.clone();
                neverblock::spawn(move || {
                    if i % 10 == 0 {
                        let row = pool.query_one("select repeat('x', 200000) || $1::text", &[&i.to_string()])?;
                        let text: String = row.get(0);
                        Ok(i32::from(text.len() == 200_000 + i.to_string().len() && text.ends_with(&i.to_string())))
                    } else {
                        pool.query_one("select $1::int4 + 1", &[&i]).map(|row| row.get::<i32>(0) - i)
                    }
                })
            })
            .collect();
        let got: Vec<i32> = fibers.into_iter().map(|f| f.join().unwrap().unwrap()).collect();
        assert_eq!(got, vec![1; 400], "every fiber got its own answer, whole");
        assert!(pool.status().open <= 4);
        let tls_sessions: i64 = Connection::connect(&tls_server().config())
            .unwrap()
            .query_one(
                "select count(*) from pg_stat_activity a join pg_stat_ssl s using (pid) \
                 where a.application_name = $1 and s.ssl",
                &[&name],
            )
            .unwrap()
            .get(0);
        assert!((1..=4).contains(&tls_sessions), "{tls_sessions} shared sessions over TLS");
    });
}

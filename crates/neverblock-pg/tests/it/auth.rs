//! Logging in: trust, md5 and SCRAM-SHA-256, over TCP and the unix socket, and
//! the errors of a wrong password, an unknown database and a server that is down.

use neverblock_pg::{Config, Connection, Error};

use crate::support::{admin, config, postgres, run, unique};

/// Makes a login role in `group` (`md5_users`, `scram_users`, or none: trusted)
/// whose password is stored as `encryption` says.
fn role(group: Option<&str>, encryption: &str, password: &str) -> String {
    let name = unique("role");
    let mut admin = admin();
    let member = group.map(|g| format!(" in role {g}")).unwrap_or_default();
    admin
        .batch_execute(&format!(
            "set password_encryption = '{encryption}'; create role {name} login password '{password}'{member}"
        ))
        .unwrap();
    name
}

fn stored_password(name: &str) -> String {
    let mut admin = admin();
    admin.query_one("select rolpassword from pg_authid where rolname = $1", &[&name]).unwrap().get(0)
}

fn who_am_i(config: Config) -> Result<String, Error> {
    let mut conn = Connection::connect(&config)?;
    Ok(conn.query_one("select current_user::text", &[])?.get::<String>(0))
}

#[test]
fn a_trusted_role_logs_in_without_a_password_over_both_sockets() {
    run(|| {
        let name = role(None, "scram-sha-256", "unused");
        for base in [config(), postgres().tcp_config()] {
            assert_eq!(who_am_i(base.user(&name)).unwrap(), name);
        }
    });
}

#[test]
fn an_md5_role_logs_in_with_its_password_and_only_with_it() {
    run(|| {
        let name = role(Some("md5_users"), "md5", "md5 secret");
        assert!(stored_password(&name).starts_with("md5"), "stored as md5, so the server asks for md5");
        for base in [config(), postgres().tcp_config()] {
            assert_eq!(who_am_i(base.clone().user(&name).password("md5 secret")).unwrap(), name);
            let wrong = who_am_i(base.clone().user(&name).password("guess")).unwrap_err();
            assert_eq!(wrong.code(), Some("28P01"), "{wrong}");
            assert!(wrong.to_string().contains("password authentication failed"), "{wrong}");
            let none = who_am_i(base.user(&name)).unwrap_err();
            assert!(matches!(&none, Error::Auth(m) if m.contains("password")), "{none}");
        }
    });
}

#[test]
fn a_scram_role_logs_in_with_its_password_and_only_with_it() {
    run(|| {
        let name = role(Some("scram_users"), "scram-sha-256", "scrämble");
        assert!(stored_password(&name).starts_with("SCRAM-SHA-256$"));
        for base in [config(), postgres().tcp_config()] {
            assert_eq!(who_am_i(base.clone().user(&name).password("scrämble")).unwrap(), name);
            let wrong = who_am_i(base.user(&name).password("scramble")).unwrap_err();
            assert_eq!(wrong.code(), Some("28P01"), "{wrong}");
        }
    });
}

#[test]
fn a_url_with_a_socket_directory_connects() {
    run(|| {
        let s = postgres();
        let url = format!("postgres://postgres@/postgres?host={}&port={}", s.dir().display(), s.port());
        let mut conn = neverblock_pg::connect(&url).unwrap();
        assert_eq!(conn.query_one("select 7::int4", &[]).unwrap().get::<i32>(0), 7);
        let url = format!("postgres://postgres@127.0.0.1:{}/postgres?application_name=url-test", s.port());
        let mut conn = neverblock_pg::connect(&url).unwrap();
        let name: String = conn.query_one("select current_setting('application_name')", &[]).unwrap().get(0);
        assert_eq!(name, "url-test");
    });
}

#[test]
fn an_unknown_database_is_a_clear_error() {
    run(|| {
        let err = Connection::connect(&config().dbname("no_such_db")).unwrap_err();
        assert_eq!(err.code(), Some("3D000"), "{err}");
        assert!(err.to_string().contains("no_such_db"), "{err}");
    });
}

#[test]
fn a_server_that_is_down_is_a_connect_error() {
    run(|| {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let err = Connection::connect(&Config::new().tcp("127.0.0.1", port)).unwrap_err();
        assert!(
            matches!(&err, Error::Connect { source, .. } if source.kind() == std::io::ErrorKind::ConnectionRefused),
            "{err}"
        );
        let err = Connection::connect(&Config::new().unix("/nonexistent-dir", 5432)).unwrap_err();
        assert!(err.to_string().contains("/nonexistent-dir/.s.PGSQL.5432"), "{err}");
    });
}

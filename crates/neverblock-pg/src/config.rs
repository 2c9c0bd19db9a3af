//! Connection settings: libpq's URLs (`postgres://user:pass@host:port/db?…`) and
//! `key=value` strings, or a builder.

mod liveness;
mod tls;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use neverblock::net::KeepAlive;

use crate::Error;
use liveness::Liveness;

/// How long connecting and logging in may take unless a connection string or
/// [`Config::connect_timeout`] says otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
pub(crate) use tls::SYSTEM_ROOTS;
pub use tls::{ChannelBinding, SslMode};

/// Where the server listens.
///
/// # Examples
///
/// ```
/// use neverblock_pg::{config::Host, Config};
/// let c = Config::parse("postgres://u@%2Frun%2Fpostgresql/db").unwrap();
/// assert!(matches!(c.get_host(), Host::Unix(dir, 5432) if dir.to_str() == Some("/run/postgresql")));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Host {
    /// A TCP host name or address, and port.
    Tcp(String, u16),
    /// A unix-domain socket: the directory holding `.s.PGSQL.<port>`, and the port.
    Unix(PathBuf, u16),
}

impl Host {
    /// The socket file a server on `port` makes in `dir` (what `Display` shows for
    /// [`Host::Unix`]; TCP hosts show as `host:port`).
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_pg::config::Host;
    ///
    /// assert_eq!(Host::socket_path("/run/postgresql".as_ref(), 5432).to_str(), Some("/run/postgresql/.s.PGSQL.5432"));
    /// assert_eq!(Host::Unix("/run/postgresql".into(), 5432).to_string(), "/run/postgresql/.s.PGSQL.5432");
    /// assert_eq!(Host::Tcp("::1".into(), 5433).to_string(), "[::1]:5433");
    /// ```
    pub fn socket_path(dir: &Path, port: u16) -> PathBuf {
        dir.join(format!(".s.PGSQL.{port}"))
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Tcp(host, port) if host.contains(':') => write!(f, "[{host}]:{port}"),
            Host::Tcp(host, port) => write!(f, "{host}:{port}"),
            Host::Unix(dir, port) => write!(f, "{}", Host::socket_path(dir, *port).display()),
        }
    }
}

/// How to connect: server, user, password, database and timeouts.
///
/// A URL `postgres://user:password@host:port/dbname?key=value&…` (also
/// `postgresql://`), or libpq's `key=value key='quoted value'` form. A host that
/// starts with `/` is a unix-socket directory (`?host=/run/postgresql`, or
/// percent-encoded in the URL's host part). Keys: `host`, `port`, `user`,
/// `password`, `dbname`, `application_name`, `connect_timeout` (seconds; 10 unless
/// set, 0 for none), `keepalives` (1 or 0), `keepalives_idle`, `keepalives_interval`
/// (seconds), `keepalives_count`, `tcp_user_timeout` (milliseconds), and
/// TLS's, as libpq spells them: `sslmode` ([`SslMode`]: `disable`, `allow`,
/// `prefer`, `require`, `verify-ca`, `verify-full`), `sslrootcert` (a PEM file
/// of CAs, or `system`), `sslcert` and `sslkey` (a client certificate), and
/// `channel_binding` ([`ChannelBinding`]: `disable`, `prefer`, `require`);
/// `statement_cache_capacity` (see [`Config::statement_cache_capacity`]).
/// Defaults: `localhost:5432`, user `$USER` (else `postgres`), database = user,
/// `sslmode=prefer` (TLS when the server offers it, its certificate checked only
/// if `~/.postgresql/root.crt` exists), and the client certificate
/// `~/.postgresql/postgresql.crt` (key `postgresql.key`) if it exists.
///
/// # Examples
///
/// ```
/// use neverblock_pg::{config::Host, Config};
///
/// let c = Config::parse("postgres://app:s%40cret@db.internal:6432/shop?application_name=web").unwrap();
/// assert_eq!(c.get_host(), &Host::Tcp("db.internal".into(), 6432));
/// assert_eq!((c.get_user(), c.get_password(), c.get_dbname()), ("app", Some("s@cret"), "shop"));
///
/// let c = Config::parse("host=/run/postgresql user=app dbname='my db'").unwrap();
/// assert_eq!(c.get_host(), &Host::Unix("/run/postgresql".into(), 5432));
/// assert_eq!(c.get_dbname(), "my db");
///
/// let c = Config::parse("postgres://db.internal/shop?sslmode=verify-full&sslrootcert=/etc/ssl/db-ca.pem").unwrap();
/// assert_eq!(c.get_ssl_mode(), neverblock_pg::config::SslMode::VerifyFull);
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Config {
    host: Host,
    user: String,
    password: Option<String>,
    dbname: Option<String>,
    application_name: Option<String>,
    connect_timeout: Option<Duration>,
    read_timeout: Option<Duration>,
    liveness: Liveness,
    tls: tls::TlsSettings,
    statement_cache_capacity: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config::new()
    }
}

impl Config {
    /// The defaults: `localhost:5432`, user `$USER` (else `postgres`), database = user.
    ///
    /// # Examples
    ///
    /// ```
    /// let c = neverblock_pg::Config::new().user("app").dbname("shop");
    /// assert_eq!(c.get_dbname(), "shop");
    /// ```
    pub fn new() -> Config {
        Config {
            host: Host::Tcp("localhost".into(), 5432),
            user: std::env::var("USER").ok().filter(|u| !u.is_empty()).unwrap_or_else(|| "postgres".into()),
            password: None,
            dbname: None,
            application_name: None,
            connect_timeout: Some(DEFAULT_CONNECT_TIMEOUT),
            read_timeout: None,
            liveness: Liveness::default(),
            tls: tls::TlsSettings::default(),
            statement_cache_capacity: crate::statement::DEFAULT_CAPACITY,
        }
    }

    /// Parses a URL or a `key=value` string.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming what is wrong.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(neverblock_pg::Config::parse("postgres://localhost:99999/db").is_err());
    /// ```
    pub fn parse(s: &str) -> Result<Config, Error> {
        let s = s.trim();
        if let Some(rest) = s.strip_prefix("postgres://").or_else(|| s.strip_prefix("postgresql://")) {
            parse_url(rest).map_err(|m| Error::Config(format!("{m} in {:?}", redacted_url(s))))
        } else if s.contains("://") {
            Err(Error::Config(format!("{:?} is not a postgres:// URL", redacted_url(s))))
        } else {
            // The whole string is not shown: a password in it could not be told from the rest.
            parse_key_values(s).map_err(|m| Error::Config(format!("{m} in the connection string")))
        }
    }

    /// Connects over TCP to `host:port`.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_pg::{config::Host, Config};
    /// assert_eq!(Config::new().tcp("127.0.0.1", 5433).get_host(), &Host::Tcp("127.0.0.1".into(), 5433));
    /// ```
    pub fn tcp(mut self, host: &str, port: u16) -> Config {
        self.host = Host::Tcp(host.into(), port);
        self
    }

    /// Connects to the unix socket `<dir>/.s.PGSQL.<port>`.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_pg::{config::Host, Config};
    /// let c = Config::new().unix("/run/postgresql", 5432);
    /// assert_eq!(c.get_host(), &Host::Unix("/run/postgresql".into(), 5432));
    /// ```
    pub fn unix(mut self, dir: impl Into<PathBuf>, port: u16) -> Config {
        self.host = Host::Unix(dir.into(), port);
        self
    }

    /// The role to log in as.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(neverblock_pg::Config::new().user("app").get_user(), "app");
    /// ```
    pub fn user(mut self, user: &str) -> Config {
        self.user = user.into();
        self
    }

    /// The password, for md5 or SCRAM-SHA-256 authentication.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(neverblock_pg::Config::new().password("pw").get_password(), Some("pw"));
    /// ```
    pub fn password(mut self, password: &str) -> Config {
        self.password = Some(password.into());
        self
    }

    /// The database (default: the user's name).
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(neverblock_pg::Config::new().user("a").get_dbname(), "a");
    /// ```
    pub fn dbname(mut self, dbname: &str) -> Config {
        self.dbname = Some(dbname.into());
        self
    }

    /// Sets `application_name`, shown in `pg_stat_activity`.
    ///
    /// # Examples
    ///
    /// ```
    /// let c = neverblock_pg::Config::new().application_name("web");
    /// assert_eq!(c.get_application_name(), Some("web"));
    /// ```
    pub fn application_name(mut self, name: &str) -> Config {
        self.application_name = Some(name.into());
        self
    }

    /// Gives up connecting and logging in after `timeout` (10 s unless set);
    /// `Duration::ZERO` waits as long as it takes, as libpq's `connect_timeout=0`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let c = neverblock_pg::Config::new().connect_timeout(Duration::from_secs(3));
    /// assert_eq!(c.get_connect_timeout(), Some(Duration::from_secs(3)));
    /// assert_eq!(c.connect_timeout(Duration::ZERO).get_connect_timeout(), None);
    /// ```
    pub fn connect_timeout(mut self, timeout: Duration) -> Config {
        self.connect_timeout = (!timeout.is_zero()).then_some(timeout);
        self
    }

    /// Sets the TCP keepalive probes that find a server (or a network to it) gone while
    /// the connection is idle, or a query waits for its reply: by default the first after
    /// 30 s of silence, then every 10 s, the connection dropped after 3 unanswered. `None`
    /// sends none (libpq's `keepalives=0`). Unix-socket connections have none.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use neverblock::net::KeepAlive;
    ///
    /// let fast = KeepAlive { idle: Duration::from_secs(5), interval: Duration::from_secs(1), retries: 5 };
    /// let c = neverblock_pg::Config::new().keepalive(Some(fast));
    /// assert_eq!(c.get_keepalive(), Some(fast));
    /// assert_eq!(c.keepalive(None).get_keepalive(), None);
    /// ```
    pub fn keepalive(mut self, keepalive: Option<KeepAlive>) -> Config {
        self.liveness.keepalives = keepalive.is_some();
        if let Some(keepalive) = keepalive {
            self.liveness.keepalive = keepalive;
        }
        self
    }

    /// Drops a TCP connection whose sent data stays unacknowledged for `timeout`
    /// (`TCP_USER_TIMEOUT`, libpq's `tcp_user_timeout`); `None`, the default, leaves it to
    /// the system (many minutes of retransmissions).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let c = neverblock_pg::Config::new().tcp_user_timeout(Some(Duration::from_secs(20)));
    /// assert_eq!(c.get_tcp_user_timeout(), Some(Duration::from_secs(20)));
    /// ```
    pub fn tcp_user_timeout(mut self, timeout: Option<Duration>) -> Config {
        self.liveness.user_timeout = timeout.filter(|t| !t.is_zero());
        self
    }

    /// Cancels a query whose reply takes longer than `timeout` to start arriving
    /// (the socket's read timeout), as a neverblock `timeout` around the call does.
    /// A pool's shared connections have none: their reader waits on the socket
    /// while they are idle.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let c = neverblock_pg::Config::new().read_timeout(Duration::from_secs(30));
    /// assert_eq!(c.get_read_timeout(), Some(Duration::from_secs(30)));
    /// ```
    pub fn read_timeout(mut self, timeout: Duration) -> Config {
        self.read_timeout = Some(timeout);
        self
    }

    /// How many prepared statements a connection keeps by query text (default
    /// 256; also bounded by 1 MiB of SQL text in all), the least recently used
    /// closed on the server first. `0` turns the cache off: every query runs as
    /// the unnamed statement, parsed again each time in the same round trip as
    /// its run, which is what a pooler in transaction mode (PgBouncer before
    /// 1.21, or without `max_prepared_statements`) needs. URL and `key=value` key:
    /// `statement_cache_capacity`. A pool's shared connections share one cache
    /// of this size.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_pg::Config;
    ///
    /// let behind_pgbouncer = Config::parse("postgres://app@pgbouncer:6432/shop?statement_cache_capacity=0").unwrap();
    /// assert_eq!(behind_pgbouncer.get_statement_cache_capacity(), 0);
    /// assert_eq!(Config::new().statement_cache_capacity(64).get_statement_cache_capacity(), 64);
    /// ```
    pub fn statement_cache_capacity(mut self, statements: usize) -> Config {
        self.statement_cache_capacity = statements;
        self
    }

    /// Where the server listens.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_pg::{config::Host, Config};
    /// assert_eq!(Config::new().get_host(), &Host::Tcp("localhost".into(), 5432));
    /// ```
    pub fn get_host(&self) -> &Host {
        &self.host
    }

    /// The role.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(!neverblock_pg::Config::new().get_user().is_empty());
    /// ```
    pub fn get_user(&self) -> &str {
        &self.user
    }

    /// The password, if any.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(neverblock_pg::Config::new().get_password(), None);
    /// ```
    pub fn get_password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// The database.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(neverblock_pg::Config::new().user("u").get_dbname(), "u");
    /// ```
    pub fn get_dbname(&self) -> &str {
        self.dbname.as_deref().unwrap_or(&self.user)
    }

    /// The `application_name`, if set.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(neverblock_pg::Config::new().get_application_name(), None);
    /// ```
    pub fn get_application_name(&self) -> Option<&str> {
        self.application_name.as_deref()
    }

    /// The connect timeout; `None` waits as long as connecting takes.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// assert_eq!(neverblock_pg::Config::new().get_connect_timeout(), Some(Duration::from_secs(10)));
    /// ```
    pub fn get_connect_timeout(&self) -> Option<Duration> {
        self.connect_timeout
    }

    /// The TCP keepalive probes a connection sends, if any.
    ///
    /// # Examples
    ///
    /// ```
    /// let c = neverblock_pg::Config::parse("postgres://db/shop?keepalives_idle=15").unwrap();
    /// assert_eq!(c.get_keepalive().unwrap().idle.as_secs(), 15);
    /// ```
    pub fn get_keepalive(&self) -> Option<KeepAlive> {
        self.liveness.keepalive()
    }

    /// The TCP user timeout, if set.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(neverblock_pg::Config::new().get_tcp_user_timeout(), None);
    /// ```
    pub fn get_tcp_user_timeout(&self) -> Option<Duration> {
        self.liveness.user_timeout
    }

    /// The read timeout, if set.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(neverblock_pg::Config::new().get_read_timeout(), None);
    /// ```
    pub fn get_read_timeout(&self) -> Option<Duration> {
        self.read_timeout
    }

    /// How many prepared statements a connection keeps (0: none).
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(neverblock_pg::Config::new().get_statement_cache_capacity(), 256);
    /// ```
    pub fn get_statement_cache_capacity(&self) -> usize {
        self.statement_cache_capacity
    }

    /// Applies one `key=value` setting.
    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let port = |v: &str| v.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| format!("bad port {v:?}"));
        match key {
            "host" | "hostaddr" => {
                let old_port = self.port();
                self.host = if value.starts_with('/') {
                    Host::Unix(value.into(), old_port)
                } else {
                    Host::Tcp(value.into(), old_port)
                };
            }
            "port" => {
                let p = port(value)?;
                match &mut self.host {
                    Host::Tcp(_, old) | Host::Unix(_, old) => *old = p,
                }
            }
            "user" => self.user = value.into(),
            "password" => self.password = Some(value.into()),
            "dbname" => self.dbname = Some(value.into()),
            "application_name" => self.application_name = Some(value.into()),
            "connect_timeout" => {
                let secs: u64 = value.parse().map_err(|_| format!("bad connect_timeout {value:?}"))?;
                self.connect_timeout = (secs > 0).then(|| Duration::from_secs(secs));
            }
            "statement_cache_capacity" => {
                self.statement_cache_capacity = value.parse().map_err(|_| {
                    format!("bad statement_cache_capacity {value:?} (a count of statements; 0 turns the cache off)")
                })?;
            }
            "sslmode" => self.tls.mode = Some(value.parse()?),
            "sslrootcert" => self.tls.root_cert = Some(value.into()),
            "sslcert" => self.tls.cert = Some(value.into()),
            "sslkey" => self.tls.key = Some(value.into()),
            "channel_binding" => self.tls.channel_binding = value.parse()?,
            other => match self.liveness.set(other, value) {
                Some(set) => set?,
                None => return Err(format!("unknown setting {other:?}")),
            },
        }
        Ok(())
    }

    fn port(&self) -> u16 {
        match &self.host {
            Host::Tcp(_, p) | Host::Unix(_, p) => *p,
        }
    }
}

impl FromStr for Config {
    type Err = Error;
    fn from_str(s: &str) -> Result<Config, Error> {
        Config::parse(s)
    }
}

impl fmt::Debug for Config {
    /// Leaves the password out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("host", &self.host)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "…"))
            .field("dbname", &self.get_dbname())
            .field("application_name", &self.application_name)
            .field("connect_timeout", &self.connect_timeout)
            .field("read_timeout", &self.read_timeout)
            .field("keepalive", &self.get_keepalive())
            .field("tcp_user_timeout", &self.liveness.user_timeout)
            .field("tls", &self.tls)
            .field("statement_cache_capacity", &self.statement_cache_capacity)
            .finish()
    }
}

/// `user:password@host:port/dbname?query`, after the scheme.
fn parse_url(rest: &str) -> Result<Config, String> {
    let mut config = Config::new();
    let (before_query, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (authority, path) = before_query.split_once('/').unwrap_or((before_query, ""));
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    if let Some(userinfo) = userinfo {
        let (user, password) = userinfo.split_once(':').map_or((userinfo, None), |(u, p)| (u, Some(p)));
        if !user.is_empty() {
            config.user = decode(user).ok_or("a bad percent-escape in the user name")?;
        }
        if let Some(password) = password {
            config.password = Some(decode(password).ok_or("a bad percent-escape in the password")?);
        }
    }
    let (host, port) = split_host_port(hostport)?;
    if !host.is_empty() {
        config.set("host", &decode(host).ok_or("a bad percent-escape in the host")?)?;
    }
    if let Some(port) = port {
        config.set("port", port)?;
    }
    if !path.is_empty() {
        config.dbname = Some(decode(path).ok_or("a bad percent-escape in the database name")?);
    }
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').ok_or("a query parameter has no value")?;
        let key = decode(key).ok_or("a bad percent-escape in a query parameter's name")?;
        let value = decode(value).ok_or_else(|| format!("a bad percent-escape in the value of {key:?}"))?;
        config.set(&key, &value)?;
    }
    Ok(config)
}

/// `host`, `host:port`, `[v6]:port`.
fn split_host_port(s: &str) -> Result<(&str, Option<&str>), String> {
    if let Some(v6) = s.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or("unclosed [ in the host")?;
        return match after {
            "" => Ok((host, None)),
            _ => after.strip_prefix(':').map(|p| (host, Some(p))).ok_or_else(|| format!("bad host {s:?}")),
        };
    }
    Ok(s.split_once(':').map_or((s, None), |(h, p)| (h, Some(p))))
}

/// Percent-decoding (`%2F` → `/`); `None` for a bad escape or a result that is not UTF-8. The
/// caller says which part was bad, without quoting it: it may be a password.
fn decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            out.push(s.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok())?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// `url` with its password (in the user part, or a `password=` parameter) replaced by `***`, to
/// show in an error.
fn redacted_url(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let (before_query, query) = rest.split_once('?').map_or((rest, None), |(b, q)| (b, Some(q)));
    let (authority, path) = before_query.split_once('/').map_or((before_query, None), |(a, p)| (a, Some(p)));
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@{host}"),
            None => authority.to_owned(),
        },
        None => authority.to_owned(),
    };
    let mut out = format!("{scheme}://{authority}");
    if let Some(path) = path {
        out = format!("{out}/{path}");
    }
    if let Some(query) = query {
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((key, _)) if decode(key).as_deref() == Some("password") => format!("{key}=***"),
                _ => pair.to_owned(),
            })
            .collect();
        out = format!("{out}?{}", pairs.join("&"));
    }
    out
}

/// libpq's `key=value key2='quoted \' value'` form.
fn parse_key_values(s: &str) -> Result<Config, String> {
    let mut config = Config::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(config);
        }
        let key: String = std::iter::from_fn(|| chars.next_if(|c| *c != '=' && !c.is_whitespace())).collect();
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(format!("setting {key:?} has no '='"));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    Some('\\') => value.extend(chars.next()),
                    Some('\'') => break,
                    Some(c) => value.push(c),
                    None => return Err(format!("unclosed quote in the value of {key:?}")),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                value.push(if c == '\\' { chars.next().unwrap_or('\\') } else { c });
            }
        }
        config.set(&key, &value)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(s: &str, host: Host, user: &str, password: Option<&str>, dbname: &str) {
        let c = Config::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(
            (c.get_host(), c.get_user(), c.get_password(), c.get_dbname()),
            (&host, user, password, dbname),
            "{s}"
        );
    }

    #[test]
    fn urls_and_key_values_parse_to_the_same_settings() {
        let tcp = |h: &str, p| Host::Tcp(h.into(), p);
        check("postgres://u:p@h:1/d", tcp("h", 1), "u", Some("p"), "d");
        check("postgresql://u@h/d", tcp("h", 5432), "u", None, "d");
        check("postgres://u@[::1]:7/d", tcp("::1", 7), "u", None, "d");
        check("postgres://u@%2Ftmp%2Fpg/d", Host::Unix("/tmp/pg".into(), 5432), "u", None, "d");
        check("postgres://u@/d?host=/tmp/pg&port=9", Host::Unix("/tmp/pg".into(), 9), "u", None, "d");
        check("postgres://u:p%3Aq@h/d?sslmode=disable", tcp("h", 5432), "u", Some("p:q"), "d");
        check("host=h port=2 user=u password='a b\\'c' dbname=d", tcp("h", 2), "u", Some("a b'c"), "d");
        check("host = /s  user=u", Host::Unix("/s".into(), 5432), "u", None, "u");
    }

    #[test]
    fn bad_settings_are_config_errors_naming_the_problem() {
        for (s, says) in [
            ("postgres://h:0/d", "bad port"),
            ("postgres://h/d?nope=1", "unknown setting"),
            ("postgres://h/d?sslmode=always", "bad sslmode"),
            ("host=h channel_binding=yes", "bad channel_binding"),
            ("postgres://h/d?statement_cache_capacity=-1", "bad statement_cache_capacity \"-1\""),
            ("statement_cache_capacity=off", "0 turns the cache off"),
            ("postgres://h/%zz", "percent-escape"),
            ("host='h", "unclosed quote"),
            ("host", "no '='"),
            ("http://h/d", "not a postgres:// URL"),
        ] {
            match Config::parse(s) {
                Err(Error::Config(m)) => assert!(m.contains(says), "{s}: {m}"),
                other => panic!("{s}: {other:?}"),
            }
        }
    }

    #[test]
    fn statement_cache_capacity_is_read_from_urls_and_key_values() {
        for (s, capacity) in [
            ("postgres://u@h/d", 256),
            ("postgres://u@h/d?statement_cache_capacity=0", 0),
            ("postgres://u@h/d?application_name=x&statement_cache_capacity=16", 16),
            ("host=h statement_cache_capacity=0 user=u", 0),
        ] {
            let c = Config::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
            assert_eq!(c.get_statement_cache_capacity(), capacity, "{s}");
        }
    }

    #[test]
    fn errors_never_show_the_password() {
        for s in [
            "postgres://app:hunter2@h:99999/d",
            "postgres://app:hun%zzter2@h/d",
            "postgres://app:hunter2@h/d?nope=1",
            "postgres://app@h/d?password=hunter2&port=0",
            "postgres://app@h/d?password=hun%zzter2",
            "mysql://app:hunter2@h/d",
            "password=hunter2 port=99999",
            "password='hunter2 port=1",
            "postgres://app:hunter2@h/d?sslmode=always",
            "password=hunter2 channel_binding=yes",
        ] {
            let err = Config::parse(s).unwrap_err().to_string();
            assert!(!err.contains("hunter") && !err.contains("ter2"), "{s}: {err}");
        }
        let err = Config::parse("postgres://app:hunter2@h:99999/d").unwrap_err().to_string();
        assert!(err.contains("bad port \"99999\"") && err.contains("postgres://app:***@h:99999/d"), "{err}");
    }

    #[test]
    fn timeouts_and_keepalives_have_defaults_and_libpq_keys() {
        let c = Config::new();
        assert_eq!(c.get_connect_timeout(), Some(DEFAULT_CONNECT_TIMEOUT));
        assert_eq!(c.get_keepalive(), Some(liveness::DEFAULT_KEEPALIVE));
        let c = Config::parse("host=h connect_timeout=0 keepalives=0 tcp_user_timeout=1500").unwrap();
        assert_eq!((c.get_connect_timeout(), c.get_keepalive()), (None, None));
        assert_eq!(c.get_tcp_user_timeout(), Some(Duration::from_millis(1500)));
        let c = Config::parse("postgres://h/d?connect_timeout=3&keepalives_count=9").unwrap();
        assert_eq!(c.get_connect_timeout(), Some(Duration::from_secs(3)));
        assert_eq!(c.get_keepalive().map(|k| k.retries), Some(9));
        for (s, says) in [
            ("keepalives=yes", "bad keepalives \"yes\""),
            ("keepalives_idle=0", "keepalives_idle must be at least 1"),
            ("keepalives_interval=-1", "bad keepalives_interval (seconds) \"-1\""),
            ("tcp_user_timeout=soon", "bad tcp_user_timeout (milliseconds) \"soon\""),
        ] {
            let err = Config::parse(&format!("host=h {s}")).unwrap_err().to_string();
            assert!(err.contains(says), "{s}: {err}");
        }
    }

    #[test]
    fn tls_settings_parse_from_urls_and_key_values_alike() {
        let url = "postgres://u@h/d?sslmode=verify-ca&sslrootcert=%2Fca.pem&sslcert=c.pem&sslkey=k.pem&channel_binding=require";
        let kv = "host=h user=u dbname=d sslmode=verify-ca sslrootcert=/ca.pem sslcert=c.pem sslkey=k.pem channel_binding=require";
        let built = Config::new()
            .tcp("h", 5432)
            .user("u")
            .dbname("d")
            .ssl_mode(SslMode::VerifyCa)
            .ssl_root_cert("/ca.pem")
            .ssl_cert("c.pem")
            .ssl_key("k.pem")
            .channel_binding(ChannelBinding::Require);
        assert_eq!(Config::parse(url).unwrap(), built);
        assert_eq!(Config::parse(kv).unwrap(), built);
        for mode in ["disable", "allow", "prefer", "require", "verify-ca", "verify-full"] {
            let c = Config::parse(&format!("host=h sslmode={mode}")).unwrap();
            assert_eq!(c.get_ssl_mode().to_string(), mode);
        }
    }

    #[test]
    fn system_roots_make_verify_full_the_default_mode() {
        assert_eq!(Config::parse("host=h sslrootcert=system").unwrap().get_ssl_mode(), SslMode::VerifyFull);
        let weaker = Config::parse("host=h sslrootcert=system sslmode=require").unwrap();
        assert_eq!(weaker.get_ssl_mode(), SslMode::Require, "kept as set: connecting refuses it");
    }

    #[test]
    fn debug_output_shows_the_tls_files() {
        let c = Config::parse("postgres://u@h/d?sslkey=/keys/app.key&sslrootcert=system").unwrap();
        let debug = format!("{c:?}");
        assert!(debug.contains("/keys/app.key") && debug.contains("system"), "{debug}");
    }

    #[test]
    fn debug_output_hides_the_password() {
        let c = Config::parse("postgres://u:hunter2@h/d").unwrap();
        assert!(!format!("{c:?}").contains("hunter2"));
    }
}

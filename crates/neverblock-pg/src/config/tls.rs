//! The TLS settings, in libpq's spelling: `sslmode`, `sslrootcert`, `sslcert`, `sslkey` and
//! `channel_binding`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use super::Config;

/// libpq's `sslmode`: whether the connection uses TLS, and what is checked of the server's
/// certificate. The default is [`Prefer`](SslMode::Prefer), as libpq's, or
/// [`VerifyFull`](SslMode::VerifyFull) with `sslrootcert=system`. As in libpq, the server's
/// chain is checked in every mode that uses TLS whenever the root file exists (`sslrootcert`, else
/// `~/.postgresql/root.crt`), and `sslmode` is ignored on a unix socket: PostgreSQL offers no TLS
/// there, so such a connection is cleartext whatever the mode.
///
/// # Examples
///
/// ```
/// use neverblock_pg::config::SslMode;
///
/// assert_eq!("verify-full".parse::<SslMode>().unwrap(), SslMode::VerifyFull);
/// assert_eq!(SslMode::VerifyCa.to_string(), "verify-ca");
/// assert_eq!(SslMode::default(), SslMode::Prefer);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SslMode {
    /// Cleartext only.
    Disable,
    /// Cleartext first; TLS only when the server refuses the cleartext login (say through a
    /// `hostssl` line of `pg_hba.conf`), its certificate checked only against an existing root file.
    Allow,
    /// TLS when the server offers it, else cleartext; the certificate is checked only against an
    /// existing root file. A TLS attempt that fails (in the handshake, an untrusted certificate
    /// included, or refused by the server) is tried again in cleartext.
    #[default]
    Prefer,
    /// TLS or fail. The certificate is not checked, unless the root file exists (`sslrootcert`, else
    /// `~/.postgresql/root.crt`): then as `VerifyCa`.
    Require,
    /// TLS, and the server's certificate must chain to a root of `sslrootcert` (else
    /// `~/.postgresql/root.crt`, which must then exist); its names are not checked.
    VerifyCa,
    /// TLS, the certificate chains to a root of `sslrootcert`, and names the host connected to.
    VerifyFull,
}

impl SslMode {
    fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

impl FromStr for SslMode {
    type Err = String;

    fn from_str(s: &str) -> Result<SslMode, String> {
        [SslMode::Disable, SslMode::Allow, SslMode::Prefer, SslMode::Require, SslMode::VerifyCa, SslMode::VerifyFull]
            .into_iter()
            .find(|mode| mode.name() == s)
            .ok_or_else(|| format!("bad sslmode {s:?} (disable, allow, prefer, require, verify-ca or verify-full)"))
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// libpq's `channel_binding`: whether SCRAM-SHA-256 logins bind themselves to the TLS session
/// (SCRAM-SHA-256-PLUS with `tls-server-end-point`), which proves the server that checked the
/// password is the one at the end of the TLS session. The default is
/// [`Prefer`](ChannelBinding::Prefer).
///
/// # Examples
///
/// ```
/// use neverblock_pg::config::ChannelBinding;
///
/// assert_eq!("require".parse::<ChannelBinding>().unwrap(), ChannelBinding::Require);
/// assert_eq!(ChannelBinding::default().to_string(), "prefer");
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ChannelBinding {
    /// Never bind (plain SCRAM-SHA-256, even over TLS).
    Disable,
    /// Bind when the connection uses TLS and the server offers SCRAM-SHA-256-PLUS.
    #[default]
    Prefer,
    /// Bind or fail: the login fails without TLS, when the server offers no
    /// SCRAM-SHA-256-PLUS, and when it logs the role in without SCRAM at all (trust, md5).
    Require,
}

impl ChannelBinding {
    fn name(self) -> &'static str {
        match self {
            ChannelBinding::Disable => "disable",
            ChannelBinding::Prefer => "prefer",
            ChannelBinding::Require => "require",
        }
    }
}

impl FromStr for ChannelBinding {
    type Err = String;

    fn from_str(s: &str) -> Result<ChannelBinding, String> {
        [ChannelBinding::Disable, ChannelBinding::Prefer, ChannelBinding::Require]
            .into_iter()
            .find(|binding| binding.name() == s)
            .ok_or_else(|| format!("bad channel_binding {s:?} (disable, prefer or require)"))
    }
}

impl fmt::Display for ChannelBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The `sslrootcert` value that means the system's roots (webpki-roots), as in libpq.
pub(crate) const SYSTEM_ROOTS: &str = "system";

/// A connection's TLS settings as given (`Config::set` fills them in): file paths, never their
/// contents, so nothing secret.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct TlsSettings {
    /// `None` until set: the default depends on `root_cert`.
    pub(super) mode: Option<SslMode>,
    pub(super) root_cert: Option<PathBuf>,
    pub(super) cert: Option<PathBuf>,
    pub(super) key: Option<PathBuf>,
    pub(super) channel_binding: ChannelBinding,
}

impl Config {
    /// Sets `sslmode`: whether to use TLS and what to check of the server's certificate.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_pg::{config::SslMode, Config};
    ///
    /// let c = Config::new().ssl_mode(SslMode::VerifyFull).ssl_root_cert("/etc/ssl/db-ca.pem");
    /// assert_eq!(c.get_ssl_mode(), SslMode::VerifyFull);
    /// assert_eq!(Config::parse("postgres://h/d?sslmode=require").unwrap().get_ssl_mode(), SslMode::Require);
    /// ```
    pub fn ssl_mode(mut self, mode: SslMode) -> Config {
        self.tls.mode = Some(mode);
        self
    }

    /// Sets `sslrootcert`: a PEM file of the certificate authorities that may sign the server's
    /// certificate, or `system` for the system's roots (Mozilla's, from webpki-roots), which also
    /// makes `verify-full` the default mode. Without it, `~/.postgresql/root.crt` is read, as libpq
    /// does. If the file exists, the server's chain is checked against it in every mode that uses
    /// TLS; if not, `verify-ca` and `verify-full` fail and the modes below them check nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_pg::{config::SslMode, Config};
    ///
    /// let c = Config::new().ssl_root_cert("/etc/ssl/db-ca.pem");
    /// assert_eq!(c.get_ssl_root_cert(), Some("/etc/ssl/db-ca.pem".as_ref()));
    /// assert_eq!(Config::new().ssl_root_cert("system").get_ssl_mode(), SslMode::VerifyFull);
    /// ```
    pub fn ssl_root_cert(mut self, path: impl Into<PathBuf>) -> Config {
        self.tls.root_cert = Some(path.into());
        self
    }

    /// Sets `sslcert`: the client certificate (PEM; intermediates may follow it in the file),
    /// sent when the server asks for one (`pg_hba.conf`'s `cert` method, or `clientcert=`). The
    /// default is `~/.postgresql/postgresql.crt`, as libpq's; when the file does not exist, no
    /// certificate is sent. Its key is [`ssl_key`](Config::ssl_key).
    ///
    /// # Examples
    ///
    /// ```
    /// let c = neverblock_pg::Config::new().ssl_cert("app.crt").ssl_key("app.key");
    /// assert_eq!(c.get_ssl_cert(), Some("app.crt".as_ref()));
    /// ```
    pub fn ssl_cert(mut self, path: impl Into<PathBuf>) -> Config {
        self.tls.cert = Some(path.into());
        self
    }

    /// Sets `sslkey`: the private key of [`ssl_cert`](Config::ssl_cert)'s certificate (PEM,
    /// unencrypted: PKCS#8, PKCS#1 or SEC1), by default `~/.postgresql/postgresql.key`. As libpq,
    /// the file must give no access to group or others (`0600`), or group read alone when root
    /// owns it (`0640`); it is read only when there is a certificate to send.
    ///
    /// # Examples
    ///
    /// ```
    /// let c = neverblock_pg::Config::new().ssl_cert("app.crt").ssl_key("app.key");
    /// assert_eq!(c.get_ssl_key(), Some("app.key".as_ref()));
    /// ```
    pub fn ssl_key(mut self, path: impl Into<PathBuf>) -> Config {
        self.tls.key = Some(path.into());
        self
    }

    /// Sets `channel_binding`: whether a SCRAM-SHA-256 login binds itself to the TLS session.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_pg::{config::ChannelBinding, Config};
    ///
    /// let c = Config::new().channel_binding(ChannelBinding::Require);
    /// assert_eq!(c.get_channel_binding(), ChannelBinding::Require);
    /// ```
    pub fn channel_binding(mut self, binding: ChannelBinding) -> Config {
        self.tls.channel_binding = binding;
        self
    }

    /// The `sslmode` in effect: as set, else `verify-full` with `sslrootcert=system`, else `prefer`.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_pg::{config::SslMode, Config};
    ///
    /// assert_eq!(Config::new().get_ssl_mode(), SslMode::Prefer);
    /// ```
    pub fn get_ssl_mode(&self) -> SslMode {
        let system = self.tls.root_cert.as_deref() == Some(Path::new(SYSTEM_ROOTS));
        self.tls.mode.unwrap_or(if system { SslMode::VerifyFull } else { SslMode::Prefer })
    }

    /// The `sslrootcert` path (or `system`), if set.
    ///
    /// # Examples
    ///
    /// ```
    /// let c = neverblock_pg::Config::parse("host=db sslrootcert=system").unwrap();
    /// assert_eq!(c.get_ssl_root_cert(), Some("system".as_ref()));
    /// ```
    pub fn get_ssl_root_cert(&self) -> Option<&Path> {
        self.tls.root_cert.as_deref()
    }

    /// The client certificate's path, if set.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(neverblock_pg::Config::new().get_ssl_cert(), None);
    /// ```
    pub fn get_ssl_cert(&self) -> Option<&Path> {
        self.tls.cert.as_deref()
    }

    /// The client key's path, if set.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(neverblock_pg::Config::new().get_ssl_key(), None);
    /// ```
    pub fn get_ssl_key(&self) -> Option<&Path> {
        self.tls.key.as_deref()
    }

    /// The `channel_binding` setting.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_pg::{config::ChannelBinding, Config};
    ///
    /// assert_eq!(Config::new().get_channel_binding(), ChannelBinding::Prefer);
    /// ```
    pub fn get_channel_binding(&self) -> ChannelBinding {
        self.tls.channel_binding
    }
}

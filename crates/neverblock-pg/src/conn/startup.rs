//! Opening a session: TLS as `sslmode` says, the startup message, authentication
//! (trust, cleartext, md5, SCRAM-SHA-256 with or without channel binding), then the
//! server's parameters and cancel key.

use bytes::BytesMut;
use postgres_protocol::authentication::{md5_hash, sasl};
use postgres_protocol::message::backend::Message;
use postgres_protocol::message::frontend;
use std::collections::HashMap;

use super::socket::{Framed, TcpOrUnixStream};
use super::tls::{self, Encryption};
use super::CancelKey;
use crate::config::ChannelBinding;
use crate::{Config, DbError, Error};

/// A session ready for its first query.
pub(crate) struct Session {
    pub(crate) framed: Framed,
    pub(crate) key: Option<CancelKey>,
    pub(crate) parameters: HashMap<String, String>,
}

/// Connects and logs in, within the config's connect timeout.
pub(crate) fn open(config: &Config) -> Result<Session, Error> {
    match config.get_connect_timeout() {
        None => open_now(config),
        Some(limit) => match neverblock::timeout(limit, || open_now(config)) {
            Ok(result) => result.map_err(|e| match e {
                Error::Timeout => connect_timed_out(config),
                other => other,
            }),
            Err(_) => Err(connect_timed_out(config)),
        },
    }
}

fn connect_timed_out(config: &Config) -> Error {
    let source = std::io::Error::new(std::io::ErrorKind::TimedOut, "connecting and logging in timed out");
    Error::Connect { target: config.get_host().to_string(), source }
}

/// Logs in as `sslmode` says: one attempt, and libpq's second one in another encryption
/// when the mode has one and the first failed in a way it may cure.
fn open_now(config: &Config) -> Result<Session, Error> {
    tls::check(config)?;
    let (failure, over_tls) = match attempt(config, Encryption::first(config.get_ssl_mode())) {
        Ok(session) => return Ok(session),
        Err(first) => first,
    };
    let Some(second) = Encryption::retry(config, &failure, over_tls) else { return Err(failure) };
    log::debug!("sslmode={}: trying again with {second:?} after: {failure}", config.get_ssl_mode());
    attempt(config, second).map_err(|again| failed_twice(config, (failure, over_tls), again))
}

/// The error of two failed attempts: the one over TLS (`prefer`'s first, `allow`'s second when
/// the server took TLS), else the last; a TLS failure also tells how the other attempt failed,
/// as libpq reports both.
fn failed_twice(config: &Config, first: (Error, bool), second: (Error, bool)) -> Error {
    let mode = config.get_ssl_mode();
    let (main, other, when) = match first.1 {
        true => (first.0, second.0, "then tried without TLS, and that failed too"),
        false => (second.0, first.0, "had tried without TLS first, and that failed"),
    };
    match main {
        Error::Tls(message) => Error::Tls(format!("{message}; sslmode={mode} {when}: {other}")),
        main => main,
    }
}

/// Connects, sets up TLS as `encryption` says, and logs in; a failure says whether the
/// attempt got as far as TLS.
fn attempt(config: &Config, encryption: Encryption) -> Result<Session, (Error, bool)> {
    let socket = TcpOrUnixStream::connect(config.get_host())
        .and_then(|socket| socket.watch_liveness(config).map(|()| socket))
        .map_err(|source| (Error::Connect { target: config.get_host().to_string(), source }, false))?;
    let socket = tls::negotiate(socket, config, encryption).map_err(|e| {
        let over_tls = matches!(e, Error::Tls(_));
        (e, over_tls)
    })?;
    let over_tls = socket.tls().is_some();
    log_in(Framed::new(socket), config).map_err(|e| (e, over_tls))
}

/// The startup message and authentication on an open stream, up to `ReadyForQuery`.
fn log_in(mut framed: Framed, config: &Config) -> Result<Session, Error> {
    let mut out = BytesMut::with_capacity(256);
    let mut params = vec![("user", config.get_user()), ("database", config.get_dbname()), ("client_encoding", "UTF8")];
    if let Some(name) = config.get_application_name() {
        params.push(("application_name", name));
    }
    frontend::startup_message(params, &mut out).map_err(|e| Error::Config(format!("startup parameters: {e}")))?;
    framed.send(&mut out)?;
    authenticate(&mut framed, config, &mut out)?;

    let mut session = Session { framed, key: None, parameters: HashMap::new() };
    loop {
        match session.framed.next_message()? {
            Message::BackendKeyData(body) => {
                session.key = Some(CancelKey { process_id: body.process_id(), secret: body.secret_key() });
            }
            Message::ParameterStatus(body) => {
                if let (Ok(name), Ok(value)) = (body.name(), body.value()) {
                    session.parameters.insert(name.to_owned(), value.to_owned());
                }
            }
            Message::NoticeResponse(body) => super::log_notice(body.fields()),
            Message::ReadyForQuery(_) => return Ok(session),
            Message::ErrorResponse(body) => return Err(Error::Db(Box::new(DbError::parse(body.fields())))),
            _ => return Err(Error::protocol("unexpected message while starting the session")),
        }
    }
}

/// Answers the server's authentication requests until `AuthenticationOk`.
fn authenticate(framed: &mut Framed, config: &Config, out: &mut BytesMut) -> Result<(), Error> {
    let user = config.get_user();
    let password = || {
        config
            .get_password()
            .ok_or_else(|| Error::Auth(format!("the server asks {user} for a password and none was given")))
    };
    let binding_required = config.get_channel_binding() == ChannelBinding::Require;
    let unbound = |method: &str| {
        Error::Auth(format!(
            "channel_binding=require, but the server asks {user} for {method}, which cannot be bound to the connection"
        ))
    };
    let mut scram: Option<(sasl::ScramSha256, &'static str)> = None;
    let mut bound = false;
    loop {
        match framed.next_message()? {
            Message::AuthenticationOk if binding_required && !bound => {
                return Err(Error::Auth(format!(
                    "channel_binding=require, but the server logged {user} in without SCRAM-SHA-256-PLUS \
                     (its pg_hba.conf method for this connection is not scram-sha-256)"
                )))
            }
            Message::AuthenticationOk => return Ok(()),
            Message::AuthenticationCleartextPassword if binding_required => {
                return Err(unbound("a cleartext password"))
            }
            Message::AuthenticationCleartextPassword => {
                frontend::password_message(password()?.as_bytes(), out).map_err(Error::Io)?;
            }
            Message::AuthenticationMd5Password(_) if binding_required => return Err(unbound("an md5 password")),
            Message::AuthenticationMd5Password(body) => {
                let hash = md5_hash(user.as_bytes(), password()?.as_bytes(), body.salt());
                frontend::password_message(hash.as_bytes(), out).map_err(Error::Io)?;
            }
            Message::AuthenticationSasl(body) => {
                let (mut plain, mut plus) = (false, false);
                let mut mechanisms = body.mechanisms();
                while let Some(m) = fallible_iterator::FallibleIterator::next(&mut mechanisms)
                    .map_err(|e| Error::protocol(format!("SASL mechanisms: {e}")))?
                {
                    plain |= m == sasl::SCRAM_SHA_256;
                    plus |= m == sasl::SCRAM_SHA_256_PLUS;
                }
                let (mechanism, binding) = scram_mechanism(config, framed.socket(), plain, plus)?;
                let s = sasl::ScramSha256::new(password()?.as_bytes(), binding);
                frontend::sasl_initial_response(mechanism, s.message(), out).map_err(Error::Io)?;
                scram = Some((s, mechanism));
            }
            Message::AuthenticationSaslContinue(body) => {
                let (s, _) = scram.as_mut().ok_or_else(|| Error::protocol("SASL continue before SASL start"))?;
                s.update(body.data()).map_err(|e| Error::Auth(format!("SCRAM: {e}")))?;
                frontend::sasl_response(s.message(), out).map_err(Error::Io)?;
            }
            Message::AuthenticationSaslFinal(body) => {
                let (s, mechanism) = scram.as_mut().ok_or_else(|| Error::protocol("SASL final before SASL start"))?;
                s.finish(body.data()).map_err(|e| Error::Auth(format!("the server's SCRAM proof is wrong: {e}")))?;
                bound = *mechanism == sasl::SCRAM_SHA_256_PLUS;
                continue;
            }
            Message::ErrorResponse(body) => return Err(Error::Db(Box::new(DbError::parse(body.fields())))),
            Message::NoticeResponse(body) => {
                super::log_notice(body.fields());
                continue;
            }
            _ => {
                return Err(Error::Auth(
                    "the server asks for an authentication method this client does not speak (GSSAPI, SSPI, Kerberos)"
                        .into(),
                ))
            }
        }
        framed.send(out)?;
    }
}

/// The SCRAM mechanism to answer a SASL request with (the server offers `plain`
/// SCRAM-SHA-256, `plus` SCRAM-SHA-256-PLUS), and the channel binding, as
/// `channel_binding` says: bound to the TLS session when it can be and is not
/// disabled; else unbound, telling the server (as the `y`/`n` flag) whether the
/// client could have bound, so that a server that offered binding can spot a
/// man in the middle who removed the offer.
fn scram_mechanism(
    config: &Config,
    socket: &TcpOrUnixStream,
    plain: bool,
    plus: bool,
) -> Result<(&'static str, sasl::ChannelBinding), Error> {
    let tls = socket.tls();
    let policy = config.get_channel_binding();
    let end_point = match (policy, plus) {
        (ChannelBinding::Disable, _) | (_, false) => None,
        _ => tls.and_then(|tls| tls.tls_server_end_point()),
    };
    if let Some(end_point) = end_point {
        return Ok((sasl::SCRAM_SHA_256_PLUS, sasl::ChannelBinding::tls_server_end_point(end_point)));
    }
    if policy == ChannelBinding::Require {
        let why = match (tls, plus) {
            (None, _) => {
                "the connection has no TLS (sslmode, a unix socket, or a server without TLS), so no SCRAM-SHA-256-PLUS"
            }
            (Some(_), false) => "the server does not offer SCRAM-SHA-256-PLUS",
            (Some(_), true) => "the server's certificate is signed with an algorithm that names no hash to bind with",
        };
        return Err(Error::Auth(format!("channel_binding=require, but {why}")));
    }
    if !plain {
        return Err(Error::Auth(
            "the server offers SCRAM-SHA-256-PLUS alone, and this connection cannot bind to it \
             (that needs TLS, and channel_binding other than disable)"
                .into(),
        ));
    }
    let binding = match (policy, tls, plus) {
        (ChannelBinding::Prefer, Some(_), false) => sasl::ChannelBinding::unrequested(),
        _ => sasl::ChannelBinding::unsupported(),
    };
    Ok((sasl::SCRAM_SHA_256, binding))
}

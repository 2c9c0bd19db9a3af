//! Opening a session: the startup message, authentication (trust, cleartext,
//! md5, SCRAM-SHA-256), then the server's parameters and cancel key.

use bytes::BytesMut;
use postgres_protocol::authentication::{md5_hash, sasl};
use postgres_protocol::message::backend::Message;
use postgres_protocol::message::frontend;
use std::collections::HashMap;

use super::socket::{Framed, TcpOrUnixStream};
use super::CancelKey;
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

fn open_now(config: &Config) -> Result<Session, Error> {
    let socket = TcpOrUnixStream::connect(config.get_host())
        .and_then(|socket| socket.watch_liveness(config).map(|()| socket))
        .map_err(|source| Error::Connect { target: config.get_host().to_string(), source })?;
    let mut framed = Framed::new(socket);
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
    let password = || {
        config.get_password().ok_or_else(|| {
            Error::Auth(format!("the server asks {} for a password and none was given", config.get_user()))
        })
    };
    let mut scram: Option<sasl::ScramSha256> = None;
    loop {
        match framed.next_message()? {
            Message::AuthenticationOk => return Ok(()),
            Message::AuthenticationCleartextPassword => {
                frontend::password_message(password()?.as_bytes(), out).map_err(Error::Io)?;
            }
            Message::AuthenticationMd5Password(body) => {
                let hash = md5_hash(config.get_user().as_bytes(), password()?.as_bytes(), body.salt());
                frontend::password_message(hash.as_bytes(), out).map_err(Error::Io)?;
            }
            Message::AuthenticationSasl(body) => {
                let mut mechanisms = body.mechanisms();
                let mut offered = false;
                while let Some(m) = fallible_iterator::FallibleIterator::next(&mut mechanisms)
                    .map_err(|e| Error::protocol(format!("SASL mechanisms: {e}")))?
                {
                    offered |= m == sasl::SCRAM_SHA_256;
                }
                if !offered {
                    return Err(Error::Auth(
                        "the server offers no SASL mechanism but SCRAM-SHA-256-PLUS, which needs TLS".into(),
                    ));
                }
                // No TLS, so no channel binding to offer.
                let s = sasl::ScramSha256::new(password()?.as_bytes(), sasl::ChannelBinding::unsupported());
                frontend::sasl_initial_response(sasl::SCRAM_SHA_256, s.message(), out).map_err(Error::Io)?;
                scram = Some(s);
            }
            Message::AuthenticationSaslContinue(body) => {
                let s = scram.as_mut().ok_or_else(|| Error::protocol("SASL continue before SASL start"))?;
                s.update(body.data()).map_err(|e| Error::Auth(format!("SCRAM: {e}")))?;
                frontend::sasl_response(s.message(), out).map_err(Error::Io)?;
            }
            Message::AuthenticationSaslFinal(body) => {
                let s = scram.as_mut().ok_or_else(|| Error::protocol("SASL final before SASL start"))?;
                s.finish(body.data()).map_err(|e| Error::Auth(format!("the server's SCRAM proof is wrong: {e}")))?;
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

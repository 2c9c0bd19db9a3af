//! Where `serve` listens: each `--listen` and `--tls-listen` is an address to bind, or `fd:N`, a
//! socket systemd's socket activation handed over; and after an upgrade, the sockets the process
//! it replaces handed over, found by the option's name and place.

use std::net::TcpListener;

use anyhow::Context;
use neverblock::net::ListenFds;

/// One `--listen` or `--tls-listen`, and where it listens.
#[derive(Debug)]
pub(crate) struct Place {
    /// The option and its value, as given (`--listen 127.0.0.1:8080`).
    pub(crate) given: String,
    /// The name its sockets are handed over under in an upgrade (`listen.0`, `tls-listen.1`).
    pub(crate) name: String,
    pub(crate) tls: bool,
    pub(crate) socket: Socket,
}

/// What a place listens on.
#[derive(Debug)]
pub(crate) enum Socket {
    /// An address to bind.
    Address(String),
    /// Sockets handed over (one from systemd, one per loop from a process upgraded).
    Handed(Vec<TcpListener>),
}

/// The places of `cleartext` (the `--listen` values) and `tls` (the `--tls-listen` ones), in this
/// order, each with the sockets `handed` has for it: those handed over under its name (an upgrade),
/// else for `fd:N` the descriptor N (socket activation). Handed descriptors no place uses (the
/// caller has taken the readiness pipe out) are closed, with a warning.
///
/// # Errors
///
/// A value `fd:N` whose N is not a number, or not a descriptor handed to this process (saying
/// why, when `LISTEN_FDS` was meant for another process), or one another place took already.
pub(crate) fn places(cleartext: &[String], tls: &[String], handed: &mut ListenFds) -> anyhow::Result<Vec<Place>> {
    let given =
        cleartext.iter().map(|value| ("listen", value, false)).chain(tls.iter().map(|v| ("tls-listen", v, true)));
    let mut counts = [0, 0];
    let mut places = Vec::new();
    for (option, value, is_tls) in given {
        let index = &mut counts[usize::from(is_tls)];
        let name = format!("{option}.{index}");
        *index += 1;
        let given = format!("--{option} {value}");
        let by_name = handed.take_named(&name);
        let socket = match value.strip_prefix("fd:") {
            _ if !by_name.is_empty() => Socket::Handed(by_name.into_iter().map(TcpListener::from).collect()),
            Some(number) => Socket::Handed(vec![TcpListener::from(handed_fd(&given, number, handed)?)]),
            None => Socket::Address(value.clone()),
        };
        places.push(Place { given, name, tls: is_tls, socket });
    }
    for (fd, name) in handed.remaining() {
        log::warn!(
            "descriptor {fd} ({name}) was handed to this process but no --listen or --tls-listen names it; closed"
        );
    }
    Ok(places)
}

/// The descriptor `number` (of `--listen fd:NUMBER`, `given` whole) that `handed` holds.
fn handed_fd(given: &str, number: &str, handed: &mut ListenFds) -> anyhow::Result<std::os::fd::OwnedFd> {
    let fd = number.parse().with_context(|| format!("{given}: {number:?} is not a descriptor number"))?;
    if let Some(fd) = handed.take_fd(fd) {
        return Ok(fd);
    }
    match handed.ignored() {
        Some(why) => anyhow::bail!("{given}: the sockets in LISTEN_FDS are not for this process ({why})"),
        None if handed.is_empty() => anyhow::bail!("{given}: no socket was handed to this process (no LISTEN_FDS)"),
        None => anyhow::bail!(
            "{given}: descriptor {fd} is not among those handed to this process (3 to {}), or another option took it",
            2 + handed.len()
        ),
    }
}

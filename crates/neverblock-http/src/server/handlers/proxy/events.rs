//! What a proxy tells its observer: each request sent on, each one done, each upstream failure.

use std::sync::Arc;

use crate::error::ErrorKind;

/// Something that happened to a request a [`Proxy`](super::Proxy) sent on (see
/// [`Proxy::observe`](super::Proxy::observe)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProxyEvent {
    /// A request is being sent to the upstream: it is in flight until its `Done`.
    Sent,
    /// The request is over: its answer's body was passed on (whole or cut short), or it got none.
    Done,
    /// The upstream failed it, in this way.
    UpstreamFailed(UpstreamFailure),
}

/// How the upstream failed a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum UpstreamFailure {
    /// It refused the connection.
    Refused,
    /// It reset or closed the connection before or while answering.
    Reset,
    /// It did not accept the connection, or send the next part of its answer, in time.
    Timeout,
    /// Anything else: an answer that is not HTTP, a name that does not resolve, a TLS failure.
    Other,
}

impl UpstreamFailure {
    /// The failure the client's error of `kind` means.
    pub(super) fn of(kind: ErrorKind) -> UpstreamFailure {
        match kind {
            ErrorKind::Refused => UpstreamFailure::Refused,
            ErrorKind::Reset | ErrorKind::Truncated => UpstreamFailure::Reset,
            ErrorKind::ConnectTimeout | ErrorKind::ReadTimeout | ErrorKind::TotalTimeout => UpstreamFailure::Timeout,
            _ => UpstreamFailure::Other,
        }
    }
}

/// The observer a proxy tells.
pub(super) type Observer = Arc<dyn Fn(ProxyEvent) + Send + Sync>;

/// A request in flight: told `Sent` when it starts and `Done` when it is dropped.
pub(super) struct InFlight {
    observer: Option<Observer>,
}

impl InFlight {
    pub(super) fn start(observer: Option<Observer>) -> InFlight {
        let in_flight = InFlight { observer };
        in_flight.tell(ProxyEvent::Sent);
        in_flight
    }

    /// Tells the observer, if there is one.
    pub(super) fn tell(&self, event: ProxyEvent) {
        if let Some(observer) = &self.observer {
            observer(event);
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.tell(ProxyEvent::Done);
    }
}

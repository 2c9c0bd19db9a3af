//! One HTTP/2 stream on its own fiber: the request's head made into the same `Request` an HTTP/1
//! handler gets, the handler called (a panic answers this stream 500; the connection goes on),
//! the response sent, the exchange reported to the server's hook, and what is left of the
//! request body drained (up to HTTP/1's limit) so the client can end its request, before the
//! response's end.

use std::time::{Instant, SystemTime};

use bytes::Bytes;
use h2::server::SendResponse;
use h2::RecvStream;
use neverblock::runtime::TaskActivity;

use super::body::Http2Body;
use super::send::{end_held, send, Sent};
use crate::server::connection::Connection;
use crate::server::exchange::Exchange;
use crate::server::http1::DRAIN_LIMIT;
use crate::server::naming::Answering;
use crate::server::panics::{catch, panic_message};
use crate::server::request::{BodySource, Request, RequestBody, RequestParts};
use crate::server::response::Response;
use crate::server::ServerLoop;
use crate::wire::head::Head;
use crate::wire::server::target_parts;
use crate::Version;

/// Answers the stream that carried `request`.
pub(super) fn answer(
    request: http::Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    connection: &Connection,
    server_loop: &ServerLoop,
    activity: &TaskActivity,
) {
    let started = server_loop.config.hook.is_some().then(|| (Instant::now(), SystemTime::now()));
    server_loop.registry.counters().requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let config = &server_loop.config;
    let (parts, recv) = request.into_parts();
    let head = head_of(&parts);
    let _answering = Answering::start(activity, head.method(), head.target());
    let mut body = Http2Body::new(recv, config.limits.max_body, config.timeouts.body);
    let content_length = match head.get("content-length") {
        Some(value) => std::str::from_utf8(value).ok().and_then(|n| n.parse().ok()),
        None if body.is_finished_at_start() => Some(0),
        None => None,
    };
    let (mut response, parts) = match target_parts(head.method(), head.target()) {
        Err(refusal) => (Response::error(refusal.status, &refusal.why), None),
        Ok(_) if content_length.is_some_and(|n| n > config.limits.max_body) => {
            let why = format!("the request body is longer than {} bytes", config.limits.max_body);
            (Response::error(413, &why), None)
        }
        Ok((path, query)) => {
            let parts = RequestParts { version: Version::Http2, path, query, content_length };
            (handle(&head, &parts, &mut body, connection, server_loop), Some(parts))
        }
    };
    if let Some((status, why)) = body.failure.take() {
        log::debug!("{}: the request body of {} {} failed: {why}", connection.peer, head.method(), head.target());
        match status {
            Some(status) => response = Response::error(status, &why),
            None => return,
        }
    }
    // A request still coming when its response is complete is drained before the response's
    // end (up to HTTP/1's limit): the stream stays open meanwhile, so what the client sends on
    // it (a window update past 2^31-1, say) is still checked and answered.
    let hold_end = !body.is_finished();
    let (sent, held) = send(&mut respond, &mut response, head.method() == "HEAD", hold_end, config.timeouts.send);
    if let Some(started) = started {
        report(server_loop, &head, parts.as_ref(), &response, sent, connection, started);
    }
    if let Some(held) = held {
        body.drain(DRAIN_LIMIT);
        end_held(held);
    }
}

/// The request's head as a handler reads it: the `:authority` as `host` when no `host` field
/// came, then the fields as received.
fn head_of(parts: &http::request::Parts) -> Head {
    let target = parts.uri.path_and_query().map_or("/", |target| target.as_str());
    let authority = parts
        .uri
        .authority()
        .filter(|_| !parts.headers.contains_key(http::header::HOST))
        .map(|authority| ("host", authority.as_str().as_bytes()));
    let fields = parts.headers.iter().map(|(name, value)| (name.as_str(), value.as_bytes()));
    Head::of_request(parts.method.as_str(), target, "HTTP/2.0", authority.into_iter().chain(fields))
}

/// Calls the handler; a panic answers 500.
fn handle(
    head: &Head,
    parts: &RequestParts,
    body: &mut Http2Body,
    connection: &Connection,
    server_loop: &ServerLoop,
) -> Response {
    let mut request = Request {
        head,
        parts,
        peer: connection.peer,
        local: connection.local,
        tls: connection.tls.as_ref(),
        body: RequestBody { source: body },
    };
    match catch(|| server_loop.config.handler.handle(&mut request)) {
        Ok(response) => response,
        Err(payload) => {
            let text = panic_message(&*payload);
            log::error!("the handler panicked on {} {}: {text}; answering 500", head.method(), head.target());
            Response::error(500, "the handler failed")
        }
    }
}

/// Calls the server's response hook, if it has one.
fn report(
    server_loop: &ServerLoop,
    head: &Head,
    parts: Option<&RequestParts>,
    response: &Response,
    sent: Sent,
    connection: &Connection,
    (at, time): (Instant, SystemTime),
) {
    if let Some(hook) = &server_loop.config.hook {
        let exchange = Exchange {
            head: Some(head),
            line: None,
            parts,
            response,
            peer: connection.peer,
            local: connection.local,
            tls: connection.tls.as_ref(),
            body_bytes: sent.body_bytes,
            complete: sent.complete,
            started: time,
            duration: at.elapsed(),
        };
        if let Err(payload) = catch(|| hook(&exchange)) {
            log::error!(
                "the response hook panicked after {} {}: {}",
                connection.peer,
                response.status(),
                panic_message(&*payload)
            );
        }
    }
}

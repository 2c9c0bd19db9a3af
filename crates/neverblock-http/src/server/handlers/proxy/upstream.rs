//! One round trip to the upstream through the client: the request with the client's body streamed
//! as it is read, and the answer's head with its body still on the upstream connection (or, when
//! short, read already, to go out in one write with the head).

use std::io::{self, Read};

use crate::client::{Parts, Response, ResponseStream};
use crate::error::Error;
use crate::wire::client::Upload;
use crate::wire::head::Head;
use crate::Client;

/// An answer of known length up to this long is read from the upstream before its head goes to the
/// client, so both go out in one write (the server writes a body this short with its head).
const READ_FIRST: u64 = 64 * 1024;

/// The upstream's answer: its head, and its body, read already or still on the connection.
pub(super) enum Answer {
    /// Short, and read whole: the upstream connection is back in the pool already.
    Read(Response),
    /// Still on the upstream connection, read as the client takes it; the connection goes back to
    /// the pool when the body ends.
    Stream(ResponseStream),
}

impl Answer {
    pub(super) fn status(&self) -> u16 {
        match self {
            Answer::Read(response) => response.status(),
            Answer::Stream(stream) => stream.status(),
        }
    }

    /// The answer's head.
    pub(super) fn head(&self) -> &Head {
        match self {
            Answer::Read(response) => response.head(),
            Answer::Stream(stream) => stream.head(),
        }
    }
}

/// Why a request got no answer from the upstream.
pub(super) enum Failed {
    /// Reading the client's request body failed (the server answers that itself).
    Client,
    /// The upstream failed.
    Upstream(Error),
}

/// Sends the request of `parts` with `body` (`len` bytes, or of unknown length: sent chunked) and
/// returns the answer once its head has arrived. The request body is read from the client as the
/// upstream takes it, never whole.
pub(super) fn round_trip(
    client: &Client,
    parts: Parts<'_, &str>,
    body: &mut dyn Read,
    len: Option<u64>,
) -> Result<Answer, Failed> {
    let sent = match len {
        Some(0) => client.send_parts(parts, Upload::Bytes(&[])),
        len => {
            let mut tracked = Tracked { inner: body, failed: false };
            let sent = client.send_parts(parts, Upload::Reader { reader: &mut tracked, len });
            if sent.is_err() && tracked.failed {
                return Err(Failed::Client);
            }
            sent
        }
    };
    let stream = sent.map_err(Failed::Upstream)?;
    match stream.content_length() {
        // A body this short is read first, so it goes to the client in one write with the head.
        Some(len) if len <= READ_FIRST => Ok(Answer::Read(stream.into_response().map_err(Failed::Upstream)?)),
        _ => Ok(Answer::Stream(stream)),
    }
}

/// The client's request body, noting whether reading it failed (the client's fault, not the
/// upstream's).
struct Tracked<'a> {
    inner: &'a mut dyn Read,
    failed: bool,
}

impl Read for Tracked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let read = self.inner.read(buf);
        self.failed |= read.is_err();
        read
    }
}

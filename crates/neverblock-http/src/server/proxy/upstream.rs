//! One exchange with the upstream through the client: the request with the client's body, and the
//! answer's head with its body to read.

use std::io::Read;

use crate::client::{Client, Request as Outgoing};
use crate::error::Error;

/// The upstream's answer: its status, fields and body.
pub(super) struct Answer {
    pub(super) status: u16,
    pub(super) fields: Vec<(String, Vec<u8>)>,
    pub(super) body: Vec<u8>,
}

/// Why a request got no answer from the upstream.
pub(super) enum Failed {
    /// Reading the client's request body failed (the server answers that itself).
    Client,
    /// The upstream failed.
    Upstream(Error),
}

/// Sends `outgoing` with `body` (`len` bytes, or of unknown length) and returns the answer.
///
/// The client in this crate reads a body whole: the request body is read into memory before it is
/// sent (the server's body limit bounds it), and the answer's body is read whole before it is
/// passed on.
pub(super) fn exchange(
    client: &Client,
    outgoing: Outgoing,
    body: &mut dyn Read,
    len: Option<u64>,
) -> Result<Answer, Failed> {
    let mut bytes = Vec::new();
    if len != Some(0) {
        body.read_to_end(&mut bytes).map_err(|_| Failed::Client)?;
    }
    let outgoing = if bytes.is_empty() { outgoing } else { outgoing.body(bytes) };
    let response = client.request(&outgoing).map_err(Failed::Upstream)?;
    let fields = response.headers().map(|(n, v)| (n.to_owned(), v.to_vec())).collect();
    let status = response.status();
    Ok(Answer { status, fields, body: response.into_body() })
}

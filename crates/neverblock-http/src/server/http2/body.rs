//! An HTTP/2 request's body as the handler reads it: the stream's DATA frames one at a time, each
//! frame's bytes handed back to the client's window as they arrive (so at most one frame waits
//! here beside what the window lets h2 buffer), under the body limit and timeout; a failure kept
//! for the stream to answer with its status.

use std::io::{self, BufRead, Read};
use std::time::Duration;

use bytes::{Buf, Bytes};
use h2::RecvStream;

use crate::server::request::{read_buffered, BodySource};

/// A stream's request body.
#[derive(Debug)]
pub(super) struct Http2Body {
    recv: RecvStream,
    /// What arrived and is not read yet.
    piece: Bytes,
    /// Bytes received so far.
    received: u64,
    /// The most the body may be.
    limit: u64,
    /// The longest a read may wait for the next frame.
    timeout: Duration,
    ended: bool,
    /// Why the body could not be read whole: the status to answer instead (`None`: the stream is
    /// gone) and what went wrong.
    pub(super) failure: Option<(Option<u16>, String)>,
}

impl Http2Body {
    pub(super) fn new(recv: RecvStream, limit: u64, timeout: Duration) -> Http2Body {
        let ended = recv.is_end_stream();
        Http2Body { recv, piece: Bytes::new(), received: 0, limit, timeout, ended, failure: None }
    }

    /// Whether the request came without a body (its HEADERS ended the stream).
    pub(super) fn is_finished_at_start(&self) -> bool {
        self.ended
    }

    /// Records why reading failed, and the error a reader sees.
    fn fail(&mut self, status: Option<u16>, kind: io::ErrorKind, why: String) -> io::Error {
        self.failure = Some((status, why.clone()));
        io::Error::new(kind, why)
    }

    /// Waits for the next frame's bytes; `false` at the end of the body.
    fn next_piece(&mut self) -> io::Result<bool> {
        let next = neverblock::timeout(self.timeout, || neverblock::block_on(self.recv.data()));
        let data = match next {
            Ok(Ok(Some(Ok(data)))) => data,
            Ok(Ok(None)) => {
                self.ended = true;
                return Ok(false);
            }
            Ok(Ok(Some(Err(e)))) => return Err(self.fail(None, io::ErrorKind::ConnectionReset, e.to_string())),
            Ok(Err(_)) | Err(_) => {
                let why = format!("the request body stalled for {:?}", self.timeout);
                return Err(self.fail(Some(408), io::ErrorKind::TimedOut, why));
            }
        };
        // The window opens again as the bytes arrive: this body holds one frame at most.
        let _ = self.recv.flow_control().release_capacity(data.len());
        self.received += data.len() as u64;
        if self.received > self.limit {
            let why = format!("the request body is longer than {} bytes", self.limit);
            return Err(self.fail(Some(413), io::ErrorKind::InvalidData, why));
        }
        self.piece = data;
        Ok(true)
    }
}

impl Http2Body {
    /// Reads and drops what is left of the body, up to `limit` bytes, so that a client still
    /// sending it ends its request as it meant to (and errors in what it sends are answered as
    /// such) instead of having its stream reset. Past `limit`, a stall or a failure, h2 resets
    /// the stream with `NO_ERROR` once its handle is dropped (RFC 9113 §8.1: a complete response
    /// may come before the whole request).
    pub(super) fn drain(&mut self, limit: u64) {
        let mut drained = 0;
        while drained <= limit {
            match self.fill_buf() {
                Ok([]) | Err(_) => return,
                Ok(bytes) => {
                    let n = bytes.len();
                    self.consume(n);
                    drained += n as u64;
                }
            }
        }
    }
}

impl BodySource for Http2Body {
    fn is_finished(&self) -> bool {
        self.piece.is_empty() && (self.ended || self.recv.is_end_stream())
    }
}

impl Read for Http2Body {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        read_buffered(self, buf)
    }
}

impl BufRead for Http2Body {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if let Some((_, why)) = &self.failure {
            return Err(io::Error::other(why.clone()));
        }
        // An empty DATA frame is not the end: wait for the next.
        while self.piece.is_empty() && !self.is_finished() {
            if !self.next_piece()? {
                break;
            }
        }
        Ok(&self.piece)
    }

    fn consume(&mut self, n: usize) {
        self.piece.advance(n);
    }
}

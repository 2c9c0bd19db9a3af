//! An HTTP/1 request's body as the handler reads it: decoded from the connection's buffer by its
//! length or chunks, `100 Continue` sent with its first read when the client asked for it, and a
//! failure kept for the driver to answer with its status.

use std::io::{self, BufRead, Read};

use super::socket::Socket;
use crate::server::request::{read_buffered, BodySource};
use crate::wire::body::Decoder;
use crate::wire::{BufferedConn, WireError};

/// Where a request's body stands, kept by the connection (so it survives the handler).
#[derive(Debug)]
pub(super) struct BodyState {
    pub(super) decoder: Decoder,
    /// `100 Continue` is still to be sent, before the first read.
    pub(super) continue_due: bool,
    /// Why the body could not be read whole: the status to answer instead (`None`: no answer can
    /// reach the client) and what went wrong.
    pub(super) failure: Option<(Option<u16>, String)>,
}

impl BodyState {
    pub(super) fn new(decoder: Decoder, expect_continue: bool) -> BodyState {
        BodyState { decoder, continue_due: expect_continue, failure: None }
    }

    /// Records why reading failed, and the error a reader sees.
    fn fail(&mut self, e: WireError) -> io::Error {
        let (status, kind) = match &e {
            WireError::Malformed(_) => (Some(400), io::ErrorKind::InvalidData),
            WireError::TooLarge(_) => (Some(413), io::ErrorKind::InvalidData),
            WireError::Io(e) if e.kind() == io::ErrorKind::TimedOut => (Some(408), io::ErrorKind::TimedOut),
            WireError::Io(e) => (None, e.kind()),
            WireError::Truncated(_) | WireError::NoResponse(_) => (None, io::ErrorKind::UnexpectedEof),
        };
        let why = e.to_string();
        self.failure = Some((status, why.clone()));
        io::Error::new(kind, why)
    }
}

/// The body of the request being answered: its connection and where it stands.
pub(super) struct Http1Body<'a> {
    pub(super) conn: &'a mut BufferedConn<Socket>,
    pub(super) state: &'a mut BodyState,
}

impl BodySource for Http1Body<'_> {
    fn is_finished(&self) -> bool {
        self.state.decoder.is_done()
    }
}

impl Read for Http1Body<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        read_buffered(self, buf)
    }
}

impl BufRead for Http1Body<'_> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if let Some((_, why)) = &self.state.failure {
            return Err(io::Error::other(why.clone()));
        }
        if std::mem::take(&mut self.state.continue_due) {
            // Written with the next read of the socket, which the client's body answers.
            self.conn.get_ref().queue(b"HTTP/1.1 100 Continue\r\n\r\n");
        }
        match self.state.decoder.fill_buf(self.conn) {
            Ok(bytes) => Ok(bytes),
            Err(e) => Err(self.state.fail(e)),
        }
    }

    fn consume(&mut self, n: usize) {
        self.state.decoder.consume(self.conn, n);
    }
}

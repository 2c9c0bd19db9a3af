//! Body decoding for both roles: a message body as a stream of byte slices lent from the
//! connection's buffer, framed by a length, by chunks, or by the end of the connection.
//!
//! [`Decoder`] works like `BufRead`: [`fill_buf`](Decoder::fill_buf) lends the next decoded bytes
//! (reading more from the stream only when none are buffered), [`consume`](Decoder::consume) marks
//! some as used. The client collects them into a `Vec`; the server hands them to a handler's
//! `Read`. Either way no byte is copied twice and nothing past the body's end is taken from the
//! connection.

use std::io::Read;

use super::chunked::{chunk_size, read_line, read_trailers, MAX_CHUNK_LINE};
use super::{BufferedConn, Framing, Limits, WireError};

/// Where a body decoder is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// `Content-Length` framing, this many bytes in all.
    Length(u64),
    /// Before a chunk-size line.
    ChunkSize,
    /// Inside a chunk of `size` bytes, `left` of them not yet handed out.
    ChunkData { size: u64, left: u64 },
    /// After a chunk's data, before its CRLF.
    ChunkEnd,
    /// Until the stream ends.
    Close,
    /// The body has ended.
    Done,
}

/// Decodes one body, framed as its head said.
#[derive(Debug)]
pub(crate) struct Decoder {
    state: State,
    /// Decoded bytes handed out and consumed so far.
    read: u64,
    /// The limits on `read` ([`Limits::max_body`]) and on a trailer section ([`Limits::max_head`]).
    limits: Limits,
    /// Names the message in errors: `"request"` or `"response"`.
    side: &'static str,
}

impl Decoder {
    /// A decoder for a body framed by `framing`.
    ///
    /// # Errors
    ///
    /// [`WireError::TooLarge`] if `framing` is a length over the limit.
    pub(crate) fn new(framing: Framing, limits: &Limits, side: &'static str) -> Result<Decoder, WireError> {
        let state = match framing {
            Framing::None | Framing::Length(0) => State::Done,
            Framing::Length(n) if n > limits.max_body => return Err(too_large(side, limits.max_body)),
            Framing::Length(n) => State::Length(n),
            Framing::Chunked => State::ChunkSize,
            Framing::Close => State::Close,
        };
        Ok(Decoder { state, read: 0, limits: *limits, side })
    }

    /// Whether the whole body was decoded (its end framed and consumed). A body framed by its
    /// length is done as soon as its last byte is consumed; a chunked one once its last chunk and
    /// trailers have been read.
    pub(crate) fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// How many decoded bytes were consumed.
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    pub(crate) fn consumed(&self) -> u64 {
        self.read
    }

    /// The next decoded bytes, lent from the front of the connection's buffer (always a prefix of
    /// [`BufferedConn::buffered`]); empty once the body has ended. Reads from the stream only when
    /// no decoded byte is buffered.
    ///
    /// # Errors
    ///
    /// [`WireError::Truncated`] if the stream ends inside the body; [`WireError::Malformed`] for
    /// broken chunked framing; [`WireError::TooLarge`] past the limit; [`WireError::Io`] when the
    /// stream fails.
    pub(crate) fn fill_buf<'c, S: Read>(&mut self, conn: &'c mut BufferedConn<S>) -> Result<&'c [u8], WireError> {
        let side = self.side;
        loop {
            match self.state {
                State::Done => return Ok(&[]),
                State::Length(len) => {
                    // Never `read == len` here: `consume` ends the body at its last byte.
                    if !conn.has_buffered() && conn.fill()? == 0 {
                        let got = self.read;
                        return Err(WireError::Truncated(format!("{side} body cut short: got {got} of {len} bytes")));
                    }
                    return Ok(take(conn.buffered(), len - self.read));
                }
                State::ChunkSize => self.start_chunk(conn)?,
                State::ChunkData { left: 0, .. } => self.state = State::ChunkEnd,
                State::ChunkData { size, left } => {
                    if !conn.has_buffered() && conn.fill()? == 0 {
                        let got = size - left;
                        return Err(WireError::Truncated(format!(
                            "{side} body cut short in a chunk: got {got} of {size} bytes"
                        )));
                    }
                    return Ok(take(conn.buffered(), left));
                }
                State::ChunkEnd => {
                    while conn.buffered().len() < 2 {
                        if conn.fill()? == 0 {
                            return Err(WireError::Truncated(format!("{side} body cut short after a chunk")));
                        }
                    }
                    if !conn.buffered().starts_with(b"\r\n") {
                        return Err(WireError::Malformed(format!(
                            "malformed {side} body: chunk data not followed by CRLF"
                        )));
                    }
                    conn.consume(2);
                    self.state = State::ChunkSize;
                }
                State::Close => {
                    if !conn.has_buffered() && conn.fill()? == 0 {
                        self.state = State::Done;
                        continue;
                    }
                    if self.read + conn.buffered().len() as u64 > self.limits.max_body {
                        return Err(too_large(side, self.limits.max_body));
                    }
                    return Ok(conn.buffered());
                }
            }
        }
    }

    /// Marks `n` of the bytes [`fill_buf`](Decoder::fill_buf) lent as used.
    pub(crate) fn consume<S>(&mut self, conn: &mut BufferedConn<S>, n: usize) {
        conn.consume(n);
        self.read += n as u64;
        match &mut self.state {
            State::ChunkData { left, .. } => *left -= n as u64,
            State::Length(len) if *len == self.read => self.state = State::Done,
            _ => {}
        }
    }

    /// Reads a chunk-size line: the next chunk's data, or (size 0) the trailers and the end.
    fn start_chunk<S: Read>(&mut self, conn: &mut BufferedConn<S>) -> Result<(), WireError> {
        let side = self.side;
        let line = read_line(conn, MAX_CHUNK_LINE, side, "a chunk size line")?;
        let size = chunk_size(&conn.buffered()[..line - 2]).ok_or_else(|| {
            let text = String::from_utf8_lossy(&conn.buffered()[..(line - 2).min(32)]);
            WireError::Malformed(format!("malformed {side} body: invalid chunk size line {text:?}"))
        })?;
        conn.consume(line);
        if size == 0 {
            read_trailers(conn, &self.limits, side)?;
            self.state = State::Done;
        } else if size > self.limits.max_body - self.read {
            return Err(too_large(side, self.limits.max_body));
        } else {
            self.state = State::ChunkData { size, left: size };
        }
        Ok(())
    }
}

/// At most the first `left` bytes of `buf`.
fn take(buf: &[u8], left: u64) -> &[u8] {
    &buf[..usize::try_from(left).map_or(buf.len(), |left| left.min(buf.len()))]
}

fn too_large(side: &str, max: u64) -> WireError {
    WireError::TooLarge(format!("{side} body longer than the limit of {max} bytes"))
}

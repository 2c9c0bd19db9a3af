//! Writing messages, for both roles: which header fields may be written, the field and length
//! writers, and a body after its head, from memory or streamed from a reader (sized, chunked, or
//! until the connection closes).
//!
//! Whatever is written is first staged in one buffer after the head, so that a head and a short
//! body, or a head and a streamed body's first piece, go out in one write.

use std::io::{self, Read, Write};

use super::chunked::{is_token_char, size_line, LAST_CHUNK};
use super::every_byte;

/// The longest body in memory sent in one write with its head; a longer one is written after it,
/// not copied.
pub(crate) const COALESCE: usize = 64 * 1024;
/// The most read from a streamed body at a time: one piece, one write.
const PIECE: usize = 32 * 1024;
/// Room before a piece for the longest chunk-size line ([`size_line`]: 16 hex digits and CRLF).
const SIZE_LINE_ROOM: usize = 18;

/// Whether `name: value` may be written in a head: `name` a token, `value` free of control bytes
/// but horizontal tab (so no CR, LF or NUL can end the field or the head early and smuggle in
/// another).
pub(crate) fn is_valid_field(name: &str, value: &str) -> bool {
    is_token(name) && every_byte(value.as_bytes(), |b| b == b'\t' || (b >= 0x20 && b != 0x7f))
}

/// Whether `s` is a token (RFC 9110 §5.6.2): a method, a field name.
pub(crate) fn is_token(s: &str) -> bool {
    !s.is_empty() && every_byte(s.as_bytes(), is_token_char)
}

/// Appends one field, `name: value`.
#[inline]
pub(crate) fn write_field(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Appends `Content-Length: <n>`.
#[inline]
pub(crate) fn write_content_length(out: &mut Vec<u8>, n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut n = n;
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    write_field(out, "Content-Length", &digits[at..]);
}

/// Sends `bytes`, a body in memory, after the head in `staged`: a short one is staged after it,
/// to go out in the one write of whoever writes `staged` next; a long one is written now, after
/// the head.
///
/// # Errors
///
/// The write's error; `staged` is then empty.
pub(crate) fn send_bytes(out: &mut impl Write, staged: &mut Vec<u8>, bytes: &[u8]) -> io::Result<()> {
    if bytes.len() <= COALESCE {
        staged.extend_from_slice(bytes);
        return Ok(());
    }
    let written = write_staged(out, staged).and_then(|()| out.write_all(bytes));
    staged.clear();
    written
}

/// How a body streamed from a reader is framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Streamed {
    /// Exactly this many bytes, under `Content-Length`.
    Sized(u64),
    /// In chunks, one per read, then the last chunk.
    Chunked,
    /// As it comes, until the connection closes (an HTTP/1.0 response).
    UntilClose,
}

/// Why a streamed body did not go out whole, and how many of its bytes did.
#[derive(Debug)]
pub(crate) struct StreamError {
    pub(crate) sent: u64,
    pub(crate) cause: Cause,
}

/// Which side of a streamed body failed.
#[derive(Debug)]
pub(crate) enum Cause {
    /// The reader failed, or ended before its declared length.
    Read(io::Error),
    /// The connection did.
    Write(io::Error),
}

/// Sends the body `reader` yields, framed as `framing`, after the head in `staged`: each read of at
/// most 32 KiB goes out in one write, the first with the head. A chunked body's last chunk is left
/// in `staged`, for the caller to write with what follows. Returns how many body bytes were sent.
///
/// # Errors
///
/// [`StreamError`]: when the reader failed before anything was written, `staged` still holds the
/// head; after a write, it is empty.
pub(crate) fn send_streamed(
    out: &mut impl Write,
    staged: &mut Vec<u8>,
    reader: &mut dyn Read,
    framing: Streamed,
) -> Result<u64, StreamError> {
    let piece = match framing {
        Streamed::Sized(len) => PIECE.min(usize::try_from(len).unwrap_or(usize::MAX)),
        Streamed::Chunked | Streamed::UntilClose => PIECE,
    };
    // [room for a size line] [data] [CRLF], zeroed once for the whole body.
    let mut buf = vec![0u8; SIZE_LINE_ROOM + piece + 2];
    let mut sent = 0u64;
    loop {
        let want = match framing {
            Streamed::Sized(len) if sent == len => break,
            Streamed::Sized(len) => piece.min(usize::try_from(len - sent).unwrap_or(usize::MAX)),
            Streamed::Chunked | Streamed::UntilClose => piece,
        };
        let n = read_some(reader, &mut buf[SIZE_LINE_ROOM..SIZE_LINE_ROOM + want])
            .map_err(|e| StreamError { sent, cause: Cause::Read(e) })?;
        if n == 0 {
            if let Streamed::Sized(len) = framing {
                let why = format!("the body ended after {sent} of its {len} bytes");
                let error = io::Error::new(io::ErrorKind::UnexpectedEof, why);
                return Err(StreamError { sent, cause: Cause::Read(error) });
            }
            break;
        }
        let mut frame = SIZE_LINE_ROOM..SIZE_LINE_ROOM + n;
        if framing == Streamed::Chunked {
            frame.start = size_line(n, &mut buf[..SIZE_LINE_ROOM]);
            buf[frame.end..frame.end + 2].copy_from_slice(b"\r\n");
            frame.end += 2;
        }
        let written = if staged.is_empty() {
            out.write_all(&buf[frame])
        } else {
            staged.extend_from_slice(&buf[frame]);
            out.write_all(staged)
        };
        staged.clear();
        written.map_err(|e| StreamError { sent, cause: Cause::Write(e) })?;
        sent += n as u64;
    }
    if framing == Streamed::Chunked {
        staged.extend_from_slice(LAST_CHUNK);
    }
    Ok(sent)
}

/// Writes what `staged` holds, if anything.
fn write_staged(out: &mut impl Write, staged: &[u8]) -> io::Result<()> {
    if staged.is_empty() {
        return Ok(());
    }
    out.write_all(staged)
}

/// One read of a body's reader, retried when interrupted.
fn read_some(reader: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match reader.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            result => return result,
        }
    }
}

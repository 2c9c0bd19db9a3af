//! Reading a head, for both roles: the loop that reads until a whole head is buffered (or the
//! stream ends, fails, or runs past the limit), and the field slots the parser fills.

use std::io::{self, Read};
use std::mem::MaybeUninit;

use super::{is_disconnect, BufferedConn, MAX_HEADERS_CAP};

/// Header fields a head is parsed into on the stack; a head with more is parsed again into a heap
/// array of up to the limit. Every connection's fiber keeps the stack pages it ever touched, so a
/// large array here (probed page by page on entry) would cost each idle connection its pages.
pub(crate) const FIELDS_ON_STACK: usize = 32;

/// How reading a head ended without one.
#[derive(Debug)]
pub(crate) enum Unread<E> {
    /// The stream ended before any byte of it: at its end (`None`), or reset, aborted or broken
    /// (the error).
    Closed(Option<io::Error>),
    /// The stream ended after `got` bytes of it.
    CutShort { got: usize },
    /// Reading failed (a timeout, say) after `got` bytes of it.
    Failed { error: io::Error, got: usize },
    /// More than the limit arrived without the head ending.
    TooLong,
    /// The role's parser refused it.
    Refused(E),
}

/// Reads until `parse` finds a whole head in the buffered bytes, consumes it and returns what
/// `parse` made of it.
///
/// `parse` is called before each read and once after it with `ended` telling whether the bytes not
/// seen before hold a line end (only then can a head have ended); it returns the head's length and
/// value once complete, `None` while incomplete, or the role's refusal. It may consume bytes
/// itself (blank lines before a request line).
pub(crate) fn read_head<S: Read, T, E>(
    conn: &mut BufferedConn<S>,
    max_head: usize,
    mut parse: impl FnMut(&mut BufferedConn<S>, bool) -> Result<Option<(usize, T)>, E>,
) -> Result<T, Unread<E>> {
    // Bytes at the end of the buffer not yet looked at; a head can only have ended if they hold a LF.
    let mut new = conn.buffered().len();
    loop {
        let seen = conn.buffered().len().saturating_sub(new);
        // The usual read ends with its head, whose last byte is a LF: checked first, before a scan.
        let fresh = &conn.buffered()[seen.min(conn.buffered().len())..];
        let ended = fresh.last() == Some(&b'\n') || fresh.contains(&b'\n');
        match parse(conn, ended).map_err(Unread::Refused)? {
            Some((len, _)) if len > max_head => return Err(Unread::TooLong),
            Some((len, head)) => {
                conn.consume(len);
                return Ok(head);
            }
            None => {}
        }
        let got = conn.buffered().len();
        if got > max_head {
            return Err(Unread::TooLong);
        }
        new = match conn.fill() {
            Ok(0) if got == 0 => return Err(Unread::Closed(None)),
            Ok(0) => return Err(Unread::CutShort { got }),
            Ok(n) => n,
            Err(e) if got == 0 && is_disconnect(&e) => return Err(Unread::Closed(Some(e))),
            Err(error) => return Err(Unread::Failed { error, got }),
        };
    }
}

/// Runs `parse` with slots for at most `max_headers` fields (and [`MAX_HEADERS_CAP`]): on the
/// stack, or, for a head with more fields than fit there, on the heap.
pub(crate) fn with_field_slots<'b, T>(
    max_headers: usize,
    mut parse: impl FnMut(&mut [MaybeUninit<httparse::Header<'b>>]) -> Result<T, httparse::Error>,
) -> Result<T, httparse::Error> {
    let max = max_headers.min(MAX_HEADERS_CAP);
    // httparse writes each field before it is read, so the arrays need no initializing.
    let mut fields = [const { MaybeUninit::uninit() }; FIELDS_ON_STACK];
    match parse(&mut fields[..max.min(FIELDS_ON_STACK)]) {
        Err(httparse::Error::TooManyHeaders) if max > FIELDS_ON_STACK => {
            let mut fields: Vec<_> = (0..max).map(|_| MaybeUninit::uninit()).collect();
            parse(&mut fields)
        }
        parsed => parsed,
    }
}

//! The chunked transfer coding (RFC 9112 §7.1): chunk-size lines and trailer sections read
//! strictly, and the framing written around each chunk sent.
//!
//! A chunk-size line is hex digits, then optional extensions `;name[=value]` whose names and values
//! are tokens or quoted strings, with blanks only where RFC 9112 allows them (before `;` and
//! around `=`); the line ends in CRLF and holds no other CR or LF. Anything else is refused, not
//! guessed at: two parsers that read one line differently are how requests are smuggled.

use std::io::Read;

use super::{BufferedConn, Limits, WireError};

/// The longest chunk-size line accepted, extensions and CRLF included.
pub(crate) const MAX_CHUNK_LINE: usize = 4096;
/// The end of a chunked body with no trailer fields.
pub(crate) const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// Parses a chunk-size line without its CRLF: hex digits, then optional blanks and `;` extensions.
/// `None` if the line is not one.
pub(crate) fn chunk_size(line: &[u8]) -> Option<u64> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 || !extensions_are_valid(&line[digits..]) {
        return None;
    }
    let digits = &line[..digits];
    let significant = &digits[digits.iter().take_while(|&&d| d == b'0').count()..];
    if significant.len() > 16 {
        return None;
    }
    // Every byte is a hex digit, so the text is ASCII and fits in a u64.
    u64::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
}

/// Whether `rest`, what follows the size, is `*( BWS ";" BWS name [ BWS "=" BWS value ] )` then
/// optional blanks.
fn extensions_are_valid(mut rest: &[u8]) -> bool {
    loop {
        rest = skip_blanks(rest);
        let Some(after) = rest.strip_prefix(b";") else { return rest.is_empty() };
        let after = skip_blanks(after);
        let name = token_len(after);
        if name == 0 {
            return false;
        }
        rest = skip_blanks(&after[name..]);
        if let Some(value) = rest.strip_prefix(b"=") {
            let value = skip_blanks(value);
            let len = if value.first() == Some(&b'"') { quoted_len(value) } else { token_len(value) };
            if len == 0 {
                return false;
            }
            rest = &value[len..];
        }
    }
}

fn skip_blanks(s: &[u8]) -> &[u8] {
    &s[s.iter().take_while(|&&b| b == b' ' || b == b'\t').count()..]
}

/// How many bytes at the start of `s` are token characters (RFC 9110 §5.6.2).
pub(crate) fn token_len(s: &[u8]) -> usize {
    s.iter().take_while(|&&b| is_token_char(b)).count()
}

/// Whether `b` may appear in a token: one load from a table made at compile time (a field name is
/// checked byte by byte for every field a response gets).
pub(crate) fn is_token_char(b: u8) -> bool {
    TOKEN_CHARS[usize::from(b)]
}

/// RFC 9110 §5.6.2's `tchar`, by byte.
const TOKEN_CHARS: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = matches!(b as u8, b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z' | b'!' | b'#' | b'$' | b'%' | b'&'
            | b'\'' | b'*' | b'+' | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~');
        b += 1;
    }
    table
};

/// The length of the quoted string `s` starts with, quotes included; 0 if it does not end or holds
/// a byte a quoted string may not (RFC 9110 §5.6.4).
fn quoted_len(s: &[u8]) -> usize {
    let mut i = 1;
    while i < s.len() {
        match s[i] {
            b'"' => return i + 1,
            b'\\' if i + 1 < s.len() && is_quotable(s[i + 1]) => i += 2,
            b if is_qdtext(b) => i += 1,
            _ => return 0,
        }
    }
    0
}

fn is_qdtext(b: u8) -> bool {
    matches!(b, b'\t' | b' ' | 0x21 | 0x23..=0x5b | 0x5d..=0x7e | 0x80..=0xff)
}

fn is_quotable(b: u8) -> bool {
    matches!(b, b'\t' | b' ' | 0x21..=0x7e | 0x80..=0xff)
}

/// Reads until the buffer starts with a whole CRLF-terminated line of at most `max` bytes, and
/// returns its length, CRLF included; does not consume it. `what` names the line in errors.
pub(crate) fn read_line<S: Read>(
    conn: &mut BufferedConn<S>,
    max: usize,
    side: &str,
    what: &str,
) -> Result<usize, WireError> {
    let mut searched = 0;
    loop {
        let buf = conn.buffered();
        let lf = buf[searched..].iter().position(|&b| b == b'\n').map(|i| searched + i);
        if lf.map_or(buf.len(), |lf| lf + 1) > max {
            return Err(WireError::Malformed(format!("malformed {side} body: {what} longer than {max} bytes")));
        }
        if let Some(lf) = lf {
            if lf == 0 || buf[..lf - 1].contains(&b'\r') || buf[lf - 1] != b'\r' {
                return Err(WireError::Malformed(format!("malformed {side} body: bare CR or LF in {what}")));
            }
            return Ok(lf + 1);
        }
        searched = buf.len();
        if conn.fill()? == 0 {
            return Err(WireError::Truncated(format!("{side} body cut short in {what}")));
        }
    }
}

/// Reads and discards a trailer section, which may not be longer than a head; each field must look
/// like one (a token, a colon, a value without control bytes but tab), as in a head.
pub(crate) fn read_trailers<S: Read>(conn: &mut BufferedConn<S>, limits: &Limits, side: &str) -> Result<(), WireError> {
    let mut total = 0;
    loop {
        let line = read_line(conn, limits.max_head, side, "a trailer field")?;
        let field = &conn.buffered()[..line - 2];
        let name = token_len(field);
        let value_is_text = || field[name + 1..].iter().all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f));
        if line > 2 && (name == 0 || field.get(name) != Some(&b':') || !value_is_text()) {
            return Err(WireError::Malformed(format!("malformed {side} body: invalid trailer field")));
        }
        conn.consume(line);
        if line == 2 {
            return Ok(());
        }
        total += line;
        if total > limits.max_head {
            let max = limits.max_head;
            return Err(WireError::Malformed(format!(
                "malformed {side} body: trailer section longer than {max} bytes"
            )));
        }
    }
}

/// The size line of a chunk of `len` bytes (`len` in hex, CRLF), written into the end of `room`;
/// returns where it starts. `room` must hold at least 18 bytes.
pub(crate) fn size_line(len: usize, room: &mut [u8]) -> usize {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut at = room.len() - 2;
    room[at..].copy_from_slice(b"\r\n");
    let mut n = len;
    loop {
        at -= 1;
        room[at] = HEX[n & 0xf];
        n >>= 4;
        if n == 0 {
            return at;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_chars_are_rfc_9110s_tchar() {
        let tchar = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
        for b in 0..=255u8 {
            assert_eq!(is_token_char(b), tchar.as_bytes().contains(&b), "byte {b:#04x}");
        }
    }

    #[test]
    fn chunk_size_lines_are_read_strictly() {
        let cases: &[(&str, Option<u64>)] = &[
            ("5", Some(5)),
            ("00000A", Some(10)),
            ("ff ", Some(255)),
            ("5;name", Some(5)),
            ("5 ; name = value", Some(5)),
            ("5;a=\"q \\\" ;x\";b", Some(5)),
            ("ffffffffffffffff", Some(u64::MAX)),
            ("00000000000000000000001", Some(1)),
            ("10000000000000000", None),
            ("", None),
            ("x", None),
            ("+5", None),
            ("0x5", None),
            ("5 6", None),
            ("5;", None),
            ("5;=v", None),
            ("5;a=", None),
            ("5;a=\"open", None),
            ("5;a b", None),
            ("5;a=b c", None),
            ("5,6", None),
            ("5;a=\"\x01\"", None),
        ];
        for &(line, expected) in cases {
            assert_eq!(chunk_size(line.as_bytes()), expected, "{line:?}");
        }
    }

    #[test]
    fn size_lines_are_lowercase_hex_with_crlf() {
        for (len, expected) in [(0, "0\r\n"), (10, "a\r\n"), (0x4000, "4000\r\n"), (usize::MAX, "ffffffffffffffff\r\n")]
        {
            let mut room = [0u8; 18];
            let at = size_line(len, &mut room);
            assert_eq!(&room[at..], expected.as_bytes());
        }
    }
}

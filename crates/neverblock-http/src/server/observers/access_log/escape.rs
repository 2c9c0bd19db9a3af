//! Escaping a value for a log line as Apache's `ap_escape_logitem` does, so that no request can
//! forge a line or a field: `"` and `\` get a backslash, the C escapes `\b \n \r \t \v` stand for
//! those controls, and every other byte outside printable ASCII is `\xhh`.

/// Appends `bytes` to `out`, escaped.
pub(super) fn escape_into(bytes: &[u8], out: &mut Vec<u8>) {
    if !bytes.iter().any(|&b| needs_escape(b)) {
        out.extend_from_slice(bytes);
        return;
    }
    for &b in bytes {
        match b {
            b'"' | b'\\' => out.extend_from_slice(&[b'\\', b]),
            0x08 => out.extend_from_slice(b"\\b"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x0b => out.extend_from_slice(b"\\v"),
            _ if needs_escape(b) => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(&[b'\\', b'x', HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xf)]]);
            }
            _ => out.push(b),
        }
    }
}

/// Whether Apache escapes `b` in a log item: not printable ASCII, or a quote or backslash.
fn needs_escape(b: u8) -> bool {
    !(0x20..=0x7e).contains(&b) || b == b'"' || b == b'\\'
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(bytes: &[u8]) -> String {
        let mut out = Vec::new();
        escape_into(bytes, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn values_are_escaped_as_apache_escapes_log_items() {
        assert_eq!(escaped(b"GET /plain HTTP/1.1"), "GET /plain HTTP/1.1");
        assert_eq!(escaped(b"a\"b\\c"), "a\\\"b\\\\c");
        assert_eq!(escaped(b"\x08\n\r\t\x0b"), "\\b\\n\\r\\t\\v");
        assert_eq!(escaped(b"\x00\x01\x1f\x7f"), "\\x00\\x01\\x1f\\x7f");
        assert_eq!(escaped("caf\u{e9}".as_bytes()), "caf\\xc3\\xa9", "bytes past ASCII, in lower-case hex");
        assert_eq!(escaped(b"~ !"), "~ !");
    }
}

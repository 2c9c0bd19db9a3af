//! What a head's fields say about its message's body and its connection (RFC 9112 §6 and §9.3),
//! gathered in one pass for both roles; each role then judges them by its own section of the RFC.

use super::head::Head;
use super::{decimal, elements, is_named};

/// The framing and connection fields of one head.
#[derive(Debug)]
pub(crate) struct FramingFields<'a> {
    /// How many transfer codings `Transfer-Encoding` lists, in all its fields (empty elements
    /// skipped, RFC 9110 §5.6.1).
    pub(crate) codings: usize,
    /// Whether the last coding is `chunked`.
    pub(crate) chunked_last: bool,
    /// How many times `chunked` is listed.
    pub(crate) chunked: usize,
    /// The first coding other than `chunked`.
    pub(crate) other_coding: Option<&'a [u8]>,
    /// Whether a `Transfer-Encoding` field lists nothing.
    pub(crate) empty_coding_field: bool,
    /// The length every `Content-Length` element gives (`None`: no such field).
    pub(crate) length: Result<Option<u64>, LengthError>,
    /// Whether a `Connection` element is `close`, and whether one is `keep-alive`.
    pub(crate) close: bool,
    pub(crate) keep_alive: bool,
}

/// Why `Content-Length` gives no length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LengthError {
    /// An element is not a plain decimal number (its text).
    Invalid(String),
    /// Two elements disagree.
    Differ(u64, u64),
}

impl<'a> FramingFields<'a> {
    /// Reads the framing and connection fields of `head`, and hands every other field to `other`.
    pub(crate) fn of(head: &'a Head, mut other: impl FnMut(&'a [u8], &'a [u8])) -> FramingFields<'a> {
        let mut fields = FramingFields {
            codings: 0,
            chunked_last: false,
            chunked: 0,
            other_coding: None,
            empty_coding_field: false,
            length: Ok(None),
            close: false,
            keep_alive: false,
        };
        for (name, value) in head.raw_fields() {
            if is_named(name, b"transfer-encoding") {
                fields.add_codings(value);
            } else if is_named(name, b"content-length") {
                elements(value).for_each(|element| fields.add_length(element));
            } else if is_named(name, b"connection") {
                for element in elements(value) {
                    fields.close |= element.eq_ignore_ascii_case(b"close");
                    fields.keep_alive |= element.eq_ignore_ascii_case(b"keep-alive");
                }
            } else {
                other(name, value);
            }
        }
        fields
    }

    /// Takes in one `Transfer-Encoding` field.
    fn add_codings(&mut self, value: &'a [u8]) {
        let before = self.codings;
        for coding in elements(value).filter(|c| !c.is_empty()) {
            let chunked = coding.eq_ignore_ascii_case(b"chunked");
            if !chunked {
                self.other_coding.get_or_insert(coding);
            }
            self.chunked += usize::from(chunked);
            self.chunked_last = chunked;
            self.codings += 1;
        }
        self.empty_coding_field |= self.codings == before;
    }

    /// Takes in one `Content-Length` element: a number, the same as any before it.
    fn add_length(&mut self, element: &[u8]) {
        let Ok(length) = self.length else { return };
        self.length = match (decimal(element), length) {
            (None, _) => Err(LengthError::Invalid(String::from_utf8_lossy(element).into_owned())),
            (Some(n), Some(first)) if n != first => Err(LengthError::Differ(first, n)),
            (n, _) => Ok(n),
        };
    }

    /// Whether the sender lets the connection stay open after this message (RFC 9112 §9.3):
    /// never when a `Connection` element is `close`, whatever else it lists; otherwise by default
    /// in HTTP/1.1, and in HTTP/1.0 only when it asks (`keep-alive`).
    pub(crate) fn keeps_open(&self, minor_version: u8) -> bool {
        !self.close && (minor_version == 1 || self.keep_alive)
    }
}

/// Whether `value`, a comma-separated field value, lists `token` (in any case).
pub(crate) fn lists(value: &[u8], token: &[u8]) -> bool {
    elements(value).any(|element| element.eq_ignore_ascii_case(token))
}

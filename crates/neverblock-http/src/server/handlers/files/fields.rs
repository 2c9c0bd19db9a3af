//! The request fields the static handler reads, found in one pass over the head: a field read as
//! `Request::header` reads it (the first line of that name, if it is text), a list field
//! (RFC 9110 §5.3) as all its lines joined with commas.

use std::borrow::Cow;

use crate::server::Request;

/// The fields of a request that decide its file's answer.
#[derive(Debug, Default)]
pub(super) struct Fields<'r> {
    pub(super) accept_encoding: List<'r>,
    pub(super) if_match: List<'r>,
    pub(super) if_none_match: List<'r>,
    pub(super) if_unmodified_since: Single<'r>,
    pub(super) if_modified_since: Single<'r>,
    pub(super) if_range: Single<'r>,
    pub(super) range: Single<'r>,
}

impl<'r> Fields<'r> {
    /// The fields of `request`, each line looked at once.
    pub(super) fn of(request: &'r Request<'_>) -> Fields<'r> {
        let mut fields = Fields::default();
        for (name, value) in request.headers() {
            let is = |wanted: &str| name.eq_ignore_ascii_case(wanted);
            // By length first: most lines are none of these, and that says so in one compare.
            match name.len() {
                5 if is("range") => fields.range.add(value),
                8 if is("if-match") => fields.if_match.add(value),
                8 if is("if-range") => fields.if_range.add(value),
                13 if is("if-none-match") => fields.if_none_match.add(value),
                15 if is("accept-encoding") => fields.accept_encoding.add(value),
                17 if is("if-modified-since") => fields.if_modified_since.add(value),
                19 if is("if-unmodified-since") => fields.if_unmodified_since.add(value),
                _ => {}
            }
        }
        fields
    }
}

/// A field of one value: its first line's, if that is text.
#[derive(Debug, Default)]
pub(super) struct Single<'r> {
    value: Option<Result<&'r str, ()>>,
}

impl<'r> Single<'r> {
    fn add(&mut self, line: &'r [u8]) {
        if self.value.is_none() {
            self.value = Some(std::str::from_utf8(line).map_err(drop));
        }
    }

    pub(super) fn get(&self) -> Option<&'r str> {
        self.value.and_then(Result::ok)
    }
}

/// A list field: its lines joined with `, `; none if any line is not text.
#[derive(Debug, Default)]
pub(super) struct List<'r> {
    value: Option<Option<Cow<'r, str>>>,
}

impl<'r> List<'r> {
    fn add(&mut self, line: &'r [u8]) {
        let line = std::str::from_utf8(line).ok();
        self.value = Some(match (self.value.take(), line) {
            (None, line) => line.map(Cow::Borrowed),
            (Some(Some(joined)), Some(line)) => Some(Cow::Owned(format!("{joined}, {line}"))),
            (Some(_), _) => None,
        });
    }

    pub(super) fn get(&self) -> Option<&str> {
        self.value.as_ref()?.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_field_is_its_first_line_and_a_list_all_of_them() {
        let mut single = Single::default();
        assert_eq!(single.get(), None);
        single.add(b"bytes=0-1");
        single.add(b"bytes=5-");
        assert_eq!(single.get(), Some("bytes=0-1"));
        let mut not_text = Single::default();
        not_text.add(b"\xff");
        not_text.add(b"bytes=5-");
        assert_eq!(not_text.get(), None, "the first line decides, as Request::header");

        let mut list = List::default();
        assert_eq!(list.get(), None);
        list.add(b"\"a\"");
        assert!(matches!(list.value, Some(Some(Cow::Borrowed("\"a\"")))), "one line: no copy");
        list.add(b"\"b\"");
        assert_eq!(list.get(), Some("\"a\", \"b\""));
        list.add(b"\xff");
        list.add(b"\"c\"");
        assert_eq!(list.get(), None, "a line that is not text spoils the list");
    }
}

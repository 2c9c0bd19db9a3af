//! A message head as received: one copy of its bytes, one of its text (the start line's parts and
//! the field names, which the parser gave as text), and where each part lies in them (three
//! allocations however many fields, reused from one request to the next on a server connection).
//! The text is kept apart so that reading a method, a target or a name needs no UTF-8 check.

use std::fmt;
use std::ops::Range;

/// A head's bytes and the places of its parts.
#[derive(Clone, Default)]
pub(crate) struct Head {
    /// The head as read, start line to final CRLF.
    bytes: Vec<u8>,
    /// The method and target (a request's) or reason phrase (a response's), then every field's
    /// name: the parts the parser checked are text.
    text: String,
    /// A request's method and target; a response's reason phrase and nothing (in `text`).
    line: [Span; 2],
    /// Whether this is a request's head (for `Debug`).
    request: bool,
    fields: Vec<Field>,
}

/// Where one part lies in [`Head::bytes`] or [`Head::text`].
#[derive(Clone, Copy, Debug, Default)]
struct Span {
    start: u32,
    end: u32,
}

/// Where one field's name (in the text) and value (in the bytes) lie.
#[derive(Clone, Copy, Debug)]
struct Field {
    name: Span,
    value: Span,
}

impl Head {
    /// Copies the head that `parsed` was parsed from: `bytes`, which its reason phrase
    /// and fields borrow. A value folded over several lines (obs-fold, which httparse accepts in
    /// responses when asked) has each fold, the line break and the blanks after it, replaced by
    /// as many spaces (RFC 9112 §5.2), so no value holds a CR or LF.
    #[cfg(feature = "client")]
    pub(crate) fn of_response(bytes: &[u8], parsed: &httparse::Response<'_, '_>) -> Head {
        // A client's head starts empty: room for its text at once, rather than grown a few times
        // (the field list and the bytes are extended from slices, reserved whole already).
        let reason = parsed.reason.unwrap_or_default();
        let names: usize = parsed.headers.iter().map(|h| h.name.len()).sum();
        let mut head = Head { text: String::with_capacity(reason.len() + names), ..Head::default() };
        head.fill(bytes, [reason, ""], parsed.headers);
        for field in &head.fields {
            let value = &mut head.bytes[field.value.range()];
            // Every fold has a line feed (httparse takes no CR without one); the usual value has
            // none, which a search a word at a time finds.
            if !value.contains(&b'\n') {
                continue;
            }
            let mut in_fold = false;
            for b in value {
                match *b {
                    b'\r' | b'\n' => in_fold = true,
                    b' ' | b'\t' if in_fold => {}
                    _ => {
                        in_fold = false;
                        continue;
                    }
                }
                *b = b' ';
            }
        }
        head
    }

    /// Makes this the head that `parsed` was parsed from, `bytes`, keeping the allocations.
    #[cfg(feature = "server")]
    pub(crate) fn set_request(&mut self, bytes: &[u8], parsed: &httparse::Request<'_, '_>) {
        self.fill(bytes, [parsed.method.unwrap_or_default(), parsed.path.unwrap_or_default()], parsed.headers);
        self.request = true;
    }

    /// A request head given by its parts instead of read (an HTTP/2 stream's method, target and
    /// fields), laid out as `METHOD TARGET PROTOCOL` and a line a field, so its request line and
    /// fields read as a received head's do.
    #[cfg(feature = "server")]
    pub(crate) fn of_request<'f>(
        method: &str,
        target: &str,
        protocol: &str,
        fields: impl IntoIterator<Item = (&'f str, &'f [u8])>,
    ) -> Head {
        let mut head = Head { request: true, ..Head::default() };
        head.bytes.extend_from_slice(method.as_bytes());
        head.bytes.push(b' ');
        head.bytes.extend_from_slice(target.as_bytes());
        head.bytes.push(b' ');
        head.bytes.extend_from_slice(protocol.as_bytes());
        head.bytes.extend_from_slice(b"\r\n");
        head.line = [Span::push(&mut head.text, method), Span::push(&mut head.text, target)];
        for (name, value) in fields {
            head.bytes.extend_from_slice(name.as_bytes());
            head.bytes.extend_from_slice(b": ");
            let value = Span::push_bytes(&mut head.bytes, value);
            head.bytes.extend_from_slice(b"\r\n");
            head.fields.push(Field { name: Span::push(&mut head.text, name), value });
        }
        head.bytes.extend_from_slice(b"\r\n");
        head
    }

    fn fill(&mut self, bytes: &[u8], line: [&str; 2], headers: &[httparse::Header<'_>]) {
        self.bytes.clear();
        self.bytes.extend_from_slice(bytes);
        self.text.clear();
        self.line = line.map(|part| Span::push(&mut self.text, part));
        self.request = false;
        self.fields.clear();
        let text = &mut self.text;
        self.fields
            .extend(headers.iter().map(|h| Field { name: Span::push(text, h.name), value: Span::of(bytes, h.value) }));
    }

    /// The reason phrase of a response; empty if absent (or not text: httparse gives obs-text as empty).
    #[cfg(feature = "client")]
    pub(crate) fn reason(&self) -> &str {
        self.text(self.line[0])
    }

    /// The method of a request.
    #[cfg(feature = "server")]
    pub(crate) fn method(&self) -> &str {
        self.text(self.line[0])
    }

    /// The target of a request, as sent.
    #[cfg(feature = "server")]
    pub(crate) fn target(&self) -> &str {
        self.text(self.line[1])
    }

    /// The start line as received, without its line end.
    #[cfg(feature = "server")]
    pub(crate) fn request_line(&self) -> &[u8] {
        let end = self.bytes.iter().position(|&b| b == b'\n').unwrap_or(self.bytes.len());
        self.bytes[..end].strip_suffix(b"\r").unwrap_or(&self.bytes[..end])
    }

    /// Every field, in the order received: names as received, values without surrounding blanks.
    pub(crate) fn fields(&self) -> impl Iterator<Item = (&str, &[u8])> + Clone {
        self.fields.iter().map(|f| (self.text(f.name), self.part(f.value)))
    }

    /// Every field as bytes (no UTF-8 check of the names).
    pub(crate) fn raw_fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.fields.iter().map(|f| (self.text(f.name).as_bytes(), self.part(f.value)))
    }

    /// The value of the first field called `name` (any case).
    pub(crate) fn get(&self, name: &str) -> Option<&[u8]> {
        self.raw_fields().find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes())).map(|(_, v)| v)
    }

    fn part(&self, span: Span) -> &[u8] {
        &self.bytes[span.range()]
    }

    /// A part the parser gave as text (a method, target, reason phrase, field name).
    fn text(&self, span: Span) -> &str {
        &self.text[span.range()]
    }
}

impl Span {
    /// Where `part`, a slice of `whole` (or empty), lies in it.
    fn of(whole: &[u8], part: &[u8]) -> Span {
        if part.is_empty() {
            // An empty part may point anywhere (httparse gives "" for an obs-text reason).
            return Span { start: 0, end: 0 };
        }
        let start = (part.as_ptr() as usize).wrapping_sub(whole.as_ptr() as usize);
        assert!(start <= whole.len() && part.len() <= whole.len() - start, "a part outside its head");
        Span::between(start, start + part.len())
    }

    /// Appends `part` to `text`; where it lies there.
    fn push(text: &mut String, part: &str) -> Span {
        let start = text.len();
        text.push_str(part);
        Span::between(start, text.len())
    }

    /// Appends `part` to `bytes`; where it lies there.
    fn push_bytes(bytes: &mut Vec<u8>, part: &[u8]) -> Span {
        let start = bytes.len();
        bytes.extend_from_slice(part);
        Span::between(start, bytes.len())
    }

    fn between(start: usize, end: usize) -> Span {
        // A head is bounded by the reader's or the driver's limit, far below 4 GiB.
        let at = |offset: usize| u32::try_from(offset).expect("a head shorter than 4 GiB");
        Span { start: at(start), end: at(end) }
    }

    fn range(self) -> Range<usize> {
        self.start as usize..self.end as usize
    }
}

impl fmt::Debug for Head {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("Head");
        if self.request {
            s.field("method", &self.text(self.line[0])).field("target", &self.text(self.line[1]));
        } else {
            s.field("reason", &self.text(self.line[0]));
        }
        s.field("fields", &Fields(self)).finish()
    }
}

/// A head's fields shown as a map, in order, values as text.
struct Fields<'a>(&'a Head);

impl fmt::Debug for Fields<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.0.fields().map(|(name, value)| (name, String::from_utf8_lossy(value)))).finish()
    }
}

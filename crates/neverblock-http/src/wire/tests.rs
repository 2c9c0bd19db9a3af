//! Framing of responses and requests, whichever way the stream cuts its reads, and the request writer.

use std::fmt;
use std::io::{self, ErrorKind, Read, Write};

use url::Url;

use super::body::Decoder;
use super::client::*;
use super::head::Head;
use super::*;
use crate::wire::write::COALESCE;

/// A request head's fields when it has none.
const NO_FIELDS: &[(String, String)] = &[];

/// A response read whole, as the client reads one: its head, then its body through a [`Decoder`].
#[derive(Debug)]
struct ReceivedResponse {
    status: u16,
    version: u8,
    head: Head,
    body: Vec<u8>,
    reusable: bool,
}

/// Reads one response whole: [`read_response_head`], then the body it frames.
fn read_response<S: Read>(
    conn: &mut BufferedConn<S>,
    request_was_head: bool,
    limits: &Limits,
) -> Result<ReceivedResponse, WireError> {
    let res = read_response_head(conn, request_was_head, limits)?;
    let mut decoder = Decoder::new(res.framing, limits, "response")?;
    let mut body = Vec::new();
    loop {
        let bytes = decoder.fill_buf(conn)?;
        if bytes.is_empty() {
            break;
        }
        body.extend_from_slice(bytes);
        let n = bytes.len();
        decoder.consume(conn, n);
    }
    let reusable = res.reusable_after_body();
    Ok(ReceivedResponse { status: res.status, version: res.version, head: res.head, body, reusable })
}

/// How a [`Script`] cuts its bytes into reads.
#[derive(Clone, Copy, Debug)]
enum Cut {
    /// As many bytes as the reader asks for.
    Whole,
    /// One byte per read.
    Bytes,
    /// Pieces of 1..=97 bytes, with an `Interrupted` now and then, from an LCG with this state.
    Random(u64),
}

/// Every way the tests cut a stream.
const CUTS: [Cut; 3] = [Cut::Whole, Cut::Bytes, Cut::Random(0x5eed)];

/// An in-memory stream: `data` in reads cut by `cut`, then EOF, or the error `end`.
#[derive(Debug)]
struct Script {
    /// Everything the stream will deliver.
    data: Vec<u8>,
    /// How much of `data` was read.
    pos: usize,
    /// How reads are cut.
    cut: Cut,
    /// What reading past `data` returns: an error of this kind, or EOF.
    end: Option<ErrorKind>,
}

impl Read for Script {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.data.len() - self.pos;
        if left == 0 {
            return self.end.map_or(Ok(0), |kind| Err(kind.into()));
        }
        let n = match &mut self.cut {
            Cut::Whole => left,
            Cut::Bytes => 1,
            Cut::Random(state) => {
                *state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                let n = (*state >> 33) as usize % 98;
                if n == 0 {
                    return Err(ErrorKind::Interrupted.into());
                }
                n
            }
        };
        let n = n.min(left).min(buf.len());
        buf[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// Runs `read` over `input` cut each way in [`CUTS`], asserts that every cut gives the same
/// result, and returns it.
fn run<T: fmt::Debug>(input: &[u8], end: Option<ErrorKind>, read: impl Fn(&mut BufferedConn<Script>) -> T) -> T {
    let mut first: Option<(T, String)> = None;
    for cut in CUTS {
        let out = read(&mut BufferedConn::new(Script { data: input.to_vec(), pos: 0, cut, end }));
        let text = format!("{out:?}");
        match &first {
            None => first = Some((out, text)),
            Some((_, first_text)) => assert_eq!(&text, first_text, "cut {cut:?} disagrees on {input:?}"),
        }
    }
    first.expect("CUTS is not empty").0
}

/// How many bytes of its stream `conn` has not consumed.
fn unconsumed(conn: &BufferedConn<Script>) -> usize {
    conn.buffered().len() + conn.get_ref().data.len() - conn.get_ref().pos
}

/// Reads up to `count` responses from `input`, stopping at the first error; returns them and, if
/// none failed, how many bytes were left unconsumed (after an error that depends on the cuts).
fn responses(
    input: impl AsRef<[u8]>,
    end: Option<ErrorKind>,
    head: bool,
    limits: Limits,
    count: usize,
) -> (Vec<Result<ReceivedResponse, WireError>>, Option<usize>) {
    run(input.as_ref(), end, |conn| {
        let mut out = Vec::new();
        while out.len() < count && !matches!(out.last(), Some(Err(_))) {
            out.push(read_response(conn, head, &limits));
        }
        let left = out.iter().all(Result::is_ok).then(|| unconsumed(conn));
        (out, left)
    })
}

/// The one response to a GET that is all of `input`.
fn response(input: &str) -> ReceivedResponse {
    let (mut out, left) = responses(input, None, false, Limits::default(), 1);
    assert_eq!(left, Some(0), "{input:?} was not consumed whole");
    out.pop().unwrap().unwrap()
}

/// An error as `Variant: message`.
fn describe(e: &WireError) -> String {
    let debug = format!("{e:?}");
    format!("{}: {e}", debug.split('(').next().unwrap_or_default())
}

/// Asserts that reading one response to a GET from each input ends in the error described.
fn check_errors(end: Option<ErrorKind>, limits: Limits, cases: &[(&str, &str)]) {
    for &(input, expected) in cases {
        let (mut out, _) = responses(input, end, false, limits, 1);
        let got = out.pop().unwrap().map(|res| res.status).map_err(|e| describe(&e));
        assert_eq!(got, Err(expected.to_owned()), "for {input:?}");
    }
}

/// The body of `len` bytes the large-message tests send.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

#[test]
fn content_length_body_is_read_exactly() {
    let res = response("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello");
    assert_eq!((res.status, res.head.reason(), res.version), (200, "OK", 1));
    assert_eq!(res.head.fields().collect::<Vec<_>>(), [("Content-Type", &b"text/plain"[..]), ("Content-Length", b"5")]);
    assert_eq!(res.head.get("content-type"), Some(&b"text/plain"[..]));
    assert_eq!(res.head.get("location"), None);
    assert_eq!(res.body, b"hello");
    assert!(res.reusable);
    assert_eq!(response("HTTP/1.1 200 OK\r\nContent-Length: 3, 3\r\n\r\nabc").body, b"abc");
}

#[test]
fn a_head_keeps_names_as_received_and_values_without_surrounding_blanks() {
    let res = response("HTTP/1.1 404 \r\nX-A: \t spaced  value \t\r\nx-empty:\r\nContent-Length: 0\n\n");
    assert_eq!((res.status, res.head.reason()), (404, ""));
    let fields: Vec<_> = res.head.fields().collect();
    assert_eq!(fields, [("X-A", &b"spaced  value"[..]), ("x-empty", b""), ("Content-Length", b"0")]);
    let res = response("HTTP/1.0 200 Gr\u{fc}\u{df}e\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(res.head.reason(), "", "httparse gives a reason with obs-text as empty");
    assert_eq!(format!("{:?}", res.head), r#"Head { reason: "", fields: {"Content-Length": "0"} }"#);
}

#[test]
fn chunked_body_drops_extensions_and_trailers() {
    let input = "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: Chunked\r\n\r\n\
                 5;name=\"v\"\r\nhello\r\n6 ;x\r\n world\r\nA\r\n, chunked!\r\n0\r\nX-Sum: 1\r\nY: 2\r\n\r\n\
                 HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
    let (out, left) = responses(input, None, false, Limits::default(), 2);
    let [first, second] = <[_; 2]>::try_from(out).unwrap().map(Result::unwrap);
    assert_eq!(first.body, b"hello world, chunked!");
    assert!(first.reusable);
    assert_eq!((second.body.len(), second.reusable, left), (0, true, Some(0)));
}

#[test]
fn unframed_body_runs_to_eof_and_ends_the_connection() {
    let res = response("HTTP/1.1 200 OK\r\n\r\nall of\r\n\r\nit");
    assert_eq!((res.body.as_slice(), res.reusable), (&b"all of\r\n\r\nit"[..], false));
    let res = response("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\nContent-Length: 2\r\n\r\n3\r\nabc");
    assert_eq!((res.body.as_slice(), res.reusable), (&b"3\r\nabc"[..], false));
}

#[test]
fn head_response_has_no_body_and_leaves_the_next_response_buffered() {
    let input = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    let (out, left) = responses(input, None, true, Limits::default(), 2);
    for res in out {
        let res = res.unwrap();
        assert_eq!((res.status, res.body.len(), res.reusable), (200, 0, true));
    }
    assert_eq!(left, Some(0));
    let mut conn = BufferedConn::new(Script { data: input.into(), pos: 0, cut: Cut::Whole, end: None });
    read_response(&mut conn, true, &Limits::default()).unwrap();
    assert!(conn.has_buffered());
    read_response(&mut conn, true, &Limits::default()).unwrap();
    assert!(!conn.has_buffered());
}

#[test]
fn no_body_follows_204_or_304() {
    let input = "HTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\n\
                 HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n\
                 HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    let (out, left) = responses(input, None, false, Limits::default(), 3);
    let got: Vec<_> = out.into_iter().map(|r| r.map(|r| (r.status, r.body, r.reusable)).unwrap()).collect();
    assert_eq!(got, [(204, vec![], true), (304, vec![], true), (200, b"ok".to_vec(), true)]);
    assert_eq!(left, Some(0));
}

#[test]
fn interim_responses_are_skipped() {
    let res = response(
        "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n\
         HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok",
    );
    assert_eq!((res.status, res.body.as_slice(), res.reusable), (201, &b"ok"[..], true));
    assert_eq!(res.head.get("link"), None);
}

#[test]
fn switching_protocols_is_final_and_not_reusable() {
    let input = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nContent-Length: 3\r\n\r\nraw";
    let (mut out, left) = responses(input, None, false, Limits::default(), 1);
    let res = out.pop().unwrap().unwrap();
    assert_eq!((res.status, res.body.len(), res.reusable), (101, 0, false));
    assert_eq!(left, Some(3), "the new protocol's bytes stay unread");
}

#[test]
fn back_to_back_responses_share_one_conn() {
    let mut input = b"HTTP/1.1 200 OK\r\nContent-Length: 200000\r\n\r\n".to_vec();
    input.extend(pattern(200_000));
    input.extend(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n186a0\r\n");
    input.extend(pattern(100_000));
    input.extend(b"\r\n0\r\n\r\nHTTP/1.1 200 OK\r\nX-Long: ");
    input.extend(vec![b'a'; 100_000]);
    input.extend(b"\r\nContent-Length: 4\r\n\r\nlast");
    let limits = Limits { max_head: 128 * 1024, ..Limits::default() };
    let (out, left) = responses(input, None, false, limits, 3);
    let bodies: Vec<_> = out.into_iter().map(|r| r.map(|r| (r.body, r.reusable)).unwrap()).collect();
    assert_eq!(bodies, [(pattern(200_000), true), (pattern(100_000), true), (b"last".to_vec(), true)]);
    assert_eq!(left, Some(0));
}

#[test]
fn closing_before_any_byte_is_no_response_and_says_how() {
    check_errors(
        None,
        Limits::default(),
        &[("", "NoResponse: connection closed before any byte of the response arrived")],
    );
    for end in
        [ErrorKind::ConnectionReset, ErrorKind::ConnectionAborted, ErrorKind::BrokenPipe, ErrorKind::UnexpectedEof]
    {
        let (mut out, _) = responses("", Some(end), false, Limits::default(), 1);
        match out.pop() {
            Some(Err(WireError::NoResponse(Some(e)))) => assert_eq!(e.kind(), end),
            other => panic!("{other:?} for {end:?}"),
        }
    }
}

#[test]
fn closing_after_some_bytes_is_not_no_response() {
    check_errors(
        Some(ErrorKind::ConnectionReset),
        Limits::default(),
        &[("HTTP/1.1 200 OK\r\n", "Io: I/O error: connection reset")],
    );
    check_errors(
        None,
        Limits::default(),
        &[("HTTP/1.1 100 Continue\r\n\r\n", "Truncated: response head cut short after 0 bytes")],
    );
}

#[test]
fn truncated_messages_say_what_was_cut_short() {
    let chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    check_errors(
        None,
        Limits::default(),
        &[
            ("HTTP/1.1 200 OK\r\nContent-", "Truncated: response head cut short after 25 bytes"),
            (&format!("{chunked}10\r\nabc"), "Truncated: response body cut short in a chunk: got 3 of 16 bytes"),
            (&format!("{chunked}3\r\nabc\r"), "Truncated: response body cut short after a chunk"),
            (&format!("{chunked}3\r\nabc\r\n1"), "Truncated: response body cut short in a chunk size line"),
            (&format!("{chunked}0\r\nX: 1\r\n"), "Truncated: response body cut short in a trailer field"),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n0123456789",
                "Truncated: response body cut short: got 10 of 20 bytes",
            ),
        ],
    );
}

#[test]
fn malformed_messages_are_rejected() {
    let chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    let many = format!("HTTP/1.1 200 OK\r\n{}\r\n", "X: y\r\n".repeat(101));
    check_errors(
        None,
        Limits::default(),
        &[
            ("HTTP/1.1 2x0 OK\r\n\r\n", "Malformed: malformed response head: invalid response status"),
            ("SSH-2.0-OpenSSH\r\n\r\n", "Malformed: malformed response head: invalid HTTP version"),
            ("HTTP/1.1 099 Odd\r\n\r\n", "Malformed: malformed response head: status code 99"),
            (&many, "Malformed: malformed response head: too many headers"),
            (&format!("{chunked}zz\r\n"), "Malformed: malformed response body: invalid chunk size line \"zz\""),
            (&format!("{chunked}\r\n"), "Malformed: malformed response body: invalid chunk size line \"\""),
            (&format!("{chunked}3\n"), "Malformed: malformed response body: bare CR or LF in a chunk size line"),
            (&format!("{chunked}3;a\rb\r\n"), "Malformed: malformed response body: bare CR or LF in a chunk size line"),
            (
                &format!("{chunked}1{}\r\n", "0".repeat(5000)),
                "Malformed: malformed response body: a chunk size line longer than 4096 bytes",
            ),
            (&format!("{chunked}3\r\nabcd\r\n"), "Malformed: malformed response body: chunk data not followed by CRLF"),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
                "Malformed: malformed response head: Content-Length 5 and 6",
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n",
                "Malformed: malformed response head: Content-Length 5 and 6",
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n",
                "Malformed: malformed response head: invalid Content-Length \"+5\"",
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
                "Malformed: malformed response head: invalid Content-Length \"99999999999999999999\"",
            ),
        ],
    );
}

#[test]
fn limits_bound_heads_and_bodies() {
    let limits = Limits { max_head: 50, max_body: 4, ..Limits::default() };
    check_errors(
        None,
        limits,
        &[
            ("HTTP/1.1 200 OK\r\nX-Padding: 0123456789012345678901234\r\n\r\n", "Malformed: malformed response head: longer than 50 bytes"),
            ("HTTP/1.1 200 OK\r\nX-Padding: 0123456789012345678901234", "Malformed: malformed response head: longer than 50 bytes"),
            ("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", "TooLarge: response body longer than the limit of 4 bytes"),
            ("HTTP/1.1 200 OK\r\n\r\nhello", "TooLarge: response body longer than the limit of 4 bytes"),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n",
                "TooLarge: response body longer than the limit of 4 bytes",
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nW: 0123456789\r\nX: 0123456789\r\nY: 0123456789\r\nZ: 0123456789\r\n\r\n",
                "Malformed: malformed response body: trailer section longer than 50 bytes",
            ),
        ],
    );
    for input in ["HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nhell", "HTTP/1.1 200 OK\r\n\r\nhell"] {
        let (mut out, _) = responses(input, None, false, limits, 1);
        assert_eq!(out.pop().unwrap().unwrap().body, b"hell");
    }
}

#[test]
fn connection_is_reusable_only_if_persistent_and_framed() {
    let cases = [
        ("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", true),
        ("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", false),
        ("HTTP/1.1 200 OK\r\nConnection: Upgrade, CLOSE\r\nContent-Length: 0\r\n\r\n", false),
        ("HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nconnection: close\r\nContent-Length: 0\r\n\r\n", false),
        ("HTTP/1.1 200 OK\r\nConnection: closed\r\nContent-Length: 0\r\n\r\n", true),
        ("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", false),
        ("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n", true),
        ("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\nbody", false),
        ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n", false),
        ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", true),
        // RFC 9112 §9.3: `close` wins, in one list or over several fields, in HTTP/1.0 as in 1.1.
        ("HTTP/1.0 200 OK\r\nConnection: keep-alive, close\r\nContent-Length: 0\r\n\r\n", false),
        ("HTTP/1.0 200 OK\r\nConnection: close, keep-alive\r\nContent-Length: 0\r\n\r\n", false),
        ("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", false),
        // RFC 9112 §6.1: HTTP/1.0 has no Transfer-Encoding; one closes the connection after it.
        ("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", false),
        // Empty list elements are ignored (RFC 9110 §5.6.1): the coding is still chunked.
        ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, \r\n\r\n0\r\n\r\n", true),
    ];
    for (input, reusable) in cases {
        let res = response(input);
        assert_eq!(res.reusable, reusable, "for {input:?}");
        assert_eq!(res.version, u8::from(input.starts_with("HTTP/1.1")));
    }
}

#[test]
fn empty_transfer_coding_elements_are_ignored() {
    for coding in ["chunked,", "chunked, ", " , chunked", ",,chunked,,", "gzip, chunked, "] {
        let res = response(&format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: {coding}\r\n\r\n5\r\nhello\r\n0\r\n\r\n"));
        assert_eq!((res.body.as_slice(), res.reusable), (&b"hello"[..], true), "{coding:?}");
    }
    // The last coding that is there decides: not chunked, so the body runs to the end of the stream.
    let res = response("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip, \r\n\r\nzz");
    assert_eq!((res.body.as_slice(), res.reusable), (&b"zz"[..], false));
}

#[test]
fn folded_field_values_are_unfolded_with_spaces() {
    let res = response(
        "HTTP/1.1 200 OK\r\nX-Folded: first\r\n  second\r\n\tthird\r\nConnection: keep-alive,\r\n close\r\n\
         Content-Length: 2\r\n\r\nok",
    );
    assert_eq!(res.head.get("x-folded"), Some(&b"first    second   third"[..]));
    assert_eq!(res.head.get("connection"), Some(&b"keep-alive,   close"[..]));
    assert_eq!((res.body.as_slice(), res.reusable), (&b"ok"[..], false), "the folded `close` counts");
    let res = response("HTTP/1.1 200 OK\r\nX-Tab: a\tb\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(res.head.get("x-tab"), Some(&b"a\tb"[..]), "a tab inside a line is not a fold");
}

#[test]
fn interim_responses_are_capped() {
    let final_response = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    let within = format!("{}{final_response}", "HTTP/1.1 100 Continue\r\n\r\n".repeat(MAX_INTERIM));
    assert_eq!(response(&within).body, b"ok");
    let over = format!("{}{final_response}", "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n".repeat(MAX_INTERIM + 1));
    check_errors(
        None,
        Limits::default(),
        &[(&over, &format!("TooLarge: more than {MAX_INTERIM} interim (1xx) responses before the final one"))],
    );
}

#[test]
fn timeouts_propagate_as_io_errors() {
    for input in ["", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"] {
        let (mut out, _) = responses(input, Some(ErrorKind::TimedOut), false, Limits::default(), 1);
        match out.pop() {
            Some(Err(WireError::Io(e))) => assert_eq!(e.kind(), ErrorKind::TimedOut),
            other => panic!("{other:?} for {input:?}"),
        }
    }
}

/// `url` parsed; the tests' URLs are valid.
fn url(text: &str) -> Url {
    Url::parse(text).unwrap()
}

#[test]
fn request_head_is_written_exactly() {
    let h = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs.iter().map(|&(n, v)| (n.to_owned(), v.to_owned())).collect()
    };
    let cases = [
        (
            "GET",
            "http://example.com/a?b=1#c",
            h(&[("Accept", "*/*")]),
            0,
            "GET /a?b=1 HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\n",
        ),
        (
            "POST",
            "https://u:p@example.com:443",
            h(&[]),
            0,
            "POST / HTTP/1.1\r\nHost: example.com\r\nContent-Length: 0\r\n\r\n",
        ),
        (
            "DELETE",
            "http://[::1]:8080/x",
            h(&[]),
            3,
            "DELETE /x HTTP/1.1\r\nHost: [::1]:8080\r\nContent-Length: 3\r\n\r\n",
        ),
        (
            "PUT",
            "http://example.com:80/",
            h(&[("transfer-encoding", "chunked")]),
            9,
            "PUT / HTTP/1.1\r\nHost: example.com\r\ntransfer-encoding: chunked\r\n\r\n",
        ),
        (
            "PATCH",
            "http://example.com/",
            h(&[("content-length", "2")]),
            2,
            "PATCH / HTTP/1.1\r\nHost: example.com\r\ncontent-length: 2\r\n\r\n",
        ),
    ];
    for (method, target, headers, body_len, expected) in cases {
        let url = url(target);
        let head = RequestHead::to(method, &url, &headers);
        head.check().unwrap();
        let mut out = b"previous".to_vec();
        head.write_to(&mut out, Declared::Bytes(body_len));
        assert_eq!(String::from_utf8(out).unwrap(), format!("previous{expected}"));
    }
}

#[test]
fn request_head_refuses_a_method_or_field_a_head_may_not_hold() {
    // The one rule of both roles: a token name and method, a value without control bytes.
    let cases = [
        ("GET\r", ("A", "b"), "the method \"GET\\r\" is not a token"),
        ("GET /x", ("A", "b"), "the method \"GET /x\" is not a token"),
        ("GET", ("A\0", "b"), "the header name \"A\\0\" is not a token"),
        ("GET", ("A B", "b"), "the header name \"A B\" is not a token"),
        ("GET", ("A", "b\r\n\r\nGET /evil HTTP/1.1"), "a control byte in the value of header \"A\""),
        ("GET", ("A", "b\x7f"), "a control byte in the value of header \"A\""),
    ];
    let url = url("http://h/");
    for (method, (name, value), what) in cases {
        let headers: [(String, String); 1] = [(name.into(), value.into())];
        let err = RequestHead::to(method, &url, &headers).check().unwrap_err();
        assert_eq!(describe(&err), format!("Malformed: malformed request head: {what}"));
    }
    let fine: [(String, String); 1] = [("X-Ok".into(), "a\tb c~\u{e9}".into())];
    assert!(RequestHead::to("PATCH", &url, &fine).check().is_ok());
}

#[test]
fn request_head_refuses_a_target_that_is_not_one_word_of_visible_characters() {
    // A target the caller made (the proxy's) is checked too: a blank, CR, LF, NUL or DEL could end
    // the request line early.
    let url = url("http://h/");
    for target in ["", "/a b", "/a\r\nX-Evil: 1", "/\0", "/\x7f", "/\t"] {
        let err = RequestHead { method: "GET", url: &url, target, headers: NO_FIELDS }.check().unwrap_err();
        let what = format!("the target {target:?} is not one word of visible characters");
        assert_eq!(describe(&err), format!("Malformed: malformed request head: {what}"));
    }
    assert!(RequestHead { method: "GET", url: &url, target: "/caf\u{e9}?a=%20", headers: NO_FIELDS }.check().is_ok());
}

#[test]
fn a_url_carries_no_cr_lf_or_nul_into_the_head() {
    for text in ["http://h/a\r\nX-Evil: 1", "http://h/?q=\r\n\r\nGET /evil", "http://h/\0x?\0"] {
        let url = url(text);
        let mut out = Vec::new();
        RequestHead::to("GET", &url, NO_FIELDS).write_to(&mut out, Declared::Bytes(0));
        let request_line = out.split(|&b| b == b'\n').next().unwrap();
        assert!(!request_line[..request_line.len() - 1].iter().any(|b| matches!(b, b'\r' | b'\0')), "{text:?}");
        assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 3, "{text:?}: {:?}", String::from_utf8_lossy(&out));
    }
    for host in ["http://h\0x/", "http://a b/"] {
        let err = crate::client::parse(host).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::InvalidUrl, "{host:?}");
    }
}

/// Records how much each read asks for.
struct AskLog<'a> {
    data: &'a [u8],
    asked: Vec<usize>,
}

impl Read for AskLog<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.asked.push(buf.len());
        let n = buf.len().min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

#[test]
fn reads_start_small_and_double_while_they_come_back_full() {
    let body = pattern(300 * 1024);
    let mut input = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
    input.extend_from_slice(&body);
    let mut conn = BufferedConn::new(AskLog { data: &input, asked: Vec::new() });
    let got = read_response(&mut conn, false, &Limits::default()).unwrap();
    assert_eq!(got.body, body);
    let asked = &conn.get_ref().asked;
    assert_eq!(asked[..5], [FIRST_READ, 2 * FIRST_READ, 4 * FIRST_READ, 8 * FIRST_READ, READ_CHUNK]);
    assert!(asked[5..].iter().all(|&n| n == READ_CHUNK), "{asked:?}");
}

/// Records each write.
#[derive(Debug, Default)]
struct WriteLog {
    writes: Vec<Vec<u8>>,
}

impl Write for WriteLog {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.writes.push(buf.to_vec());
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_short_body_goes_out_with_its_head_and_a_long_one_after_it() {
    let url = url("http://h/");
    let head = RequestHead::to("POST", &url, NO_FIELDS);
    let head_bytes = |len: usize| format!("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: {len}\r\n\r\n").into_bytes();
    let long = pattern(COALESCE + 1);
    let mut conn = BufferedConn::new(WriteLog::default());
    conn.send_request(&head, &mut Upload::Bytes(b"short")).unwrap();
    conn.send_request(&head, &mut Upload::Bytes(&long)).unwrap();
    conn.send_request(&head, &mut Upload::Bytes(b"")).unwrap();
    let expected = [[head_bytes(5), b"short".to_vec()].concat(), head_bytes(long.len()), long, head_bytes(0)];
    assert_eq!(conn.get_ref().writes, expected);
}

#[test]
fn field_names_match_in_any_case_and_only_their_own() {
    for name in ["content-length", "Content-Length", "CONTENT-LENGTH", "cOnTeNt-LeNgTh"] {
        assert!(is_named(name.as_bytes(), b"content-length"), "{name}");
    }
    for name in ["content-lengths", "content_length", "content.length", "content-lengt", "kontent-length"] {
        assert!(!is_named(name.as_bytes(), b"content-length"), "{name:?}");
    }
    // Every token character (RFC 9110 §5.6.2) against every letter and `-`: the OR matches
    // exactly where a case-insensitive comparison does.
    let tokens = (b'0'..=b'9').chain(b'a'..=b'z').chain(b'A'..=b'Z').chain(*b"!#$%&'*+-.^_`|~");
    for c in tokens {
        for l in (b'a'..=b'z').chain([b'-']) {
            assert_eq!(is_named(&[c], &[l]), c.eq_ignore_ascii_case(&l), "{:?} as {:?}", c as char, l as char);
        }
    }
}

#[test]
fn content_lengths_are_plain_decimals_that_fit() {
    let cases: [(&str, Option<u64>); 7] = [
        ("0", Some(0)),
        ("0042", Some(42)),
        ("18446744073709551615", Some(u64::MAX)),
        ("18446744073709551616", None),
        ("", None),
        ("+1", None),
        ("1 2", None),
    ];
    for (digits, expected) in cases {
        assert_eq!(decimal(digits.as_bytes()), expected, "{digits:?}");
    }
}

/// A request body's reader that gives `pieces` one a read, then ends (or fails with `end`).
struct Pieces {
    pieces: std::collections::VecDeque<Vec<u8>>,
    end: Option<ErrorKind>,
}

impl Pieces {
    fn new(pieces: &[&[u8]], end: Option<ErrorKind>) -> Pieces {
        Pieces { pieces: pieces.iter().map(|p| p.to_vec()).collect(), end }
    }
}

impl Read for Pieces {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(mut piece) = self.pieces.pop_front() else {
            return self.end.map_or(Ok(0), |kind| Err(kind.into()));
        };
        let n = piece.len().min(buf.len());
        buf[..n].copy_from_slice(&piece[..n]);
        if n < piece.len() {
            self.pieces.push_front(piece.split_off(n));
        }
        Ok(n)
    }
}

/// The writes of one request whose body is read from `reader` (`len` bytes, or chunked), with the
/// caller's framing fields, which a streamed body replaces.
fn streamed(reader: &mut Pieces, len: Option<u64>) -> (Result<(), SendError>, Vec<Vec<u8>>) {
    let url = url("http://h/up");
    let headers = [("Content-Length".to_owned(), "3".to_owned()), ("X-A".to_owned(), "b".to_owned())];
    let head = RequestHead::to("PUT", &url, &headers);
    let mut conn = BufferedConn::new(WriteLog::default());
    let sent = conn.send_request(&head, &mut Upload::Reader { reader, len });
    (sent, conn.get_ref().writes.clone())
}

#[test]
fn a_streamed_body_of_unknown_length_goes_chunked_a_read_a_chunk() {
    let big = pattern(70_000);
    let mut reader = Pieces::new(&[b"hello", b" world!", &big], None);
    let (sent, writes) = streamed(&mut reader, None);
    sent.unwrap();
    let head = "PUT /up HTTP/1.1\r\nHost: h\r\nX-A: b\r\nTransfer-Encoding: chunked\r\n\r\n";
    let expected = [
        [head.as_bytes(), b"5\r\nhello\r\n"].concat(),
        b"7\r\n world!\r\n".to_vec(),
        [b"8000\r\n", &big[..32768], b"\r\n"].concat(),
        [b"8000\r\n", &big[32768..65536], b"\r\n"].concat(),
        [b"1170\r\n", &big[65536..], b"\r\n"].concat(),
        b"0\r\n\r\n".to_vec(),
    ];
    assert_eq!(writes, expected);
    let (sent, writes) = streamed(&mut Pieces::new(&[], None), None);
    sent.unwrap();
    assert_eq!(writes, [[head.as_bytes(), b"0\r\n\r\n"].concat()], "an empty body is the last chunk alone");
}

#[test]
fn a_streamed_body_of_known_length_goes_as_it_is_read() {
    let (sent, writes) = streamed(&mut Pieces::new(&[b"hello", b" world"], None), Some(11));
    sent.unwrap();
    let head = "PUT /up HTTP/1.1\r\nHost: h\r\nX-A: b\r\nContent-Length: 11\r\n\r\n";
    assert_eq!(writes, [[head.as_bytes(), b"hello"].concat(), b" world".to_vec()]);
    let mut longer = Pieces::new(&[b"hello world and more"], None);
    let (sent, writes) = streamed(&mut longer, Some(5));
    sent.unwrap();
    assert_eq!(writes.concat().len(), head.len() - 1 + 5, "no byte past the length is read or sent");
    assert_eq!(longer.pieces.iter().flatten().copied().collect::<Vec<u8>>(), b" world and more");
    let (empty, writes) = streamed(&mut Pieces::new(&[b"never read"], None), Some(0));
    empty.unwrap();
    assert_eq!(writes, [head.replace("11", "0").into_bytes()]);
}

#[test]
fn a_streamed_body_that_fails_or_ends_short_is_a_body_error() {
    let (short, _) = streamed(&mut Pieces::new(&[b"hello"], None), Some(11));
    match short {
        Err(SendError::Body(e)) => {
            assert_eq!(e.kind(), ErrorKind::UnexpectedEof);
            assert_eq!(e.to_string(), "the body ended after 5 of its 11 bytes");
        }
        other => panic!("{other:?}"),
    }
    let (failed, writes) = streamed(&mut Pieces::new(&[b"hello"], Some(ErrorKind::PermissionDenied)), None);
    assert!(matches!(failed, Err(SendError::Body(e)) if e.kind() == ErrorKind::PermissionDenied));
    assert_eq!(writes.len(), 1, "what was read before the failure went out");
}

#[cfg(feature = "server")]
#[test]
fn a_buffer_let_go_while_nothing_is_buffered_comes_back_first_sized() {
    let data: Vec<u8> = (0..20_000u32).map(|i| i as u8).collect();
    let mut conn = BufferedConn::new(&data[..]);
    assert_eq!(conn.fill().unwrap(), FIRST_READ);
    assert_eq!(conn.fill().unwrap(), 2 * FIRST_READ, "a read that fills its chunk doubles the next");
    conn.release_buffer();
    assert_eq!(conn.buffered(), &data[..3 * FIRST_READ], "bytes still buffered are kept");
    conn.consume(3 * FIRST_READ);
    conn.release_buffer();
    assert_eq!(conn.buf.capacity(), 0, "let go");
    assert_eq!(conn.fill().unwrap(), FIRST_READ, "the next read asks for a first read's bytes again");
    assert_eq!(conn.buffered(), &data[3 * FIRST_READ..4 * FIRST_READ]);
}

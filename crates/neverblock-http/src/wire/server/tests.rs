//! The request checks one at a time: request-line length, version names, target forms, framing.

use super::*;
use crate::wire::read::FIELDS_ON_STACK;
use crate::wire::write::{is_valid_field, write_content_length};

/// A request head parsed from `text` (which must be complete and valid to httparse).
fn head(text: &str) -> (Head, u8) {
    let mut head = Head::default();
    let (_, version) = parse_request(text.as_bytes(), 100, &mut head).unwrap().expect("a complete head");
    (head, version)
}

fn check(text: &str) -> Result<Message, Refusal> {
    let (head, version) = head(text);
    check_request(&head, version, &Limits { max_body: 1000, ..Limits::default() })
}

#[test]
fn request_lines_over_the_limit_are_refused_before_they_end() {
    assert!(check_request_line(b"GET /aaaa HTTP/1.1\r\n", 18).is_ok());
    assert_eq!(check_request_line(b"GET /aaaaa HTTP/1.1\r\n", 18).unwrap_err().status, 414);
    assert_eq!(check_request_line(b"GET /aaaaaaaaaaaaaaaaaa", 18).unwrap_err().status, 414);
    assert!(check_request_line(b"\r\n\r\nGET /aaaa HTTP/1.1\r\n", 18).is_ok(), "blank lines first are skipped");
    assert!(check_request_line(b"GET /", 18).is_ok());
}

#[test]
fn only_well_formed_other_versions_are_505() {
    for (line, named) in [
        ("GET / HTTP/2.0\r\n", true),
        ("GET / HTTP/1.2\r\n", true),
        ("GET / HTTP/3\r\n", true),
        ("GET / HTTP/1.1x\r\n", false),
        ("GET / HTTX/1.1\r\n", false),
        ("GET / HTTP/12.0\r\n", false),
    ] {
        assert_eq!(names_a_version(line.as_bytes()), named, "{line:?}");
    }
}

#[test]
fn targets_split_into_path_and_query_by_form() {
    type Parts<'a> = Result<(&'a str, Option<&'a str>), u16>;
    let cases: &[(&str, &str, Parts<'_>)] = &[
        ("GET", "/a/b?c=d", Ok(("/a/b", Some("c=d")))),
        ("GET", "/", Ok(("/", None))),
        ("GET", "/?", Ok(("/", Some("")))),
        ("GET", "http://h:1/x?y", Ok(("/x", Some("y")))),
        ("GET", "HTTPS://h", Ok(("", None))),
        ("GET", "http://h?q", Ok(("", Some("q")))),
        ("OPTIONS", "*", Ok(("*", None))),
        ("GET", "*", Err(400)),
        ("GET", "a/b", Err(400)),
        ("GET", "ftp://h/x", Err(400)),
        ("CONNECT", "h:443", Err(501)),
    ];
    for &(method, target, expected) in cases {
        let got = target_parts(method, target)
            .map(|(path, query)| (&target[path], query.map(|q| &target[q])))
            .map_err(|r| r.status);
        assert_eq!(got, expected, "{method} {target}");
    }
}

#[test]
fn framing_follows_rfc_9112_and_refuses_what_could_be_read_two_ways() {
    let ok = |text: &str| check(text).unwrap();
    let status = |text: &str| check(text).unwrap_err().status;
    let h11 = "GET / HTTP/1.1\r\nHost: h\r\n";
    assert_eq!(ok(&format!("{h11}\r\n")).framing, Framing::None);
    assert_eq!(ok(&format!("{h11}Content-Length: 5\r\n\r\n")).framing, Framing::Length(5));
    assert_eq!(ok(&format!("{h11}Content-Length: 5, 5\r\ncontent-length: 5\r\n\r\n")).framing, Framing::Length(5));
    assert_eq!(ok(&format!("{h11}Transfer-Encoding: chunked\r\n\r\n")).framing, Framing::Chunked);
    assert_eq!(ok(&format!("{h11}Transfer-Encoding: ,CHUNKED\r\n\r\n")).framing, Framing::Chunked);
    let cases = [
        ("Content-Length: 5\r\nContent-Length: 6\r\n", 400),
        ("Content-Length: 5, 6\r\n", 400),
        ("Content-Length: +5\r\n", 400),
        ("Content-Length: 0x5\r\n", 400),
        ("Content-Length: \r\n", 400),
        ("Content-Length: 1001\r\n", 413),
        ("Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", 400),
        ("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", 400),
        ("Transfer-Encoding: chunked, chunked\r\n", 400),
        ("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", 400),
        ("Transfer-Encoding: gzip\r\n", 501),
        ("Transfer-Encoding: gzip, chunked\r\n", 501),
        ("Transfer-Encoding: chunked, gzip\r\n", 501),
        ("Transfer-Encoding: gzip, deflate\r\n", 501),
        ("Transfer-Encoding: \r\n", 400),
        ("Expect: 100-continue-please\r\n", 417),
        ("Host: again\r\n", 400),
        ("Transfer-Encoding: chunked\r\nTransfer-Encoding: ,\r\n", 400),
    ];
    for (fields, expected) in cases {
        assert_eq!(status(&format!("{h11}{fields}\r\n")), expected, "{fields:?}");
    }
    assert_eq!(status("GET / HTTP/1.1\r\n\r\n"), 400, "no Host");
    assert_eq!(status("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);
    assert_eq!(ok("GET / HTTP/1.0\r\n\r\n").framing, Framing::None, "HTTP/1.0 needs no Host");
}

#[test]
fn a_host_must_be_a_host_and_port() {
    for host in ["example.com", "example.com:8080", "127.0.0.1:1", "[::1]:80", "xn--bcher-kva.example", "a_b~c", ""] {
        assert!(check(&format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n")).is_ok(), "{host:?}");
    }
    for host in ["a b", "a/b", "user@host", "h?q", "h#f", "h\\x", "\"h\"", "h\u{e9}"] {
        let refused = check(&format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n")).unwrap_err();
        assert_eq!(refused.status, 400, "{host:?}");
    }
}

#[test]
fn persistence_and_expectations_follow_the_version() {
    let cases = [
        ("GET / HTTP/1.1\r\nHost: h\r\n\r\n", true),
        ("GET / HTTP/1.1\r\nHost: h\r\nConnection: Close\r\n\r\n", false),
        ("GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, close\r\n\r\n", false),
        ("GET / HTTP/1.0\r\n\r\n", false),
        ("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", true),
    ];
    for (text, keep_alive) in cases {
        assert_eq!(check(text).unwrap().keep_alive, keep_alive, "{text:?}");
    }
    let expects = |text: &str| check(text).unwrap().expect_continue;
    assert!(expects("PUT / HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\nContent-Length: 3\r\n\r\n"));
    assert!(!expects("PUT / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\n\r\n"), "no body to wait for");
    assert!(!expects("PUT / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n"), "HTTP/1.0 ignores it");
}

#[test]
fn field_values_with_control_bytes_are_not_written() {
    assert!(is_valid_field("X-Ok", "a\tb c~\u{e9}"));
    for (name, value) in [("X", "a\r\nb"), ("X", "a\0"), ("X", "\x7f"), ("X Y", "v"), ("", "v"), ("X:", "v")] {
        assert!(!is_valid_field(name, value), "{name:?}: {value:?}");
    }
}

#[test]
fn numbers_are_written_as_decimals() {
    for (n, text) in [(0, "0"), (7, "7"), (1234567890, "1234567890"), (u64::MAX, "18446744073709551615")] {
        let mut out = Vec::new();
        write_content_length(&mut out, n);
        assert_eq!(out, format!("Content-Length: {text}\r\n").into_bytes());
    }
    let mut out = Vec::new();
    write_status_line(&mut out, 404, reason_phrase(404));
    assert_eq!(out, b"HTTP/1.1 404 Not Found\r\n");
}

#[test]
fn heads_with_more_fields_than_the_stack_holds_parse_up_to_the_limit() {
    let limits = Limits { max_headers: 100, ..Limits::default() };
    for fields in [FIELDS_ON_STACK, FIELDS_ON_STACK + 1, 100] {
        let text =
            format!("GET / HTTP/1.1\r\n{}\r\n", (0..fields).map(|i| format!("X-{i}: {i}\r\n")).collect::<String>());
        let mut conn = BufferedConn::new(text.as_bytes());
        let mut parsed = Head::default();
        read_request_head(&mut conn, &limits, &mut parsed).unwrap_or_else(|_| panic!("{fields} fields parse"));
        assert_eq!(parsed.fields().count(), fields);
    }
    let text = format!("GET / HTTP/1.1\r\n{}\r\n", (0..101).map(|i| format!("X-{i}: {i}\r\n")).collect::<String>());
    let mut conn = BufferedConn::new(text.as_bytes());
    let refused = read_request_head(&mut conn, &limits, &mut Head::default()).map(drop).unwrap_err();
    assert!(matches!(refused, HeadError::Refused(r) if r.status == 431));
}

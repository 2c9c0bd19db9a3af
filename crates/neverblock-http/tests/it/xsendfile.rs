//! X-Sendfile and X-Accel-Redirect: a handler names a file and the server sends it as a static
//! file, never one outside its directory, and never shows the client the header.

use std::os::unix::fs::symlink;

use neverblock_http::server::{Request, Response, XSendfile};

use crate::logs;
use crate::serving::{replies, Reply, Running, TempDir};

/// The application under test: it answers with the fields its request asks for (`X-Send` becomes
/// `X-Sendfile`, `X-Accel` becomes `X-Accel-Redirect`, `X-Type` becomes `Content-Type`), and with a
/// body, a length and validators of its own, which a file sent in its place must not carry.
fn app(request: &mut Request<'_>) -> Response {
    let mut response = Response::new(200)
        .header("Content-Disposition", "attachment; filename=\"report.bin\"")
        .header("Cache-Control", "private")
        .header("ETag", "\"the-app's\"")
        .header("Content-Length", "999")
        .body("the application's own body");
    for (asked, field) in [("x-send", "X-Sendfile"), ("x-accel", "X-Accel-Redirect"), ("x-type", "Content-Type")] {
        if let Some(value) = request.header(asked) {
            response.append_header(field, value.to_owned());
        }
    }
    if let Some(value) = request.header("x-custom") {
        response.append_header("X-Lighttpd-Send-File", value.to_owned());
    }
    response
}

/// The files to send, a secret beside them, and a server of `app` honouring X-Sendfile under them.
struct Site {
    server: Running,
    files: TempDir,
    outside: TempDir,
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 13 % 251) as u8).collect()
}

fn site(
    configure: impl FnOnce(
        XSendfile<fn(&mut Request<'_>) -> Response>,
        &TempDir,
    ) -> XSendfile<fn(&mut Request<'_>) -> Response>,
) -> Site {
    logs::capture();
    let files = TempDir::new("xsendfile");
    let outside = TempDir::new("xsendfile-outside");
    files.write("report.bin", pattern(100_000));
    files.write("notes.txt", "plain notes\n");
    files.write("sub/deep.txt", "deep file\n");
    files.write("caf\u{e9} menu.txt", "menu\n");
    outside.write("secret.txt", "SECRET");
    symlink(outside.path().join("secret.txt"), files.path().join("escape")).unwrap();
    symlink(files.path().join("notes.txt"), outside.path().join("link-in")).unwrap();
    let handler = configure(XSendfile::new(app as fn(&mut Request<'_>) -> Response), &files);
    Site { server: Running::start(handler), files, outside }
}

fn with_root(
    handler: XSendfile<fn(&mut Request<'_>) -> Response>,
    files: &TempDir,
) -> XSendfile<fn(&mut Request<'_>) -> Response> {
    handler.root(files.path()).unwrap()
}

impl Site {
    fn get(&self, fields: &str) -> Reply {
        self.request("GET", fields)
    }

    fn request(&self, method: &str, fields: &str) -> Reply {
        let answer = self.server.send_bytes(format!("{method} /download HTTP/1.1\r\nHost: x\r\n{fields}\r\n"));
        let mut all = replies(&answer);
        assert_eq!(all.len(), 1, "{}", String::from_utf8_lossy(&answer));
        all.remove(0)
    }

    fn abs(&self, relative: &str) -> String {
        self.files.path().join(relative).to_str().unwrap().to_owned()
    }
}

/// Asserts `reply` is the 404 of a refused file, with no trace of the header or of the secret.
fn assert_refused(reply: &Reply, value: &str) {
    assert_eq!(reply.status, 404, "{value}: {reply:?}");
    assert!(reply.headers.iter().all(|(n, _)| !n.eq_ignore_ascii_case("x-sendfile")), "{reply:?}");
    assert!(reply.headers.iter().all(|(n, _)| !n.eq_ignore_ascii_case("x-accel-redirect")), "{reply:?}");
    assert!(!reply.text().contains("SECRET") && !reply.text().contains("application's"), "{reply:?}");
    // As the log quotes it: a bare value could match another refusal's line (a longer path
    // containing it, or another test's).
    assert!(!logs::lines_containing(&format!("{value:?}")).is_empty(), "a log line names {value}");
}

#[test]
fn a_named_file_is_sent_with_the_handlers_type_and_disposition_and_without_the_header() {
    let site = site(with_root);
    let reply = site.get(&format!("X-Send: {}\r\n", site.abs("report.bin")));
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body, pattern(100_000));
    assert_eq!(reply.header("content-length"), Some("100000"), "the file's length, not the handler's");
    assert_eq!(reply.header("content-type"), Some("application/octet-stream"), "by extension");
    assert_eq!(reply.header("content-disposition"), Some("attachment; filename=\"report.bin\""));
    assert_eq!(reply.header("cache-control"), Some("private"));
    assert_eq!(reply.header("accept-ranges"), Some("bytes"));
    assert_ne!(reply.header("etag"), Some("\"the-app's\""), "the file's validators");
    assert!(reply.header("last-modified").is_some());
    assert!(reply.headers.iter().all(|(n, _)| !n.eq_ignore_ascii_case("x-sendfile")), "{reply:?}");

    let typed = site.get("X-Send: notes.txt\r\nX-Type: text/markdown\r\n");
    assert_eq!((typed.status, typed.text().as_str()), (200, "plain notes\n"), "a relative path is under the root");
    assert_eq!(typed.header("content-type"), Some("text/markdown"), "the handler's type wins");
    assert_eq!(typed.headers.iter().filter(|(n, _)| n.eq_ignore_ascii_case("content-type")).count(), 1);

    let encoded = site.get("X-Send: caf%C3%A9%20menu.txt\r\n");
    assert_eq!(encoded.text(), "menu\n", "percent escapes are decoded");
    let deep = site.get(&format!("X-Send: {}\r\n", site.abs("sub/deep.txt")));
    assert_eq!(deep.text(), "deep file\n");
}

#[test]
fn a_named_file_answers_ranges_if_range_and_conditionals_as_a_static_file() {
    let site = site(with_root);
    let send = format!("X-Send: {}\r\n", site.abs("report.bin"));
    let etag = site.get(&send).header("etag").unwrap().to_owned();

    let part = site.get(&format!("{send}Range: bytes=1000-1999\r\n"));
    assert_eq!(part.status, 206);
    assert_eq!(part.header("content-range"), Some("bytes 1000-1999/100000"));
    assert_eq!(part.body, pattern(100_000)[1000..2000]);
    assert_eq!(part.header("content-disposition"), Some("attachment; filename=\"report.bin\""));

    let same = site.get(&format!("{send}Range: bytes=-10\r\nIf-Range: {etag}\r\n"));
    assert_eq!((same.status, same.body.as_slice()), (206, &pattern(100_000)[99_990..]));
    let changed = site.get(&format!("{send}Range: bytes=-10\r\nIf-Range: \"stale\"\r\n"));
    assert_eq!((changed.status, changed.body.len()), (200, 100_000), "a stale If-Range gets the whole file");

    let unsatisfiable = site.get(&format!("{send}Range: bytes=200000-\r\n"));
    assert_eq!((unsatisfiable.status, unsatisfiable.header("content-range")), (416, Some("bytes */100000")));

    let not_modified = site.get(&format!("{send}If-None-Match: {etag}\r\n"));
    assert_eq!((not_modified.status, not_modified.body.len()), (304, 0));
    assert_eq!(not_modified.header("etag"), Some(etag.as_str()));
    assert_eq!(not_modified.header("cache-control"), Some("private"));
    let failed = site.get(&format!("{send}If-Match: \"stale\"\r\n"));
    assert_eq!(failed.status, 412);
}

#[test]
fn any_method_gets_the_file_as_a_get_and_head_gets_its_length() {
    let site = site(with_root);
    let answer = site.server.send_bytes(
        "POST /download HTTP/1.1\r\nHost: x\r\nX-Send: notes.txt\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc",
    );
    let reply = replies(&answer).remove(0);
    assert_eq!((reply.status, reply.text().as_str()), (200, "plain notes\n"));

    let answer =
        site.server.send("HEAD /download HTTP/1.1\r\nHost: x\r\nX-Send: notes.txt\r\nConnection: close\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(answer.contains("\r\nContent-Length: 12\r\n"), "{answer}");
    assert!(answer.ends_with("\r\n\r\n"), "no body: {answer}");
}

#[test]
fn paths_outside_the_root_get_404_a_log_line_and_never_the_header() {
    let site = site(with_root);
    let secret = site.outside.path().join("secret.txt");
    let dotdot =
        format!("{}/../{}/secret.txt", site.abs(""), site.outside.path().file_name().unwrap().to_str().unwrap());
    for value in [
        secret.to_str().unwrap().to_owned(),
        dotdot,
        format!("../{}/secret.txt", site.outside.path().file_name().unwrap().to_str().unwrap()),
        "escape".to_owned(),
        site.abs("escape"),
        "/etc/passwd".to_owned(),
    ] {
        let reply = site.get(&format!("X-Send: {value}\r\n"));
        assert_refused(&reply, &value);
    }
    let missing = site.abs("no-such-file.bin");
    assert_refused(&site.get(&format!("X-Send: {missing}\r\n")), &missing);
    let directory = site.abs("sub");
    assert_refused(&site.get(&format!("X-Send: {directory}\r\n")), &directory);
}

#[test]
fn a_symbolic_link_from_outside_into_the_root_counts_as_under_it() {
    let site = site(with_root);
    let link = site.outside.path().join("link-in");
    let reply = site.get(&format!("X-Send: {}\r\n", link.display()));
    assert_eq!((reply.status, reply.text().as_str()), (200, "plain notes\n"));
}

#[test]
fn x_accel_redirect_maps_the_longest_prefix_to_its_directory() {
    let site = site(|handler, files| {
        handler
            .accel_location("/protected/", files.path())
            .unwrap()
            .accel_location("/protected/deep/", files.path().join("sub"))
            .unwrap()
    });
    let reply = site.get("X-Accel: /protected/notes.txt?token=1\r\n");
    assert_eq!((reply.status, reply.text().as_str()), (200, "plain notes\n"));
    assert!(reply.headers.iter().all(|(n, _)| !n.eq_ignore_ascii_case("x-accel-redirect")), "{reply:?}");
    assert_eq!(site.get("X-Accel: /protected/deep/deep.txt\r\n").text(), "deep file\n");
    assert_eq!(site.get("X-Accel: /protected/caf%C3%A9%20menu.txt\r\n").text(), "menu\n");
    for value in ["/elsewhere/notes.txt", "/protected/../notes.txt", "/protected/%2e%2e/x", "/protected/escape"] {
        assert_refused(&site.get(&format!("X-Accel: {value}\r\n")), value);
    }
    let passed = site.get("X-Send: notes.txt\r\n");
    assert_eq!(passed.header("x-sendfile"), Some("notes.txt"), "no root: X-Sendfile is the handler's business");
    assert_eq!(passed.text(), "the application's own body");
}

#[test]
fn the_header_name_is_configurable() {
    let site = site(|handler, files| handler.header("X-Lighttpd-Send-File").root(files.path()).unwrap());
    let reply = site.get("X-Custom: notes.txt\r\n");
    assert_eq!((reply.status, reply.text().as_str()), (200, "plain notes\n"));
    assert!(reply.headers.iter().all(|(n, _)| !n.eq_ignore_ascii_case("x-lighttpd-send-file")), "{reply:?}");
    let other = site.get("X-Send: notes.txt\r\n");
    assert_eq!(other.header("x-sendfile"), Some("notes.txt"), "only the configured name is honoured");
}

//! Static files end to end: headers, conditional requests, ranges, directories, every way out of
//! the root refused, precompressed siblings, and a cold file that does not hold up other clients.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::symlink;
use std::sync::{Arc, Mutex};

use neverblock_http::server::{Server, StaticFiles};

use crate::serving::{replies, Reply, Running, TempDir};

/// A tree to serve, a secret beside it, and a server of the tree.
struct Site {
    server: Running,
    tree: TempDir,
    outside: TempDir,
}

/// The outside directory's name, as a path segment beside the tree.
fn outside_name(outside: &TempDir) -> String {
    outside.path().file_name().unwrap().to_str().unwrap().to_owned()
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 % 251) as u8).collect()
}

fn site() -> Site {
    let tree = TempDir::new("site");
    let outside = TempDir::new("outside");
    outside.write("secret.txt", "SECRET");
    tree.write("hello.txt", "hello, file\n");
    tree.write("dir/index.html", "<p>index</p>");
    tree.write("dir/a b.txt", "spaced");
    tree.write("nolisting/file.txt", "x");
    tree.write("a:b/index.html", "colon");
    tree.write("page.html", "<p>plain</p>");
    tree.write("page.html.gz", "GZIPPED-BYTES");
    tree.write("big.bin", pattern(3 << 20));
    symlink(outside.path().join("secret.txt"), tree.path().join("escape")).unwrap();
    symlink(format!("../../{}", outside_name(&outside)), tree.path().join("dir/up")).unwrap();
    symlink("hello.txt", tree.path().join("inside")).unwrap();
    symlink("loop", tree.path().join("loop")).unwrap();
    let files = StaticFiles::new(tree.path()).unwrap();
    Site { server: Running::start(files), tree, outside }
}

impl Site {
    /// GET `target` with extra `fields` (`Name: value\r\n` each).
    fn get(&self, target: &str, fields: &str) -> Reply {
        let answer = self.server.send_bytes(format!("GET {target} HTTP/1.1\r\nHost: x\r\n{fields}\r\n"));
        replies(&answer).into_iter().next().unwrap_or_else(|| panic!("no answer to {target}"))
    }
}

#[test]
fn a_file_comes_with_its_type_length_validators_and_ranges_offer() {
    let site = site();
    let reply = site.get("/hello.txt", "");
    assert_eq!((reply.status, reply.text().as_str()), (200, "hello, file\n"));
    assert_eq!(reply.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(reply.header("content-length"), Some("12"));
    assert_eq!(reply.header("accept-ranges"), Some("bytes"));
    let etag = reply.header("etag").unwrap();
    assert!(etag.starts_with('"') && etag.ends_with('"'), "a strong tag: {etag}");
    let modified = std::fs::metadata(site.tree.path().join("hello.txt")).unwrap().modified().unwrap();
    let last_modified = httpdate::parse_http_date(reply.header("last-modified").unwrap()).unwrap();
    assert_eq!(httpdate::fmt_http_date(last_modified), httpdate::fmt_http_date(modified));
    assert_eq!(site.get("/dir/a%20b.txt", "").text(), "spaced");
    assert_eq!(site.get("/inside", "").text(), "hello, file\n", "a link inside the root is followed");
}

#[test]
fn head_has_the_length_and_no_body() {
    let site = site();
    let mut stream = site.server.connect();
    stream.write_all(b"HEAD /big.bin HTTP/1.1\r\nHost: x\r\n\r\nGET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut reader = BufReader::new(stream);
    let head = crate::serving::read_reply(&mut reader, true);
    assert_eq!((head.status, head.header("content-length")), (200, Some("3145728")));
    assert_eq!(crate::serving::read_reply(&mut reader, false).text(), "hello, file\n");
}

#[test]
fn a_large_file_arrives_byte_for_byte() {
    let site = site();
    let reply = site.get("/big.bin", "");
    assert_eq!(reply.body, pattern(3 << 20));
}

#[test]
fn preconditions_answer_304_and_412_in_rfc_order() {
    let site = site();
    let first = site.get("/hello.txt", "");
    let (etag, date) = (first.header("etag").unwrap().to_owned(), first.header("last-modified").unwrap().to_owned());
    let old = "Thu, 01 Jan 1970 00:00:01 GMT";
    let cases: Vec<(String, u16)> = vec![
        (format!("If-None-Match: {etag}\r\n"), 304),
        (format!("If-None-Match: \"other\", W/{etag}\r\n"), 304),
        ("If-None-Match: \"other\"\r\n".into(), 200),
        (format!("If-Modified-Since: {date}\r\n"), 304),
        (format!("If-Modified-Since: {old}\r\n"), 200),
        (format!("If-None-Match: \"other\"\r\nIf-Modified-Since: {date}\r\n"), 200),
        ("If-Match: \"other\"\r\n".into(), 412),
        (format!("If-Match: {etag}\r\n"), 200),
        ("If-Match: *\r\n".into(), 200),
        (format!("If-Unmodified-Since: {old}\r\n"), 412),
        (format!("If-Unmodified-Since: {date}\r\n"), 200),
        (format!("If-Match: {etag}\r\nIf-Unmodified-Since: {old}\r\n"), 200),
        (format!("If-Match: \"other\"\r\nIf-None-Match: {etag}\r\n"), 412),
        // A list field may come in several lines (RFC 9110 §5.3): all of them count.
        (format!("If-None-Match: \"other\"\r\nIf-None-Match: {etag}\r\n"), 304),
        (format!("If-Match: \"other\"\r\nif-match: {etag}\r\n"), 200),
    ];
    for (fields, status) in cases {
        let reply = site.get("/hello.txt", &fields);
        assert_eq!(reply.status, status, "{fields:?}");
        if status == 304 {
            assert_eq!(reply.header("etag"), Some(etag.as_str()), "{fields:?}");
        }
    }
}

#[test]
fn ranges_get_one_part_the_whole_file_or_416() {
    let site = site();
    let size = 3 << 20;
    let whole = pattern(size);
    let etag = site.get("/big.bin", "Range: bytes=0-0\r\n").header("etag").unwrap().to_owned();
    let part = site.get("/big.bin", "Range: bytes=100-199\r\n");
    assert_eq!((part.status, part.header("content-range")), (206, Some(format!("bytes 100-199/{size}").as_str())));
    assert_eq!(part.body, &whole[100..200]);
    let tail = site.get("/big.bin", "Range: bytes=-10\r\n");
    assert_eq!((tail.status, tail.body.as_slice()), (206, &whole[size - 10..]));
    let matching = site.get("/big.bin", &format!("Range: bytes=5-9\r\nIf-Range: {etag}\r\n"));
    assert_eq!((matching.status, matching.body.as_slice()), (206, &whole[5..10]));
    let stale = site.get("/big.bin", "Range: bytes=5-9\r\nIf-Range: \"stale\"\r\n");
    assert_eq!((stale.status, stale.body.len()), (200, size), "a changed file is sent whole");
    let beyond = site.get("/big.bin", &format!("Range: bytes={size}-\r\n"));
    assert_eq!((beyond.status, beyond.header("content-range")), (416, Some(format!("bytes */{size}").as_str())));
    let apart = site.get("/big.bin", "Range: bytes=0-9, 100-109\r\n");
    assert_eq!((apart.status, apart.body.len()), (200, size), "several ranges apart: the whole file");
    let merged = site.get("/big.bin", "Range: bytes=0-9, 5-19\r\n");
    assert_eq!((merged.status, merged.body.as_slice()), (206, &whole[..20]));
}

#[test]
fn many_overlapping_ranges_do_not_amplify_the_response() {
    let site = site();
    let many = vec!["0-"; 16].join(",");
    let reply = site.get("/big.bin", &format!("Range: bytes={many}\r\n"));
    assert_eq!(reply.body.len(), 3 << 20, "never more than the file once");
    let too_many = vec!["1-2"; 200].join(",");
    let reply = site.get("/big.bin", &format!("Range: bytes={too_many}\r\n"));
    assert_eq!((reply.status, reply.body.len()), (200, 3 << 20));
}

#[test]
fn directories_redirect_to_their_slash_serve_their_index_and_are_never_listed() {
    let site = site();
    let redirect = site.get("/dir?x=1", "");
    assert_eq!((redirect.status, redirect.header("location")), (301, Some("dir/?x=1")));
    let index = site.get("/dir/", "");
    assert_eq!((index.status, index.text().as_str()), (200, "<p>index</p>"));
    assert_eq!(index.header("content-type"), Some("text/html; charset=utf-8"));
    let empty = site.get("/nolisting/", "");
    assert_eq!(empty.status, 403);
    assert!(!empty.text().contains("file.txt"), "no listing: {}", empty.text());
    let colon = site.get("/a:b?x=1", "");
    assert_eq!(colon.header("location"), Some("./a:b/?x=1"), "not a URI with the scheme `a`");
    let root_redirect = site.get("//dir", "");
    assert_eq!(root_redirect.header("location"), Some("dir/"), "relative, so `//` cannot name another host");
    assert_eq!(site.get("/hello.txt/", "").status, 404, "a file is not a directory");
}

#[test]
fn every_way_out_of_the_root_is_refused() {
    let site = site();
    let out = outside_name(&site.outside);
    let cases = [
        (format!("/../{out}/secret.txt"), 400),
        (format!("/dir/../../{out}/secret.txt"), 400),
        (format!("/%2e%2e/{out}/secret.txt"), 400),
        (format!("/.%2E/{out}/secret.txt"), 400),
        (format!("/dir/..%2f..%2f{out}%2fsecret.txt"), 400),
        (format!("/%2e%2e%2f{out}%2fsecret.txt"), 400),
        ("/dir%2fa%20b.txt".to_owned(), 400),
        ("/hello.txt%00.png".to_owned(), 400),
        ("/hello%zz".to_owned(), 400),
        (format!("/%252e%252e/{out}/secret.txt"), 404),
        (format!("/%c0%ae%c0%ae/{out}/secret.txt"), 404),
        (format!("/..%5c..%5c{out}%5csecret.txt"), 404),
        ("/escape".to_owned(), 404),
        ("/loop".to_owned(), 404),
        ("/dir/up/secret.txt".to_owned(), 404),
        (format!("http://x/../{out}/secret.txt"), 400),
    ];
    for (target, status) in cases {
        let reply = site.get(&target, "");
        assert_eq!(reply.status, status, "{target}");
        assert!(!reply.text().contains("SECRET"), "{target}");
    }
    let mut stream = site.server.connect();
    stream.write_all(b"GET /hello.txt\0 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let answer = crate::serving::read_all(&mut stream);
    assert!(answer.starts_with("HTTP/1.1 400 "), "a raw NUL in the target: {answer:?}");
}

#[test]
fn a_gzip_sibling_is_sent_to_clients_that_accept_it() {
    let site = site();
    let gz = site.get("/page.html", "Accept-Encoding: br, gzip\r\n");
    assert_eq!((gz.text().as_str(), gz.header("content-encoding")), ("GZIPPED-BYTES", Some("gzip")));
    assert_eq!(gz.header("content-type"), Some("text/html; charset=utf-8"), "the type is the original's");
    assert_eq!(gz.header("vary"), Some("Accept-Encoding"));
    let plain = site.get("/page.html", "Accept-Encoding: gzip;q=0\r\n");
    assert_eq!((plain.text().as_str(), plain.header("content-encoding")), ("<p>plain</p>", None));
    assert_eq!(plain.header("vary"), Some("Accept-Encoding"));
    assert_ne!(plain.header("etag"), gz.header("etag"), "two representations, two tags");
    assert_eq!(site.get("/hello.txt", "Accept-Encoding: gzip\r\n").text(), "hello, file\n", "no sibling, no gzip");
    let split = site.get("/page.html", "Accept-Encoding: br\r\nAccept-Encoding: gzip\r\n");
    assert_eq!(split.header("content-encoding"), Some("gzip"), "a list in two lines");
    // Which representation a refusal speaks of depends on Accept-Encoding too.
    let unsatisfiable = site.get("/page.html", "Accept-Encoding: gzip\r\nRange: bytes=999-\r\n");
    assert_eq!((unsatisfiable.status, unsatisfiable.header("vary")), (416, Some("Accept-Encoding")));
    let failed = site.get("/page.html", "Accept-Encoding: gzip\r\nIf-Match: \"other\"\r\n");
    assert_eq!((failed.status, failed.header("vary")), (412, Some("Accept-Encoding")));
}

#[test]
fn other_methods_get_405() {
    let site = site();
    let answer = site.server.send("DELETE /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    let reply = &replies(&answer)[0];
    assert_eq!((reply.status, reply.header("allow")), (405, Some("GET, HEAD")));
}

#[test]
fn a_cold_large_file_leaves_other_clients_served_meanwhile() {
    let tree = TempDir::new("cold");
    let len = 64 << 20;
    let content = pattern(len);
    let path = tree.write("cold.bin", &content);
    tree.write("small.txt", "small");
    let file = std::fs::File::open(&path).unwrap();
    file.sync_all().unwrap();
    rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed).unwrap();
    let server = Running::with(Server::builder().workers(1), StaticFiles::new(tree.path()).unwrap());

    let events = Arc::new(Mutex::new(Vec::<String>::new()));
    let log = events.clone();
    let mut big = server.connect();
    big.write_all(b"GET /cold.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let (first_byte_tx, first_byte) = std::sync::mpsc::channel();
    let download = std::thread::spawn(move || {
        let mut reader = BufReader::new(big);
        let mut line = String::new();
        while reader.read_line(&mut line).unwrap() > 2 {
            line.clear();
        }
        let mut body = vec![0u8; 1];
        reader.read_exact(&mut body).unwrap();
        first_byte_tx.send(()).unwrap();
        reader.read_to_end(&mut body).unwrap();
        log.lock().unwrap().push("big done".to_owned());
        body
    });
    first_byte.recv_timeout(crate::serving::PATIENCE).unwrap();
    let mut served = 0;
    while !events.lock().unwrap().iter().any(|e| e == "big done") && served < 1000 {
        let reply = replies(server.send("GET /small.txt HTTP/1.1\r\nHost: x\r\n\r\n")).remove(0);
        assert_eq!(reply.text(), "small");
        events.lock().unwrap().push(format!("small {served}"));
        served += 1;
    }
    let body = download.join().unwrap();
    assert!(body == content, "the cold file arrived whole and right");
    let events = events.lock().unwrap();
    let big_done = events.iter().position(|e| e == "big done").unwrap();
    assert!(
        big_done >= 3,
        "small requests were answered while the cold file was being sent: {:?}",
        &events[..big_done.min(5)]
    );
}

#[test]
fn dates_past_the_servers_clock_are_not_believed() {
    let site = site();
    let day = std::time::Duration::from_secs(86_400);
    let tomorrow = httpdate::fmt_http_date(std::time::SystemTime::now() + day);
    let reply = site.get("/hello.txt", &format!("If-Modified-Since: {tomorrow}\r\n"));
    assert_eq!(reply.status, 200, "a date in the future is no date (Apache's rule)");
    let path = site.tree.write("future.txt", "from tomorrow");
    std::fs::File::options().write(true).open(&path).unwrap().set_modified(std::time::SystemTime::now() + day).unwrap();
    let reply = site.get("/future.txt", "");
    let last_modified = httpdate::parse_http_date(reply.header("last-modified").unwrap()).unwrap();
    let date = httpdate::parse_http_date(reply.header("date").unwrap()).unwrap();
    assert!(last_modified <= date, "RFC 9110 §8.8.2.1: never later than the response's Date");
}

#[test]
fn ranges_past_4_gib_are_served() {
    let tree = TempDir::new("huge");
    let size: u64 = 5 << 30;
    let file = std::fs::File::create(tree.path().join("huge.bin")).unwrap();
    file.set_len(size).unwrap(); // sparse: no disk space
    std::os::unix::fs::FileExt::write_all_at(&file, b"END", size - 3).unwrap();
    let server = Running::start(StaticFiles::new(tree.path()).unwrap());
    let get = |range: &str| {
        replies(server.send_bytes(format!("GET /huge.bin HTTP/1.1\r\nHost: x\r\nRange: bytes={range}\r\n\r\n")))
            .remove(0)
    };
    let tail = get("-5");
    assert_eq!((tail.status, tail.body.as_slice()), (206, &b"\0\0END"[..]));
    assert_eq!(tail.header("content-range"), Some(format!("bytes {}-{}/{size}", size - 5, size - 1).as_str()));
    let sent = get(&format!("{}-", size - 100_000));
    assert_eq!((sent.status, sent.body.len()), (206, 100_000), "by sendfile, from past 4 GiB");
    assert!(sent.body.ends_with(b"\0END"));
}

#[test]
fn a_malformed_chunked_body_after_a_large_file_leaves_the_whole_file_to_arrive() {
    // The handler never reads the body; the server finds it malformed only when it drains it,
    // after the response went out. A byte the client sends after that must not reset the
    // connection while the file is still queued for it.
    let tree = TempDir::new("drain");
    tree.write("big.bin", pattern(1 << 20));
    let server = Running::start(StaticFiles::new(tree.path()).unwrap());
    let mut stream = server.connect();
    stream.write_all(b"GET /big.bin HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").unwrap();
    neverblock::sleep(std::time::Duration::from_millis(20));
    stream.write_all(b"a").unwrap();
    let answer = crate::serving::read_all_bytes(&mut stream);
    let reply = replies(&answer).into_iter().next().expect("an answer");
    assert_eq!((reply.status, reply.header("content-length")), (200, Some("1048576")));
    assert_eq!(reply.body.len(), 1 << 20, "the whole file arrived");
    assert!(reply.body == pattern(1 << 20), "and it is the file");
}

#[test]
fn a_name_longer_than_the_file_system_allows_is_not_found_and_a_path_too_long_to_serve_is_414() {
    crate::logs::capture();
    let site = site();
    let long_name = format!("/{}", "n".repeat(256));
    let reply = site.get(&long_name, "");
    assert_eq!(reply.status, 404, "{}", reply.text());
    let long_path: String = (0..20).map(|i| format!("/{i:02}{}", "p".repeat(240))).collect();
    let reply = site.get(&long_path, "");
    assert_eq!(reply.status, 414, "{}", reply.text());
    assert!(crate::logs::lines_containing(&"n".repeat(256)).is_empty(), "no warning or error names the request");
    assert!(crate::logs::lines_containing(&"p".repeat(240)).is_empty(), "no warning or error names the request");
    assert!(crate::logs::lines_containing("name too long").is_empty(), "no warning or error about the open");
}

#[test]
fn files_then_a_handler_answers_from_the_files_first_and_passes_on_the_rest() {
    let tree = TempDir::new("files-then");
    tree.write("style.css", "body {}");
    let app = |request: &mut neverblock_http::server::Request<'_>| {
        neverblock_http::server::Response::new(200).body(format!("app: {} {}", request.method(), request.path()))
    };
    let server = Running::start(StaticFiles::new(tree.path()).unwrap().then(app));
    let ask = |request: &str| replies(server.send_bytes(request)).into_iter().next().expect("an answer");
    let file = ask("GET /style.css HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_eq!((file.status, file.text().as_str()), (200, "body {}"));
    let missing = ask("GET /users/7 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_eq!(missing.text(), "app: GET /users/7", "no such file: the app answers");
    let post = ask("POST /style.css HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    assert_eq!(post.text(), "app: POST /style.css", "other methods go to the app, not a 405");
    let refused = ask("GET /a/../b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_eq!(refused.status, 400, "the files' refusal is their answer");
}

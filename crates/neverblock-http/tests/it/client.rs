//! The client against loopback servers that answer well, slowly, truncated, malformed, or not at all.

use std::time::Duration;

use neverblock::run;
use neverblock_http::{Client, ErrorKind, Request};

use crate::fixtures::{head_body, Behaviour, TestServer, TlsTestServer};

fn ok_server(body: &str) -> TestServer {
    TestServer::start(Behaviour::fixed(200, &[("Content-Type", "text/plain")], body))
}

#[test]
fn keep_alive_reuses_one_connection_for_sequential_requests() {
    let server = ok_server("hello");
    let url = server.url("/");
    let bodies = run(move || {
        let client = Client::new();
        (0..3).map(|_| client.get(&url).unwrap().into_body()).collect::<Vec<_>>()
    });
    assert_eq!(bodies, vec![b"hello".to_vec(); 3]);
    assert_eq!((server.connections(), server.requests()), (1, 3));
}

#[test]
fn a_chunked_body_is_joined_and_the_connection_reused() {
    let server = TestServer::start(Behaviour::Chunked {
        chunks: vec![b"hello ".to_vec(), b"chunked ".to_vec(), b"world".to_vec()],
    });
    let url = server.url("/");
    let bodies = run(move || {
        let client = Client::new();
        [client.get(&url).unwrap().text().into_owned(), client.get(&url).unwrap().text().into_owned()]
    });
    assert_eq!(bodies, ["hello chunked world", "hello chunked world"]);
    assert_eq!(server.connections(), 1);
}

#[test]
fn head_204_and_304_have_no_body_and_keep_the_connection() {
    let head = TestServer::start(Behaviour::Head);
    let url = head.url("/");
    let (head_len, get_body) = run(move || {
        let client = Client::new();
        let head = client.head(&url).unwrap();
        assert_eq!(head.header("content-length"), Some("1000"));
        (head.body().len(), client.get(&url).unwrap().into_body())
    });
    assert_eq!((head_len, get_body), (0, head_body()));
    assert_eq!(head.connections(), 1, "the GET went over the HEAD's connection");
    for status in [204, 304] {
        let server = TestServer::start(Behaviour::fixed(status, &[], ""));
        let url = server.url("/");
        let statuses = run(move || {
            let client = Client::new();
            [client.get(&url).unwrap().status(), client.get(&url).unwrap().status()]
        });
        assert_eq!(statuses, [status, status]);
        assert_eq!(server.connections(), 1);
    }
}

#[test]
fn interim_responses_are_skipped() {
    let server = TestServer::start(Behaviour::Interim);
    let url = server.url("/upload");
    let response = run(move || Client::new().post(&url, "data").unwrap());
    assert_eq!((response.status(), response.text().into_owned()), (200, "ok".to_owned()));
}

#[test]
fn a_post_sends_its_body_and_headers() {
    let server = TestServer::start(Behaviour::Echo);
    let url = server.url("/echo");
    let body = run(move || {
        let request = Request::new("PUT", url.as_str()).header("X-Test", "1").body("payload");
        Client::new().request(&request).unwrap().text().into_owned()
    });
    assert_eq!(body, "PUT payload");
}

#[test]
fn the_host_field_is_the_urls_host_and_port_without_user_info() {
    let server = TestServer::start(Behaviour::EchoHost);
    let port = server.addr().port();
    let urls = [
        format!("http://127.0.0.1:{port}/"),
        format!("http://localhost:{port}/a/b?c=d"),
        format!("http://user:secret@127.0.0.1:{port}/"),
    ];
    let hosts = run(move || {
        let client = Client::new();
        urls.map(|url| client.get(&url).unwrap().text().into_owned())
    });
    assert_eq!(hosts, [format!("127.0.0.1:{port}"), format!("localhost:{port}"), format!("127.0.0.1:{port}")]);
}

#[test]
fn a_body_cut_short_is_an_error_not_success() {
    let short = TestServer::start(Behaviour::Truncated { declared: 100, sent: 40 });
    let chunked = TestServer::start(Behaviour::TruncatedChunked);
    let (short_url, chunked_url) = (short.url("/"), chunked.url("/"));
    let (e1, e2) = run(move || {
        let client = Client::new();
        (client.get(&short_url).unwrap_err(), client.get(&chunked_url).unwrap_err())
    });
    assert_eq!(e1.kind(), ErrorKind::Truncated, "{e1}");
    assert!(e1.to_string().contains("40 of 100"), "{e1}");
    assert_eq!(e2.kind(), ErrorKind::Truncated, "{e2}");
}

#[test]
fn a_malformed_response_is_reported() {
    let server = TestServer::start(Behaviour::Malformed);
    let url = server.url("/");
    let err = run(move || Client::new().get(&url).unwrap_err());
    assert_eq!(err.kind(), ErrorKind::Malformed, "{err}");
}

#[test]
fn read_and_total_timeouts_are_distinct_errors() {
    let slow = TestServer::start(Behaviour::Slow { delay: Duration::from_millis(300) });
    let stall = TestServer::start(Behaviour::Stall);
    let (slow_url, stall_url) = (slow.url("/"), stall.url("/"));
    let (read, total) = run(move || {
        let reads = Client::builder().read_timeout(Duration::from_millis(50)).build().unwrap();
        let totals = Client::builder().total_timeout(Duration::from_millis(80)).build().unwrap();
        (reads.get(&slow_url).unwrap_err(), totals.get(&stall_url).unwrap_err())
    });
    assert_eq!(read.kind(), ErrorKind::ReadTimeout, "{read}");
    assert_eq!(total.kind(), ErrorKind::TotalTimeout, "{total}");
}

#[test]
fn a_connect_timeout_is_its_own_error() {
    // A listener with a full backlog of 0 that never accepts: further SYNs are dropped.
    let listener = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    listener.bind(&"127.0.0.1:0".parse::<std::net::SocketAddr>().unwrap().into()).unwrap();
    listener.listen(0).unwrap();
    let addr = listener.local_addr().unwrap().as_socket().unwrap();
    let err = run(move || {
        let _fill: Vec<_> = (0..4)
            .filter_map(|_| std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(50)).ok())
            .collect();
        let client = Client::builder().connect_timeout(Duration::from_millis(100)).build().unwrap();
        client.get(&format!("http://{addr}/")).unwrap_err()
    });
    assert_eq!(err.kind(), ErrorKind::ConnectTimeout, "{err}");
}

#[test]
fn refused_and_invalid_urls_are_reported() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (refused, invalid, no_host) = run(move || {
        let client = Client::new();
        (
            client.get(&format!("http://127.0.0.1:{port}/")).unwrap_err().kind(),
            client.get("gopher://example.com/").unwrap_err().kind(),
            client.get("not a url").unwrap_err().kind(),
        )
    });
    assert_eq!((refused, invalid, no_host), (ErrorKind::Refused, ErrorKind::InvalidUrl, ErrorKind::InvalidUrl));
}

#[test]
fn an_idle_connection_the_server_closed_is_not_reused() {
    let server = TestServer::start(Behaviour::CloseAfterFirst);
    let url = server.url("/");
    let bodies = run(move || {
        let client = Client::new();
        let first = client.get(&url).unwrap().into_body();
        neverblock::sleep(Duration::from_millis(20));
        // Not replayable: only the check before sending keeps it off the closed connection.
        [first, client.post(&url, "").unwrap().into_body()]
    });
    assert_eq!(bodies, [b"first".to_vec(), b"first".to_vec()]);
    assert_eq!((server.connections(), server.requests()), (2, 2), "the closed connection was noticed before sending");
}

#[test]
fn a_request_on_a_stale_connection_is_retried_once_when_replayable() {
    let server = TestServer::start(Behaviour::CloseOnSecond);
    let url = server.url("/");
    let (retried, post) = run(move || {
        let client = Client::new();
        client.get(&url).unwrap();
        let retried = client.get(&url).unwrap().into_body();
        let post = client.post(&url, "not replayable").unwrap_err();
        (retried, post)
    });
    assert_eq!(retried, b"first");
    // GET 1; GET 2 on the reused connection (dropped); GET 2 again on a fresh one; the POST on that one.
    assert_eq!((server.connections(), server.requests()), (2, 4));
    assert_eq!(post.kind(), ErrorKind::Reset, "{post}");
    assert!(post.to_string().contains("not replayable"), "{post}");
}

#[test]
fn redirects_are_followed_only_when_asked_and_only_so_far() {
    let server = TestServer::start(Behaviour::Redirect { to: "/next".into(), times: 2 });
    let url = server.url("/start");
    let (unfollowed, followed) = run({
        let url = url.clone();
        move || {
            let plain = Client::new().get(&url).unwrap();
            let following = Client::builder().redirects(5).build().unwrap().get(&url).unwrap();
            (plain, following)
        }
    });
    assert_eq!((unfollowed.status(), unfollowed.header("location")), (302, Some("/next")));
    assert_eq!((followed.status(), followed.text().into_owned()), (200, "done".to_owned()));
    assert!(followed.url().ends_with("/next"), "{}", followed.url());
    let looping = TestServer::start(Behaviour::Redirect { to: "/again".into(), times: usize::MAX });
    let url = looping.url("/");
    let err = run(move || Client::builder().redirects(3).build().unwrap().get(&url).unwrap_err());
    assert_eq!(err.kind(), ErrorKind::TooManyRedirects, "{err}");
}

#[test]
fn the_per_host_cap_bounds_connections_and_idle_ones_expire() {
    let server = ok_server("x");
    let url = server.url("/");
    run(move || {
        let client =
            Client::builder().max_connections_per_host(2).idle_timeout(Duration::from_millis(50)).build().unwrap();
        let fibers: Vec<_> = (0..20)
            .map(|_| {
                let (client, url) = (client.clone(), url.clone());
                neverblock::spawn(move || client.get(&url).unwrap().status())
            })
            .collect();
        assert!(fibers.into_iter().all(|f| f.join().unwrap() == 200));
        assert!(server.connections() <= 2, "{} connections", server.connections());
        let before = server.connections();
        neverblock::sleep(Duration::from_millis(100));
        client.get(&url).unwrap();
        assert_eq!(server.connections(), before + 1, "the expired idle connection was not reused");
    });
}

#[test]
fn each_origin_has_its_own_cap_and_its_own_idle_connections() {
    let server = TestServer::start(Behaviour::Slow { delay: Duration::from_millis(50) });
    let port = server.addr().port();
    // Two origins on one server: the same address under two host names.
    let origins = [format!("http://127.0.0.1:{port}/"), format!("http://localhost:{port}/")];
    run(move || {
        let client = Client::builder().max_connections_per_host(1).build().unwrap();
        let fibers: Vec<_> = (0..8)
            .map(|i| {
                let (client, url) = (client.clone(), origins[i % 2].clone());
                neverblock::spawn(move || client.get(&url).unwrap().status())
            })
            .collect();
        assert!(fibers.into_iter().all(|f| f.join().unwrap() == 200));
        assert_eq!(server.max_in_flight(), 2, "one request at a time per origin, both origins at once");
        assert_eq!(server.connections(), 2, "each origin reused its one connection");
        for url in origins.iter().chain(&origins) {
            client.get(url).unwrap();
        }
        assert_eq!((server.connections(), server.requests()), (2, 12), "alternating origins reused both");
    });
}

#[test]
fn https_works_over_the_fiber_aware_stream_and_checks_the_certificate() {
    let server = TlsTestServer::start(Behaviour::Chunked { chunks: vec![b"secure ".to_vec(), b"hello".to_vec()] });
    let (url, ca) = (server.url("/"), server.ca_certificate_der());
    let (body, untrusted) = run(move || {
        let trusting = Client::builder().add_root_certificate(ca).build().unwrap();
        let body = [trusting.get(&url).unwrap().into_body(), trusting.get(&url).unwrap().into_body()];
        (body, Client::new().get(&url).unwrap_err())
    });
    assert_eq!(body, [b"secure hello".to_vec(), b"secure hello".to_vec()]);
    assert_eq!(untrusted.kind(), ErrorKind::Tls, "{untrusted}");
    assert_eq!(server.connections(), 2, "one kept-alive TLS connection, one refused handshake");
}

#[test]
fn outside_a_runtime_the_client_blocks_the_thread() {
    let server = ok_server("plain");
    let response = Client::new().get(&server.url("/")).unwrap();
    assert_eq!((response.status(), response.body()), (200, &b"plain"[..]));
}

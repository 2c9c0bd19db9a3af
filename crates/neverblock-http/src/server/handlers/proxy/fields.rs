//! Which header fields cross the proxy, and the ones it adds: hop-by-hop fields stay on their hop
//! (RFC 9110 §7.6.1: `Connection`, the fields it names, `Keep-Alive`, `Proxy-Connection`, `TE`,
//! `Transfer-Encoding`, `Upgrade`, and, as Go's and nginx's proxies do, `Proxy-Authenticate`,
//! `Proxy-Authorization` and `Trailer`); the framing is the proxy's own on each side; and the
//! request gains `Forwarded`, `X-Forwarded-For`, `X-Forwarded-Proto`, `X-Forwarded-Host` and `Via`.

use std::net::{IpAddr, SocketAddr};

/// Fields that belong to one hop, whatever `Connection` says.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Request fields the proxy answers itself rather than passing on: the body's length is framed
/// anew, `Expect: 100-continue` was answered by the server, and `Host` is the upstream's.
const REQUEST_OWN: [&str; 3] = ["content-length", "expect", "host"];

/// Fields the proxy sets on the request itself; the client's own are replaced (`Forwarded` and
/// `X-Forwarded-For` are extended instead).
const FORWARDING: [&str; 4] = ["forwarded", "x-forwarded-for", "x-forwarded-proto", "x-forwarded-host"];

/// The `Connection` field's options, in lower case: the names of more fields to drop.
fn connection_options<'a>(fields: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> Vec<String> {
    fields
        .into_iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case("connection"))
        .flat_map(|(_, value)| value.split(|&b| b == b','))
        .filter_map(|option| std::str::from_utf8(option).ok())
        .map(|option| option.trim().to_ascii_lowercase())
        .filter(|option| !option.is_empty())
        .collect()
}

/// Whether `name` is hop-by-hop, given the message's `Connection` options.
fn is_hop_by_hop(name: &str, options: &[String]) -> bool {
    HOP_BY_HOP.iter().any(|h| name.eq_ignore_ascii_case(h)) || options.iter().any(|o| name.eq_ignore_ascii_case(o))
}

/// Where a request came from, for the fields that say so.
#[derive(Clone, Copy, Debug)]
pub(super) struct Origin<'a> {
    pub(super) peer: SocketAddr,
    /// The client's `Host`, if it sent one.
    pub(super) host: Option<&'a str>,
    /// The scheme it came over: `http`, or `https` on a TLS connection.
    pub(super) proto: &'static str,
}

/// The fields to send upstream for a request that came with `fields`: its end-to-end fields as
/// text (a value that is not UTF-8 is left out, with its name returned in the second list), then
/// the forwarding fields.
pub(super) fn upstream_request(fields: &[(&str, &[u8])], from: Origin<'_>) -> (Vec<(String, String)>, Vec<String>) {
    let options = connection_options(fields.iter().copied());
    // The fields passed on, and the five at most the proxy adds.
    let (mut out, mut dropped) = (Vec::with_capacity(fields.len() + 5), Vec::new());
    let (mut forwarded, mut forwarded_for) = (Vec::new(), Vec::new());
    for &(name, value) in fields {
        let own = REQUEST_OWN.iter().chain(&FORWARDING).any(|n| name.eq_ignore_ascii_case(n));
        let Ok(value) = std::str::from_utf8(value) else {
            dropped.push(name.to_owned());
            continue;
        };
        if name.eq_ignore_ascii_case("forwarded") {
            forwarded.push(value);
        } else if name.eq_ignore_ascii_case("x-forwarded-for") {
            forwarded_for.push(value);
        } else if !own && !is_hop_by_hop(name, &options) {
            out.push((name.to_owned(), value.to_owned()));
        }
    }
    let ip = from.peer.ip();
    let address = address_text(ip);
    let mut element = String::with_capacity(64);
    element.push_str("for=");
    push_forwarded_node(&mut element, ip, &address);
    if let Some(host) = from.host {
        element.push_str(";host=");
        push_quoted_if_needed(&mut element, host);
    }
    element.push_str(";proto=");
    element.push_str(from.proto);
    out.push(("Forwarded".to_owned(), join_with(&forwarded, element)));
    out.push(("X-Forwarded-For".to_owned(), join_with(&forwarded_for, address)));
    out.push(("X-Forwarded-Proto".to_owned(), from.proto.to_owned()));
    if let Some(host) = from.host {
        out.push(("X-Forwarded-Host".to_owned(), host.to_owned()));
    }
    out.push(("Via".to_owned(), "1.1 neverblock".to_owned()));
    (out, dropped)
}

/// The values of a list field, then `last` (which is all of it when there are none: the usual case,
/// a request from a client rather than from another proxy).
fn join_with(values: &[&str], last: String) -> String {
    let mut joined: Vec<&str> = values.iter().map(|v| v.trim()).filter(|v| !v.is_empty()).collect();
    if joined.is_empty() {
        return last;
    }
    joined.push(&last);
    joined.join(", ")
}

/// `ip` as text, as its `Display` writes it; an IPv4 address, the usual case, written digit by
/// digit rather than through the formatting machinery, as it is made for every proxied request.
fn address_text(ip: IpAddr) -> String {
    let IpAddr::V4(v4) = ip else { return ip.to_string() };
    let mut text = String::with_capacity(15);
    for (i, octet) in v4.octets().into_iter().enumerate() {
        if i > 0 {
            text.push('.');
        }
        if octet >= 100 {
            text.push(char::from(b'0' + octet / 100));
        }
        if octet >= 10 {
            text.push(char::from(b'0' + octet / 10 % 10));
        }
        text.push(char::from(b'0' + octet % 10));
    }
    text
}

/// Appends the `Forwarded` node for `ip`, whose text is `address` (RFC 7239 §6): an IPv4 address
/// as it is (an IPv4-mapped IPv6 one too), any other IPv6 address in brackets, quoted.
fn push_forwarded_node(out: &mut String, ip: IpAddr, address: &str) {
    match ip {
        IpAddr::V4(_) => out.push_str(address),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => out.push_str(&address_text(IpAddr::V4(v4))),
            None => {
                out.push_str("\"[");
                out.push_str(address);
                out.push_str("]\"");
            }
        },
    }
}

/// Appends `value` as a `Forwarded` parameter value: a token as it is, anything else quoted.
fn push_quoted_if_needed(out: &mut String, value: &str) {
    let token =
        !value.is_empty() && value.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if token {
        return out.push_str(value);
    }
    out.push('"');
    for c in value.chars() {
        if matches!(c, '\\' | '"') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}

/// The upstream response's fields to pass to the client, moved out of `fields`: all but the
/// hop-by-hop ones and its framing (`Content-Length` is kept for a HEAD, whose empty body it does
/// not describe), and any whose value is not UTF-8.
pub(super) fn downstream_response(
    fields: Vec<(String, Vec<u8>)>,
    head_request: bool,
) -> impl Iterator<Item = (String, String)> {
    let options = connection_options(fields.iter().map(|(name, value)| (name.as_str(), value.as_slice())));
    fields
        .into_iter()
        .filter(move |(name, _)| !is_hop_by_hop(name, &options))
        .filter(move |(name, _)| head_request || !name.eq_ignore_ascii_case("content-length"))
        .filter_map(|(name, value)| Some((name, String::from_utf8(value).ok()?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(fields: &[(String, String)]) -> Vec<&str> {
        fields.iter().map(|(n, _)| n.as_str()).collect()
    }

    fn value<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
        fields.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    #[test]
    fn an_address_reads_as_its_display_writes_it() {
        for ip in
            ["0.0.0.0", "127.0.0.1", "10.9.99.100", "192.168.1.255", "255.255.255.255", "2001:db8::1", "::ffff:1.2.3.4"]
        {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(address_text(ip), ip.to_string());
        }
    }

    #[test]
    fn hop_by_hop_fields_and_those_connection_names_stay_behind() {
        let sent: Vec<(&str, &[u8])> = vec![
            ("Host", b"example.org"),
            ("Connection", b"keep-alive, X-Secret"),
            ("X-Secret", b"for the proxy"),
            ("Keep-Alive", b"timeout=5"),
            ("TE", b"trailers"),
            ("Transfer-Encoding", b"chunked"),
            ("Upgrade", b"websocket"),
            ("Proxy-Authorization", b"Basic eA=="),
            ("Content-Length", b"5"),
            ("Expect", b"100-continue"),
            ("Accept", b"*/*"),
            ("Cookie", b"a=1"),
        ];
        let from = Origin { peer: "192.0.2.7:5000".parse().unwrap(), host: Some("example.org"), proto: "http" };
        let (fields, dropped) = upstream_request(&sent, from);
        assert!(dropped.is_empty());
        assert_eq!(
            names(&fields),
            ["Accept", "Cookie", "Forwarded", "X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "Via"]
        );
        assert_eq!(value(&fields, "forwarded"), Some("for=192.0.2.7;host=example.org;proto=http"));
        assert_eq!(value(&fields, "x-forwarded-for"), Some("192.0.2.7"));
        assert_eq!(value(&fields, "x-forwarded-host"), Some("example.org"));
    }

    #[test]
    fn forwarding_fields_extend_what_earlier_proxies_said() {
        let sent: Vec<(&str, &[u8])> = vec![
            ("Forwarded", b"for=198.51.100.1"),
            ("X-Forwarded-For", b"198.51.100.1"),
            ("X-Forwarded-For", b"203.0.113.9"),
            ("X-Forwarded-Proto", b"https"),
            ("X-Odd", b"caf\xe9"),
        ];
        let from = Origin { peer: "[2001:db8::1]:443".parse().unwrap(), host: Some("[::1]:8080"), proto: "https" };
        let (fields, dropped) = upstream_request(&sent, from);
        assert_eq!(dropped, ["X-Odd"]);
        assert_eq!(
            value(&fields, "forwarded"),
            Some("for=198.51.100.1, for=\"[2001:db8::1]\";host=\"[::1]:8080\";proto=https")
        );
        assert_eq!(value(&fields, "x-forwarded-for"), Some("198.51.100.1, 203.0.113.9, 2001:db8::1"));
        assert_eq!(value(&fields, "x-forwarded-proto"), Some("https"), "this hop's scheme, TLS here");
        assert_eq!(fields.iter().filter(|(n, _)| n == "X-Forwarded-Proto").count(), 1);
    }

    #[test]
    fn responses_lose_hop_by_hop_fields_and_framing() {
        let got: Vec<(&str, &[u8])> = vec![
            ("Connection", b"X-Hop"),
            ("X-Hop", b"1"),
            ("Keep-Alive", b"timeout=5"),
            ("Proxy-Authenticate", b"Basic"),
            ("Content-Length", b"4"),
            ("Transfer-Encoding", b"chunked"),
            ("Set-Cookie", b"a=1"),
            ("Content-Type", b"text/plain"),
            ("X-Odd", b"caf\xe9"),
        ];
        let passed = |head_request| {
            let owned = got.iter().map(|&(name, value)| (name.to_owned(), value.to_vec())).collect();
            downstream_response(owned, head_request).collect::<Vec<_>>()
        };
        assert_eq!(names(&passed(false)), ["Set-Cookie", "Content-Type"], "X-Odd is not text");
        assert_eq!(value(&passed(false), "content-type"), Some("text/plain"));
        assert_eq!(
            names(&passed(true)),
            ["Content-Length", "Set-Cookie", "Content-Type"],
            "a HEAD keeps the length of what a GET would get"
        );
    }
}

//! Which header fields cross the proxy, and the ones it adds: hop-by-hop fields stay on their hop
//! (RFC 9110 §7.6.1: `Connection`, the fields it names, `Keep-Alive`, `Proxy-Connection`, `TE`,
//! `Transfer-Encoding`, `Upgrade`, and, as Go's and nginx's proxies do, `Proxy-Authenticate`,
//! `Proxy-Authorization` and `Trailer`); the framing is the proxy's own on each side; and the
//! request gains `Forwarded`, `X-Forwarded-For`, `X-Forwarded-Proto`, `X-Forwarded-Host` and `Via`.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::ops::Range;

use crate::wire::chunked::is_token_char;
use crate::wire::{every_byte, is_named};

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

/// Fields the proxy sets on the request itself, the client's own replaced: `X-Forwarded-Proto`,
/// `X-Forwarded-Host`; and the lists it extends ([`EXTENDED`]).
const FORWARDING: [&str; 2] = ["x-forwarded-proto", "x-forwarded-host"];

/// The lists the proxy extends with this hop: the client's values (from earlier proxies), then its
/// own.
const EXTENDED: [&str; 2] = ["forwarded", "x-forwarded-for"];

/// The `Connection` fields' options, in lower case: the names of more fields to drop.
fn connection_options<'a>(fields: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> Vec<String> {
    fields.into_iter().filter(|(name, _)| is_connection(name)).flat_map(|(_, value)| options_of(value)).collect()
}

/// Whether `name` is `Connection`, in any case.
fn is_connection(name: &str) -> bool {
    is_named(name.as_bytes(), b"connection")
}

/// The options one `Connection` field's `value` lists, in lower case.
fn options_of(value: &[u8]) -> impl Iterator<Item = String> + '_ {
    value
        .split(|&b| b == b',')
        .filter_map(|option| std::str::from_utf8(option).ok())
        .map(|option| option.trim().to_ascii_lowercase())
        .filter(|option| !option.is_empty())
}

/// Whether `name` is one of `list` (lowercase names), in any case.
fn is_one_of(name: &str, list: &[&str]) -> bool {
    list.iter().any(|listed| is_named(name.as_bytes(), listed.as_bytes()))
}

/// Whether `name` is hop-by-hop, given the message's `Connection` options.
fn is_hop_by_hop(name: &str, options: &[String]) -> bool {
    is_one_of(name, &HOP_BY_HOP) || options.iter().any(|o| name.eq_ignore_ascii_case(o))
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

/// The `Forwarded` and `X-Forwarded-For` values a request goes upstream with: the lists earlier
/// proxies made, when it came through any, then this hop's element. Both are made in one string,
/// as the fields the proxy sends borrow them.
pub(super) struct Forwarding {
    text: String,
    forwarded: Range<usize>,
    forwarded_for: Range<usize>,
}

impl Forwarding {
    /// The values for a request that came with `fields`, from `from` (values that are not UTF-8
    /// are left out: [`upstream_request`] names them).
    pub(super) fn of<'a>(
        fields: impl IntoIterator<Item = (&'a str, &'a [u8])> + Clone,
        from: Origin<'_>,
    ) -> Forwarding {
        let mut text = String::with_capacity(96);
        let [forwarded, forwarded_for] = EXTENDED;
        let earlier = |list: &'static str| {
            let named = move |&(name, _): &(&str, &[u8])| is_named(name.as_bytes(), list.as_bytes());
            fields.clone().into_iter().filter(named).filter_map(|(_, value)| std::str::from_utf8(value).ok())
        };
        push_list(&mut text, earlier(forwarded));
        let ip = from.peer.ip();
        text.push_str("for=");
        let node_start = text.len();
        push_forwarded_node(&mut text, ip);
        let node = node_start..text.len();
        if let Some(host) = from.host {
            text.push_str(";host=");
            push_quoted_if_needed(&mut text, host);
        }
        text.push_str(";proto=");
        text.push_str(from.proto);
        let forwarded = 0..text.len();
        let start = text.len();
        push_list(&mut text, earlier(forwarded_for));
        let forwarded_for = if text.len() == start && ip.is_ipv4() {
            // No earlier list, the usual case: the address is the node's text already.
            node
        } else {
            push_address(&mut text, ip);
            start..text.len()
        };
        Forwarding { text, forwarded, forwarded_for }
    }

    fn forwarded(&self) -> &str {
        &self.text[self.forwarded.clone()]
    }

    fn forwarded_for(&self) -> &str {
        &self.text[self.forwarded_for.clone()]
    }
}

/// Appends a list field's `values`, each followed by `, ` (none when there are none: the usual
/// case, a request from a client rather than from another proxy).
fn push_list<'a>(out: &mut String, values: impl Iterator<Item = &'a str>) {
    for value in values.map(str::trim).filter(|v| !v.is_empty()) {
        out.push_str(value);
        out.push_str(", ");
    }
}

/// The fields to send upstream for a request that came with `fields`: its end-to-end fields (a
/// value that is not UTF-8 is left out, with its name returned in the second list), then the
/// forwarding fields, with the values `forwarding` made.
pub(super) fn upstream_request<'a>(
    fields: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    from: Origin<'a>,
    forwarding: &'a Forwarding,
) -> (Vec<(&'a str, &'a str)>, Vec<&'a str>) {
    let (mut out, mut dropped, mut options) = (Vec::with_capacity(16), Vec::new(), Vec::new());
    for (name, value) in fields {
        if is_connection(name) {
            options.extend(options_of(value));
            continue;
        }
        // The lists `forwarding` extended already, the proxy's own fields, and this hop's.
        let extended = is_one_of(name, &EXTENDED);
        if extended || is_one_of(name, &REQUEST_OWN) || is_one_of(name, &FORWARDING) || is_one_of(name, &HOP_BY_HOP) {
            // A list's value that is not text was left out of it: named with the others.
            if extended && std::str::from_utf8(value).is_err() {
                dropped.push(name);
            }
            continue;
        }
        match std::str::from_utf8(value) {
            Ok(value) => out.push((name, value)),
            Err(_) => dropped.push(name),
        }
    }
    // The fields `Connection` names (rarely any) stay behind too, found once all are seen.
    if !options.is_empty() {
        let named = |name: &str| options.iter().any(|option| name.eq_ignore_ascii_case(option));
        out.retain(|&(name, _)| !named(name));
        dropped.retain(|&name| !named(name));
    }
    out.push(("Forwarded", forwarding.forwarded()));
    out.push(("X-Forwarded-For", forwarding.forwarded_for()));
    out.push(("X-Forwarded-Proto", from.proto));
    if let Some(host) = from.host {
        out.push(("X-Forwarded-Host", host));
    }
    out.push(("Via", "1.1 neverblock"));
    (out, dropped)
}

/// Appends `ip` as its `Display` writes it; an IPv4 address, the usual case, digit by digit rather
/// than through the formatting machinery, as it is written for every proxied request.
fn push_address(out: &mut String, ip: IpAddr) {
    let IpAddr::V4(v4) = ip else {
        // Writing to a String does not fail.
        let _ = write!(out, "{ip}");
        return;
    };
    for (i, octet) in v4.octets().into_iter().enumerate() {
        if i > 0 {
            out.push('.');
        }
        if octet >= 100 {
            out.push(char::from(b'0' + octet / 100));
        }
        if octet >= 10 {
            out.push(char::from(b'0' + octet / 10 % 10));
        }
        out.push(char::from(b'0' + octet % 10));
    }
}

/// Appends the `Forwarded` node for `ip` (RFC 7239 §6): an IPv4 address as it is (an IPv4-mapped
/// IPv6 one too), any other IPv6 address in brackets, quoted.
fn push_forwarded_node(out: &mut String, ip: IpAddr) {
    match ip {
        IpAddr::V4(_) => push_address(out, ip),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => push_address(out, IpAddr::V4(v4)),
            None => {
                out.push_str("\"[");
                push_address(out, ip);
                out.push_str("]\"");
            }
        },
    }
}

/// Appends `value` as a `Forwarded` parameter value: a token as it is, anything else quoted.
fn push_quoted_if_needed(out: &mut String, value: &str) {
    if !value.is_empty() && every_byte(value.as_bytes(), is_token_char) {
        return out.push_str(value);
    }
    out.push('"');
    let mut rest = value;
    while let Some(at) = rest.bytes().position(|b| b == b'\\' || b == b'"') {
        out.push_str(&rest[..at]);
        out.push('\\');
        out.push_str(&rest[at..=at]);
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
    out.push('"');
}

/// The upstream response's `fields` to pass to the client: all but the hop-by-hop ones and its
/// framing (`Content-Length` is kept for a HEAD, whose empty body it does not describe), and any
/// whose value is not UTF-8.
pub(super) fn downstream_response<'a>(
    fields: impl Iterator<Item = (&'a str, &'a [u8])> + Clone,
    head_request: bool,
) -> impl Iterator<Item = (&'a str, &'a str)> {
    let options = connection_options(fields.clone());
    fields
        .filter(move |(name, _)| !is_hop_by_hop(name, &options))
        .filter(move |(name, _)| head_request || !is_named(name.as_bytes(), b"content-length"))
        .filter_map(|(name, value)| Some((name, std::str::from_utf8(value).ok()?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names<'a>(fields: &[(&'a str, &str)]) -> Vec<&'a str> {
        fields.iter().map(|&(n, _)| n).collect()
    }

    fn value<'a>(fields: &[(&str, &'a str)], name: &str) -> Option<&'a str> {
        fields.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|&(_, v)| v)
    }

    /// The fields sent upstream for a request with `sent` from `from`, and the names left out.
    fn upstream(sent: &[(&str, &[u8])], from: Origin<'_>) -> (Vec<(String, String)>, Vec<String>) {
        let forwarding = Forwarding::of(sent.iter().copied(), from);
        let (fields, dropped) = upstream_request(sent.iter().copied(), from, &forwarding);
        let owned = |text: &str| text.to_owned();
        (fields.into_iter().map(|(n, v)| (owned(n), owned(v))).collect(), dropped.into_iter().map(owned).collect())
    }

    fn borrowed(fields: &[(String, String)]) -> Vec<(&str, &str)> {
        fields.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect()
    }

    #[test]
    fn an_address_reads_as_its_display_writes_it() {
        for ip in
            ["0.0.0.0", "127.0.0.1", "10.9.99.100", "192.168.1.255", "255.255.255.255", "2001:db8::1", "::ffff:1.2.3.4"]
        {
            let ip: IpAddr = ip.parse().unwrap();
            let mut text = String::new();
            push_address(&mut text, ip);
            assert_eq!(text, ip.to_string());
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
        let (fields, dropped) = upstream(&sent, from);
        let fields = borrowed(&fields);
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
        let (fields, dropped) = upstream(&sent, from);
        let fields = borrowed(&fields);
        assert_eq!(dropped, ["X-Odd"]);
        assert_eq!(
            value(&fields, "forwarded"),
            Some("for=198.51.100.1, for=\"[2001:db8::1]\";host=\"[::1]:8080\";proto=https")
        );
        assert_eq!(value(&fields, "x-forwarded-for"), Some("198.51.100.1, 203.0.113.9, 2001:db8::1"));
        assert_eq!(value(&fields, "x-forwarded-proto"), Some("https"), "this hop's scheme, TLS here");
        assert_eq!(fields.iter().filter(|(n, _)| *n == "X-Forwarded-Proto").count(), 1);
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
        let passed = |head_request| downstream_response(got.iter().copied(), head_request).collect::<Vec<_>>();
        assert_eq!(names(&passed(false)), ["Set-Cookie", "Content-Type"], "X-Odd is not text");
        assert_eq!(value(&passed(false), "content-type"), Some("text/plain"));
        assert_eq!(
            names(&passed(true)),
            ["Content-Length", "Set-Cookie", "Content-Type"],
            "a HEAD keeps the length of what a GET would get"
        );
    }
}

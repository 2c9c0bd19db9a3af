//! One small function per `%` directive, as in Apache's mod_log_config: each appends its value to
//! the line (escaped where Apache escapes it) and returns whether it had one; the caller writes
//! `-` for a value that is absent.

use std::io::Write;

use percent_encoding::percent_decode_str;

use super::clock;
use super::escape::escape_into;
use crate::server::Exchange;

/// What a directive is given: the exchange, the server's name, and its `{...}` argument.
pub(super) struct Line<'a> {
    pub(super) exchange: &'a Exchange<'a>,
    pub(super) server_name: &'a str,
}

/// A directive's function.
pub(super) type Directive = fn(&Line<'_>, &str, &mut Vec<u8>) -> bool;

/// The function of directive `letter`, if it is one this log knows.
pub(super) fn lookup(letter: char) -> Option<Directive> {
    Some(match letter {
        'h' | 'a' => remote_address,
        'A' => local_address,
        'l' => remote_logname,
        'u' => remote_user,
        't' => request_time,
        'r' => request_line,
        'm' => request_method,
        'U' => request_uri,
        'q' => request_query,
        'H' => request_protocol,
        's' => status,
        'b' => clf_bytes_sent,
        'B' => bytes_sent,
        'D' => duration_microseconds,
        'T' => duration_scaled,
        'v' => virtual_host,
        'V' => server_name,
        'p' => server_port,
        'P' => process_id,
        'i' => header_in,
        'o' => header_out,
        'x' => tls_variable,
        _ => return None,
    })
}

/// Why directive `letter` cannot take `arg`, checked once when the format is compiled (Apache
/// would print the argument instead, on every line).
pub(super) fn check_arg(letter: char, arg: &str) -> Result<(), String> {
    let fine = match letter {
        't' => match clock::parse_arg(arg).1 {
            clock::Shape::Strftime(pattern) => clock::is_valid_strftime(pattern),
            _ => true,
        },
        'T' => matches!(arg.to_ascii_lowercase().as_str(), "" | "s" | "ms" | "us"),
        'p' => matches!(arg.to_ascii_lowercase().as_str(), "" | "canonical" | "local" | "remote"),
        'P' => matches!(arg.to_ascii_lowercase().as_str(), "" | "pid"),
        'i' | 'o' => !arg.is_empty(),
        'x' => TLS_VARIABLES.contains(&arg),
        _ => true,
    };
    match fine {
        true => Ok(()),
        false => Err(format!("%{{{arg}}}{letter} is not a format this log knows")),
    }
}

/// The mod_ssl variables `%{...}x` shows.
const TLS_VARIABLES: [&str; 2] = ["SSL_PROTOCOL", "SSL_CIPHER"];

/// `%{SSL_PROTOCOL}x`, `%{SSL_CIPHER}x` (mod_ssl's): the connection's TLS version (`TLSv1.3`)
/// and cipher suite (OpenSSL's name); absent in cleartext.
fn tls_variable(line: &Line<'_>, arg: &str, out: &mut Vec<u8>) -> bool {
    let Some(tls) = line.exchange.tls() else { return false };
    let value = if arg == "SSL_PROTOCOL" { tls.protocol() } else { tls.cipher() };
    out.extend_from_slice(value.as_bytes());
    true
}

/// `%h`, `%a`: the client's address (no host name lookups).
fn remote_address(line: &Line<'_>, _: &str, out: &mut Vec<u8>) -> bool {
    number(out, line.exchange.peer_addr().ip())
}

/// `%A`: the address the client connected to.
fn local_address(line: &Line<'_>, _: &str, out: &mut Vec<u8>) -> bool {
    number(out, line.exchange.local_addr().ip())
}

/// `%l`: the remote log name (identd), never looked up.
fn remote_logname(_: &Line<'_>, _: &str, _: &mut Vec<u8>) -> bool {
    false
}

/// `%u`: the authenticated user; the server authenticates no one.
fn remote_user(_: &Line<'_>, _: &str, _: &mut Vec<u8>) -> bool {
    false
}

/// `%t`, `%{format}t`: when the request arrived (or, with `end`, when its response ended).
fn request_time(line: &Line<'_>, arg: &str, out: &mut Vec<u8>) -> bool {
    let (end, shape) = clock::parse_arg(arg);
    let x = line.exchange;
    let at = if end { x.started() + x.duration() } else { x.started() };
    clock::write_shaped(at, shape, out)
}

/// `%r`: the request line as received.
fn request_line(line: &Line<'_>, _: &str, out: &mut Vec<u8>) -> bool {
    escaped(out, line.exchange.request_line())
}

/// `%m`: the method.
fn request_method(line: &Line<'_>, _: &str, out: &mut Vec<u8>) -> bool {
    escaped(out, word(line, 0))
}

/// `%U`: the path asked for, percent-decoded with its `.` and `..` segments and repeated slashes
/// resolved, as Apache's `r->uri` (a refused request's, as sent).
fn request_uri(line: &Line<'_>, _: &str, out: &mut Vec<u8>) -> bool {
    let x = line.exchange;
    if x.version().is_none() {
        return escaped(out, word(line, 1).map(|target| target.split(|&b| b == b'?').next().unwrap_or_default()));
    }
    escaped(out, Some(&normalized_path(x.path())))
}

/// `%q`: `?` and the query, or nothing without one.
fn request_query(line: &Line<'_>, _: &str, out: &mut Vec<u8>) -> bool {
    let x = line.exchange;
    let query = match x.version() {
        Some(_) => x.query().map(str::as_bytes),
        None => word(line, 1).and_then(|t| t.iter().position(|&b| b == b'?').map(|at| &t[at + 1..])),
    };
    if let Some(query) = query {
        out.push(b'?');
        escape_into(query, out);
    }
    true
}

/// `%H`: the protocol, `HTTP/1.1`.
fn request_protocol(line: &Line<'_>, _: &str, out: &mut Vec<u8>) -> bool {
    match line.exchange.version() {
        Some(version) => number(out, version),
        None => escaped(out, word(line, 2)),
    }
}

/// `%s`, `%>s`: the status sent.
fn status(line: &Line<'_>, _: &str, out: &mut Vec<u8>) -> bool {
    number(out, line.exchange.status())
}

/// `%b`: body bytes sent, `-` for none.
fn clf_bytes_sent(line: &Line<'_>, _: &str, out: &mut Vec<u8>) -> bool {
    let n = line.exchange.body_bytes();
    n > 0 && number(out, n)
}

/// `%B`: body bytes sent.
fn bytes_sent(line: &Line<'_>, _: &str, out: &mut Vec<u8>) -> bool {
    number(out, line.exchange.body_bytes())
}

/// `%D`: microseconds from the request's arrival to its response's end.
fn duration_microseconds(line: &Line<'_>, _: &str, out: &mut Vec<u8>) -> bool {
    number(out, line.exchange.duration().as_micros())
}

/// `%T`, `%{s|ms|us}T`: the same in whole seconds, or in the unit asked for.
fn duration_scaled(line: &Line<'_>, arg: &str, out: &mut Vec<u8>) -> bool {
    let d = line.exchange.duration();
    match arg.to_ascii_lowercase().as_str() {
        "ms" => number(out, d.as_millis()),
        "us" => number(out, d.as_micros()),
        _ => number(out, d.as_secs()),
    }
}

/// `%v`: the server's name.
fn virtual_host(line: &Line<'_>, _: &str, out: &mut Vec<u8>) -> bool {
    escaped(out, Some(line.server_name.as_bytes()))
}

/// `%V`: the host the client asked for (`Host` without its port, in lower case), else the
/// server's name (Apache's `UseCanonicalName Off`).
fn server_name(line: &Line<'_>, _: &str, out: &mut Vec<u8>) -> bool {
    let host = line.exchange.header("host").map(host_name).filter(|h| !h.is_empty());
    match host {
        Some(host) => escaped(out, Some(host.to_ascii_lowercase().as_bytes())),
        None => virtual_host(line, "", out),
    }
}

/// `%p`, `%{canonical|local|remote}p`: the server's port, or the client's.
fn server_port(line: &Line<'_>, arg: &str, out: &mut Vec<u8>) -> bool {
    let x = line.exchange;
    match arg.eq_ignore_ascii_case("remote") {
        true => number(out, x.peer_addr().port()),
        false => number(out, x.local_addr().port()),
    }
}

/// `%P`: the server's process id.
fn process_id(_: &Line<'_>, _: &str, out: &mut Vec<u8>) -> bool {
    number(out, std::process::id())
}

/// `%{Name}i`: a request field; several of one name joined with `, ` (Apache merges them).
fn header_in(line: &Line<'_>, name: &str, out: &mut Vec<u8>) -> bool {
    let mut values = line.exchange.headers().filter(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v);
    let Some(first) = values.next() else { return false };
    escape_into(first, out);
    for value in values {
        out.extend_from_slice(b", ");
        escape_into(value, out);
    }
    true
}

/// `%{Name}o`: a response field: `Content-Type` without its parameters, every `Set-Cookie`
/// joined with `, `, the first of any other.
fn header_out(line: &Line<'_>, name: &str, out: &mut Vec<u8>) -> bool {
    let x = line.exchange;
    if name.eq_ignore_ascii_case("set-cookie") {
        let mut values = x.response_headers().filter(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v);
        let Some(first) = values.next() else { return false };
        escape_into(first.as_bytes(), out);
        for value in values {
            out.extend_from_slice(b", ");
            escape_into(value.as_bytes(), out);
        }
        return true;
    }
    let value = x.response_header(name);
    let value = match name.eq_ignore_ascii_case("content-type") {
        true => value.map(|v| v.split(';').next().unwrap_or_default().trim_end()),
        false => value,
    };
    escaped(out, value.map(str::as_bytes))
}

/// Appends `value`, escaped, if there is one.
fn escaped(out: &mut Vec<u8>, value: Option<&[u8]>) -> bool {
    value.map(|v| escape_into(v, out)).is_some()
}

fn number(out: &mut Vec<u8>, value: impl std::fmt::Display) -> bool {
    // Writing to a Vec cannot fail.
    let _ = write!(out, "{value}");
    true
}

/// Word `n` of the request line (method, target, protocol) of a request refused before its head
/// was parsed; the parsed method otherwise.
fn word<'a>(line: &Line<'a>, n: usize) -> Option<&'a [u8]> {
    let x = line.exchange;
    if n == 0 && x.version().is_some() {
        return Some(x.method().as_bytes());
    }
    x.request_line()?.split(|&b| b == b' ').filter(|w| !w.is_empty()).nth(n)
}

/// The host of a `Host` value: without its port, an IPv6 literal with its brackets.
fn host_name(host: &str) -> &str {
    match host.strip_prefix('[') {
        Some(rest) => rest.find(']').map_or(host, |end| &host[..end + 2]),
        None => host.split(':').next().unwrap_or_default(),
    }
}

/// A request path as Apache's `r->uri`: decoded, `.` and `..` segments resolved, slashes merged;
/// `*` as it is, and `/` for an absolute URL without a path.
fn normalized_path(raw: &str) -> Vec<u8> {
    if raw == "*" {
        return b"*".to_vec();
    }
    let decoded: Vec<u8> = percent_decode_str(raw).collect();
    let mut segments: Vec<&[u8]> = Vec::new();
    let mut trailing = true;
    for segment in decoded.split(|&b| b == b'/') {
        trailing = matches!(segment, b"" | b"." | b"..");
        match segment {
            b"" | b"." => {}
            b".." => {
                segments.pop();
            }
            segment => segments.push(segment),
        }
    }
    let mut path = Vec::with_capacity(decoded.len() + 1);
    for segment in &segments {
        path.push(b'/');
        path.extend_from_slice(segment);
    }
    if trailing || segments.is_empty() {
        path.push(b'/');
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_logged_as_apache_normalizes_them() {
        let cases = [
            ("/a%20b", "/a b"),
            ("/a/./b/../c", "/a/c"),
            ("//a///b", "/a/b"),
            ("/a/b/..", "/a/"),
            ("/a/.", "/a/"),
            ("/dir/", "/dir/"),
            ("/../../x", "/x"),
            ("", "/"),
            ("/", "/"),
            ("*", "*"),
        ];
        for (raw, expected) in cases {
            assert_eq!(String::from_utf8(normalized_path(raw)).unwrap(), expected, "{raw:?}");
        }
    }

    #[test]
    fn host_names_lose_their_port() {
        assert_eq!(host_name("Example.com:8080"), "Example.com");
        assert_eq!(host_name("[::1]:8080"), "[::1]");
        assert_eq!(host_name("plain"), "plain");
    }
}

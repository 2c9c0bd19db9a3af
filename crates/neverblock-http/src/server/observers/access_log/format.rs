//! A log format, compiled once into a list of items (literal text, or a directive's function with
//! its argument and status conditions), as mod_log_config compiles `LogFormat` at start-up rather
//! than reading the pattern again for every request.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use super::items::{self, Directive, Line};
use crate::error::{Error, ErrorKind};
use crate::server::Exchange;

/// Apache's `common` format (the Common Log Format).
const COMMON: &str = "%h %l %u %t \"%r\" %>s %b";
/// Apache's `combined` format: `common` and the referrer and user agent.
const COMBINED: &str = "%h %l %u %t \"%r\" %>s %b \"%{Referer}i\" \"%{User-agent}i\"";

/// An access log format: Apache mod_log_config's `LogFormat`, compiled.
///
/// `common` and `combined` are Apache's formats of those names; any other pattern is literal text
/// with `%` directives, as Apache reads them: `%h` (the client's address: no name lookups), `%a`,
/// `%A` (the local address), `%l` and `%u` (always `-`: no identd, no authentication), `%t` (when
/// the request arrived, `[10/Oct/2000:13:55:36 -0700]` in the local time zone; `%{sec}t`,
/// `%{msec}t`, `%{usec}t`, `%{msec_frac}t`, `%{usec_frac}t`, `begin:`/`end:` prefixes, or a
/// `strftime` pattern), `%r` (the request line), `%m`, `%U` (the path, decoded and normalized),
/// `%q` (`?query`, or nothing), `%H`, `%s` and `%>s` (the status), `%b` (body bytes, `-` for
/// none), `%B` (body bytes, 0 for none), `%D` (microseconds), `%T` (seconds; `%{ms}T`, `%{us}T`),
/// `%v` (the server's name), `%V` (the host asked for), `%p` (the server's port; `%{remote}p`),
/// `%P` (the process id), `%{Name}i` (a request field), `%{Name}o` (a response field),
/// `%{SSL_PROTOCOL}x` and `%{SSL_CIPHER}x` (mod_ssl's: the TLS version and cipher suite of an HTTPS
/// connection) and `%%`.
/// Status conditions work as in Apache: `%400,501{User-agent}i` shows the field only for those
/// statuses, `%!200,304{Referer}i` for all others; `<` and `>` are accepted (there are no internal
/// redirects, so both give the status sent). An absent value is `-`. Values from the request and
/// the response are escaped as Apache's `ap_escape_logitem` escapes them (`\"`, `\\`, `\n` …,
/// `\xhh`), so no client can forge a line or a field; the literal text is kept as written, with
/// Apache's `\n`, `\t`, `\r` and `\\`.
///
/// # Examples
///
/// ```
/// use neverblock_http::server::LogFormat;
///
/// let common: LogFormat = "common".parse().unwrap();
/// assert_eq!(common.pattern(), r#"%h %l %u %t "%r" %>s %b"#);
/// let timing: LogFormat = r#"%h "%r" %>s %D us %{X-Request-Id}i"#.parse().unwrap();
/// # drop(timing);
/// let bad = "%h %Z".parse::<LogFormat>().unwrap_err();
/// assert!(bad.to_string().contains("%Z"));
/// ```
#[derive(Clone)]
pub struct LogFormat {
    pattern: Arc<str>,
    items: Arc<[Item]>,
}

/// One part of a compiled format.
enum Item {
    Text(Box<[u8]>),
    Field { directive: Directive, arg: Box<str>, only: Option<Statuses> },
}

/// A directive's status condition: shown only for these statuses (or, `negated`, for all others).
struct Statuses {
    statuses: Vec<u16>,
    negated: bool,
}

impl LogFormat {
    /// Apache's `common` format: `%h %l %u %t "%r" %>s %b`.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::LogFormat;
    ///
    /// assert_eq!(LogFormat::common().pattern(), r#"%h %l %u %t "%r" %>s %b"#);
    /// ```
    pub fn common() -> LogFormat {
        LogFormat::compile(COMMON).expect("the common format compiles")
    }

    /// Apache's `combined` format: `common`, then `"%{Referer}i" "%{User-agent}i"`.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::LogFormat;
    ///
    /// assert!(LogFormat::combined().pattern().ends_with(r#""%{Referer}i" "%{User-agent}i""#));
    /// ```
    pub fn combined() -> LogFormat {
        LogFormat::compile(COMBINED).expect("the combined format compiles")
    }

    /// The pattern it was compiled from.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::LogFormat;
    ///
    /// let format: LogFormat = "%h %>s".parse().unwrap();
    /// assert_eq!(format.pattern(), "%h %>s");
    /// ```
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// Appends the line for `exchange`, with its line end; `server_name` is what `%v` shows.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Exchange, LogFormat, Server};
    ///
    /// let format: LogFormat = r#"%h "%r" %>s %b"#.parse().unwrap();
    /// let server = Server::builder()
    ///     .on_response(move |x: &Exchange<'_>| {
    ///         let mut line = Vec::new();
    ///         format.write_line(x, "example.org", &mut line);
    ///         log::info!("{}", String::from_utf8_lossy(&line).trim_end());
    ///     })
    ///     .bind("127.0.0.1:0")
    ///     .unwrap();
    /// # drop(server);
    /// ```
    pub fn write_line(&self, exchange: &Exchange<'_>, server_name: &str, out: &mut Vec<u8>) {
        let line = Line { exchange, server_name };
        for item in self.items.iter() {
            match item {
                Item::Text(text) => out.extend_from_slice(text),
                Item::Field { directive, arg, only } => {
                    let shown = only.as_ref().is_none_or(|only| only.admit(exchange.status()));
                    if !(shown && directive(&line, arg, out)) {
                        out.push(b'-');
                    }
                }
            }
        }
        out.push(b'\n');
    }

    /// Compiles `pattern`.
    fn compile(pattern: &str) -> Result<LogFormat, Error> {
        let mut items = Vec::new();
        let mut rest = pattern;
        while !rest.is_empty() {
            let (item, after) = match rest.strip_prefix('%') {
                Some(directive) => parse_directive(directive),
                None => Ok(parse_text(rest)),
            }
            .map_err(|why| Error::new(ErrorKind::Server, format!("the log format {pattern:?}: {why}")))?;
            items.push(item);
            rest = after;
        }
        Ok(LogFormat { pattern: pattern.into(), items: items.into() })
    }
}

impl Statuses {
    fn admit(&self, status: u16) -> bool {
        self.statuses.contains(&status) != self.negated
    }
}

/// Literal text up to the next `%`, with Apache's backslash escapes (`\n`, `\t`, `\r`, `\\`; any
/// other backslash kept as written).
fn parse_text(text: &str) -> (Item, &str) {
    let end = text.find('%').unwrap_or(text.len());
    let mut out = Vec::with_capacity(end);
    let mut bytes = text[..end].bytes().peekable();
    while let Some(b) = bytes.next() {
        let escaped = match (b, bytes.peek()) {
            (b'\\', Some(b'\\')) => Some(b'\\'),
            (b'\\', Some(b'n')) => Some(b'\n'),
            (b'\\', Some(b't')) => Some(b'\t'),
            (b'\\', Some(b'r')) => Some(b'\r'),
            _ => None,
        };
        match escaped {
            Some(e) => {
                bytes.next();
                out.push(e);
            }
            None => out.push(b),
        }
    }
    (Item::Text(out.into()), &text[end..])
}

/// A directive, after its `%`: conditions, modifiers, an argument in braces, and its letter.
fn parse_directive(text: &str) -> Result<(Item, &str), String> {
    if let Some(rest) = text.strip_prefix('%') {
        return Ok((Item::Text(Box::from(&b"%"[..])), rest));
    }
    let (mut statuses, mut negated, mut arg) = (Vec::new(), false, "");
    let mut rest = text;
    loop {
        let Some(c) = rest.chars().next() else {
            return Err("a directive ends before its letter".to_owned());
        };
        match c {
            '!' => negated = !negated,
            '<' | '>' | ',' => {}
            '{' => {
                let end = rest.find('}').ok_or("a `{` without its `}`")?;
                arg = &rest[1..end];
                rest = &rest[end + 1..];
                continue;
            }
            '0'..='9' => {
                let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
                statuses.push(rest[..digits].parse().map_err(|_| format!("no status {}", &rest[..digits]))?);
                rest = &rest[digits..];
                continue;
            }
            letter => {
                let directive =
                    items::lookup(letter).ok_or_else(|| format!("unknown or unsupported directive %{letter}"))?;
                items::check_arg(letter, arg)?;
                let only = (!statuses.is_empty()).then_some(Statuses { statuses, negated });
                let item = Item::Field { directive, arg: arg.into(), only };
                return Ok((item, &rest[letter.len_utf8()..]));
            }
        }
        rest = &rest[c.len_utf8()..];
    }
}

impl FromStr for LogFormat {
    type Err = Error;

    /// `common`, `combined`, or a pattern.
    fn from_str(s: &str) -> Result<LogFormat, Error> {
        match s {
            "common" => Ok(LogFormat::common()),
            "combined" => Ok(LogFormat::combined()),
            pattern => LogFormat::compile(pattern),
        }
    }
}

impl fmt::Debug for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogFormat").field("pattern", &self.pattern).field("items", &self.items.len()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_of(pattern: &str) -> String {
        pattern.parse::<LogFormat>().unwrap_err().to_string()
    }

    /// The literal texts of `format`, and how many directives it has.
    fn parts(format: &LogFormat) -> (Vec<&[u8]>, usize) {
        let texts = format.items.iter().filter_map(|i| match i {
            Item::Text(text) => Some(&**text),
            Item::Field { .. } => None,
        });
        (texts.collect(), format.items.iter().filter(|i| matches!(i, Item::Field { .. })).count())
    }

    #[test]
    fn patterns_compile_into_text_and_directives() {
        let format: LogFormat = r#"%h [\\%%] %400,501{User-agent}i\t%!200>s\n\q "%r""#.parse().unwrap();
        let expected: [&[u8]; 6] = [b" [\\", b"%", b"] ", b"\t", b"\n\\q \"", b"\""];
        assert_eq!(parts(&format), (expected.to_vec(), 4));
        let Item::Field { arg, only: Some(only), .. } = &format.items[4] else { panic!("a conditional field") };
        assert_eq!(&**arg, "User-agent");
        assert!(only.admit(400) && only.admit(501) && !only.admit(200));
        let Item::Field { only: Some(negated), .. } = &format.items[6] else { panic!("a negated condition") };
        assert!(!negated.admit(200) && negated.admit(404));
    }

    #[test]
    fn bad_patterns_are_refused_with_the_reason() {
        assert!(error_of("%h %Z").contains("unknown or unsupported directive %Z"), "{}", error_of("%h %Z"));
        assert!(error_of("%h %").contains("ends before its letter"));
        assert!(error_of("%{Referer").contains("without its `}`"));
        assert!(error_of("%{fortnights}T").contains("%{fortnights}T"));
        assert!(error_of("%{sideways}p").contains("%{sideways}p"));
        assert!(error_of("%i").contains("%{}i"));
        assert!(error_of("%99999999s").contains("no status"));
        assert!("common".parse::<LogFormat>().is_ok() && "combined".parse::<LogFormat>().is_ok());
    }
}

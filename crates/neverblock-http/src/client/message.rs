//! The client's messages: a [`Request`] to send and the whole [`Response`] read back, and the
//! shortcuts through the process's shared default [`Client`].

use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, OnceLock};

use super::Client;
use crate::error::Error;
use crate::head_access::head_accessors;
use crate::wire::head::Head;
use crate::Version;
use url::Url;

/// `GET url` with the process's shared default [`Client`].
///
/// # Errors
///
/// See [`ErrorKind`](crate::ErrorKind).
///
/// # Examples
///
/// ```
/// let err = neverblock_http::get("http://127.0.0.1:1/").unwrap_err();
/// assert_eq!(err.kind(), neverblock_http::ErrorKind::Refused);
/// ```
pub fn get(url: &str) -> Result<Response, Error> {
    default_client().get(url)
}

/// `POST url` with `body`, with the process's shared default [`Client`].
///
/// # Errors
///
/// See [`ErrorKind`](crate::ErrorKind).
///
/// # Examples
///
/// ```
/// let err = neverblock_http::post("http://127.0.0.1:1/upload", "data").unwrap_err();
/// assert_eq!(err.kind(), neverblock_http::ErrorKind::Refused);
/// ```
pub fn post(url: &str, body: impl Into<Vec<u8>>) -> Result<Response, Error> {
    default_client().post(url, body)
}

fn default_client() -> &'static Client {
    static CLIENT: OnceLock<Client> = OnceLock::new();
    CLIENT.get_or_init(Client::new)
}

/// A request: method, absolute URL, extra headers and a body in memory.
///
/// `Host`, and `Content-Length` when there is a body, are added when it is sent. A body streamed
/// from a reader is given to [`Client::send_body`] instead.
///
/// # Examples
///
/// ```
/// use neverblock_http::Request;
///
/// let request = Request::new("PUT", "http://127.0.0.1:8080/item/1")
///     .header("Content-Type", "application/json")
///     .body(r#"{"name":"x"}"#);
/// assert_eq!(request.method(), "PUT");
/// ```
#[derive(Clone, Debug)]
pub struct Request {
    pub(super) method: String,
    pub(super) url: String,
    /// `url` parsed and checked (http or https, with a host) once, so a request sent many times is
    /// parsed once (`None`: invalid, reported when sent); shared with the responses it answers.
    pub(super) parsed: Option<Arc<Url>>,
    pub(super) headers: Vec<(String, String)>,
    pub(super) body: Vec<u8>,
}

impl Request {
    /// A request with no extra headers and no body.
    ///
    /// # Examples
    ///
    /// ```
    /// let request = neverblock_http::Request::new("GET", "http://127.0.0.1:8080/");
    /// assert_eq!((request.method(), request.url()), ("GET", "http://127.0.0.1:8080/"));
    /// ```
    pub fn new(method: impl Into<String>, url: impl Into<String>) -> Request {
        let url = url.into();
        let parsed = super::parse(&url).ok().map(Arc::new);
        Request { method: method.into(), url, parsed, headers: Vec::new(), body: Vec::new() }
    }

    /// A request for `url`, parsed already: for code that makes many URLs from one (each request's
    /// from a base URL) without parsing a string per request.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidUrl`](crate::ErrorKind::InvalidUrl) if `url` is not an `http` or `https`
    /// URL with a host.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::{Request, Url};
    ///
    /// let base = Url::parse("http://127.0.0.1:8080/api/").unwrap();
    /// let request = Request::from_url("GET", base.join("items/7").unwrap()).unwrap();
    /// assert_eq!(request.url(), "http://127.0.0.1:8080/api/items/7");
    /// assert!(Request::from_url("GET", Url::parse("ftp://h/").unwrap()).is_err());
    /// ```
    pub fn from_url(method: impl Into<String>, url: Url) -> Result<Request, Error> {
        super::check_scheme(&url)?;
        let text = url.as_str().to_owned();
        Ok(Request {
            method: method.into(),
            url: text,
            parsed: Some(Arc::new(url)),
            headers: Vec::new(),
            body: Vec::new(),
        })
    }

    /// Adds a header.
    ///
    /// # Examples
    ///
    /// ```
    /// let request = neverblock_http::Request::new("GET", "http://127.0.0.1:8080/").header("Accept", "text/html");
    /// # drop(request);
    /// ```
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Request {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sets the body.
    ///
    /// # Examples
    ///
    /// ```
    /// let request = neverblock_http::Request::new("POST", "http://127.0.0.1:8080/").body(vec![1, 2, 3]);
    /// # drop(request);
    /// ```
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Request {
        self.body = body.into();
        self
    }

    /// The method.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(neverblock_http::Request::new("DELETE", "http://h/").method(), "DELETE");
    /// ```
    pub fn method(&self) -> &str {
        &self.method
    }

    /// The URL.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(neverblock_http::Request::new("GET", "http://h/a?b").url(), "http://h/a?b");
    /// ```
    pub fn url(&self) -> &str {
        self.url.as_str()
    }
}

/// A whole response, its body read into memory ([`ResponseStream`](super::ResponseStream) is the
/// same response with its body still to be read).
///
/// # Examples
///
/// ```no_run
/// let response = neverblock_http::get("http://127.0.0.1:8080/").unwrap();
/// if response.status() == 200 {
///     println!("{} bytes of {:?}", response.body().len(), response.header("content-type"));
/// }
/// ```
#[derive(Clone)]
pub struct Response {
    pub(super) status: u16,
    pub(super) version: Version,
    pub(super) head: Head,
    pub(super) body: Vec<u8>,
    pub(super) url: Arc<url::Url>,
}

head_accessors!(Response, "neverblock_http::Response", |response| head: Some(&response.head), version: Version = response.version);

impl Response {
    /// The status code.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let response = neverblock_http::get("http://127.0.0.1:8080/").unwrap();
    /// assert!((200..300).contains(&response.status()));
    /// ```
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The reason phrase.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let response = neverblock_http::get("http://127.0.0.1:8080/").unwrap();
    /// println!("{} {}", response.status(), response.reason());
    /// ```
    pub fn reason(&self) -> &str {
        self.head.reason()
    }

    /// The body.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let response = neverblock_http::get("http://127.0.0.1:8080/").unwrap();
    /// std::fs::write("index.html", response.body()).unwrap();
    /// ```
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The body as text (invalid UTF-8 replaced).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let response = neverblock_http::get("http://127.0.0.1:8080/").unwrap();
    /// println!("{}", response.text());
    /// ```
    pub fn text(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.body)
    }

    /// The response's head, as received.
    pub(crate) fn head(&self) -> &Head {
        &self.head
    }

    /// The body, taken.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let response = neverblock_http::get("http://127.0.0.1:8080/").unwrap();
    /// let bytes: Vec<u8> = response.into_body();
    /// # drop(bytes);
    /// ```
    pub fn into_body(self) -> Vec<u8> {
        self.body
    }

    /// The URL that answered (the last one, after redirects).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let client = neverblock_http::Client::builder().redirects(5).build().unwrap();
    /// let response = client.get("http://127.0.0.1:8080/old").unwrap();
    /// println!("answered by {}", response.url());
    /// ```
    pub fn url(&self) -> &str {
        self.url.as_str()
    }
}

impl fmt::Debug for Response {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Response")
            .field("status", &self.status)
            .field("version", &self.version)
            .field("head", &self.head)
            .field("body", &format_args!("{} bytes", self.body.len()))
            .field("url", &self.url.as_str())
            .finish()
    }
}

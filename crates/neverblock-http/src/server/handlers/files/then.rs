//! Files first, then another handler: nginx's `try_files $uri $uri/ @upstream`.

use std::fmt;

use super::StaticFiles;
use crate::server::{Handler, Request, Response};

/// A [`Handler`] that answers GET and HEAD requests with the file they name under a directory and
/// passes everything else (no such file, other methods) to `then`: an application behind its
/// static assets, as `neverblock serve DIR --upstream URL` runs it. A request answered from the
/// files never reaches `then`; one that `then` gets is untouched (its body unread).
///
/// Only a 404 from the files passes on: a directory without `index.html` (403), a path refused
/// (400) or a failed condition (304, 412) is the files' answer.
///
/// # Examples
///
/// ```
/// use neverblock_http::server::{Request, Response, StaticFiles};
///
/// let app = |request: &mut Request<'_>| Response::new(200).body(format!("the app answers {}\n", request.path()));
/// let handler = StaticFiles::new(std::env::temp_dir()).unwrap().then(app);
/// # drop(handler);
/// ```
pub struct FilesThen<H> {
    files: StaticFiles,
    then: H,
}

impl StaticFiles {
    /// These files first, then `handler` for what they do not answer (see [`FilesThen`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Handler, Proxy, StaticFiles};
    ///
    /// let upstream = Proxy::new("http://127.0.0.1:3000").unwrap();
    /// let site = StaticFiles::new(std::env::temp_dir()).unwrap().then(upstream);
    /// # fn is_handler(_: impl Handler) {}
    /// # is_handler(site);
    /// ```
    pub fn then<H: Handler>(self, handler: H) -> FilesThen<H> {
        FilesThen { files: self, then: handler }
    }
}

impl<H: Handler> Handler for FilesThen<H> {
    fn handle(&self, request: &mut Request<'_>) -> Response {
        if matches!(request.method(), "GET" | "HEAD") {
            let response = self.files.serve(request);
            if response.status() != 404 {
                return response;
            }
        }
        self.then.handle(request)
    }
}

impl<H> fmt::Debug for FilesThen<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FilesThen").field("files", &self.files.root()).finish_non_exhaustive()
    }
}

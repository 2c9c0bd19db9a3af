//! What a path beneath the root was found to be: the open file, what its responses say of it
//! (worked out once for every request that finds it in the same turn), and a small file's bytes.

use std::borrow::Cow;
use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use super::conditional;
use super::open::{self, Root};
use super::small_files;

/// A file or directory opened beneath the root.
#[derive(Debug)]
pub(super) struct Found {
    /// The open file: every response that sends part of it holds it, so it stays open (and the
    /// same file, whatever happens to its path) until the last of them is sent.
    pub(super) file: Rc<File>,
    pub(super) meta: Metadata,
    /// The whole file, for a small one that was in the page cache: sent from memory.
    pub(super) bytes: Option<Rc<[u8]>>,
    /// The modification time (the epoch when the file system has none).
    pub(super) modified: SystemTime,
    /// The clock when the file was opened.
    pub(super) opened_at: SystemTime,
    /// The strong entity tag, from inode, size and modification time (shared by the responses).
    pub(super) etag: Rc<str>,
    /// `Last-Modified`, to the second.
    pub(super) last_modified: Rc<str>,
    /// The media type its name says.
    pub(super) content_type: Cow<'static, str>,
}

impl Found {
    /// Opens `relative` beneath `root`, with its metadata (`statx` of the open file: no disk read)
    /// and, for a small regular file, its bytes.
    ///
    /// # Errors
    ///
    /// The open's ([`open::open`]) or `statx`'s.
    pub(super) fn open(root: &Arc<Root>, relative: &Path) -> io::Result<Found> {
        // Before anything is read: the bytes are no older than this.
        let opened_at = SystemTime::now();
        let file = open::open(root, relative)?;
        let meta = file.metadata()?;
        let bytes = small_files::bytes(root.id(), relative, &file, &meta, opened_at);
        let modified = meta.modified().unwrap_or(UNIX_EPOCH);
        Ok(Found {
            file: Rc::new(file),
            etag: etag(&meta, modified).into(),
            last_modified: httpdate::fmt_http_date(conditional::to_second(modified)).into(),
            modified,
            opened_at,
            content_type: content_type(relative),
            meta,
            bytes,
        })
    }
}

/// A strong entity tag from what changes when the file does: inode, size, modification time.
fn etag(meta: &Metadata, modified: SystemTime) -> String {
    let modified = modified.duration_since(UNIX_EPOCH).unwrap_or_default();
    format!("\"{:x}-{:x}-{:x}.{:x}\"", meta.ino(), meta.len(), modified.as_secs(), modified.subsec_nanos())
}

/// The media type by extension (text as UTF-8); `application/octet-stream` for an unknown one.
/// From the guess's static text: no parse, and for the common text types no allocation either,
/// so every response of the turn shares the value.
fn content_type(path: &Path) -> Cow<'static, str> {
    match mime_guess::from_path(path).first_raw() {
        Some(raw) if raw.starts_with("text/") || raw == "application/javascript" => {
            match UTF8_TEXT.iter().find(|(bare, _)| *bare == raw) {
                Some((_, with_charset)) => Cow::Borrowed(with_charset),
                None => Cow::Owned(format!("{raw}; charset=utf-8")),
            }
        }
        Some(raw) => Cow::Borrowed(raw),
        None => Cow::Borrowed("application/octet-stream"),
    }
}

/// The common text types with their charset, written out.
const UTF8_TEXT: [(&str, &str); 6] = [
    ("text/html", "text/html; charset=utf-8"),
    ("text/plain", "text/plain; charset=utf-8"),
    ("text/css", "text/css; charset=utf-8"),
    ("text/javascript", "text/javascript; charset=utf-8"),
    ("application/javascript", "application/javascript; charset=utf-8"),
    ("text/xml", "text/xml; charset=utf-8"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_come_from_the_extension() {
        assert_eq!(content_type(Path::new("a/index.html")), "text/html; charset=utf-8");
        assert!(matches!(content_type(Path::new("a.txt")), Cow::Borrowed("text/plain; charset=utf-8")));
        assert_eq!(content_type(Path::new("a.csv")), "text/csv; charset=utf-8");
        assert_eq!(content_type(Path::new("x.png")), "image/png");
        assert_eq!(content_type(Path::new("noext")), "application/octet-stream");
    }
}

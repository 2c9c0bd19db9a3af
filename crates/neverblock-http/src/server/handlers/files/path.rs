//! From a request's percent-encoded path to a file path relative to the root, refusing every way
//! out of it.
//!
//! The path is split on its literal slashes first and each segment decoded after, so an encoded
//! slash (`%2f`) can never become a separator; a segment that decodes to `..` (`..`, `%2e%2e`,
//! `.%2E`) is refused rather than resolved, as is one with a slash or a NUL byte in it, or a
//! broken percent escape. `.` and empty segments are skipped. Symbolic links are the opener's
//! business (`open.rs`): the kernel refuses any that leads outside the root.

use std::borrow::Cow;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use percent_encoding::percent_decode;

/// A request path, mapped.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Mapped<'a> {
    /// Relative to the root; empty for the root itself. Borrowed from the request path when that
    /// needs no decoding (most do), so a request for a file allocates no path of its own.
    pub(super) relative: Cow<'a, Path>,
    /// Whether the request path ends in `/` (a directory's own URL).
    pub(super) trailing_slash: bool,
}

/// Maps `raw`, the request target's path (empty for an absolute URL without one: the root).
///
/// # Errors
///
/// Why the path is refused.
pub(super) fn map(raw: &str) -> Result<Mapped<'_>, &'static str> {
    let trailing_slash = raw.ends_with('/');
    if let Some(plain) = plain(raw) {
        return Ok(Mapped { relative: Cow::Borrowed(Path::new(plain)), trailing_slash });
    }
    // Room for the whole path and an `index.html` after it: one allocation.
    let mut relative = PathBuf::with_capacity(raw.len() + "/index.html".len());
    for segment in raw.split('/') {
        if segment.bytes().enumerate().any(|(i, b)| b == b'%' && !is_escape(&segment.as_bytes()[i..])) {
            return Err("a broken percent escape in the path");
        }
        // Borrowed unless the segment holds an escape.
        let decoded: Cow<'_, [u8]> = percent_decode(segment.as_bytes()).into();
        match &*decoded {
            b"" | b"." => {}
            b".." => return Err("a `..` segment in the path"),
            bytes if bytes.contains(&b'/') => return Err("an encoded slash in the path"),
            bytes if bytes.contains(&0) => return Err("a NUL byte in the path"),
            bytes => relative.push(OsStr::from_bytes(bytes)),
        }
    }
    Ok(Mapped { relative: Cow::Owned(relative), trailing_slash })
}

/// The path beneath the root, when `raw` needs no segment-by-segment look: it starts with `/` and
/// holds no escape, no NUL, no empty segment but a trailing one and no segment that starts with a
/// dot (so no `.` or `..`): the same path without its slashes at either end. One pass over its
/// bytes; most paths are such.
fn plain(raw: &str) -> Option<&str> {
    let bytes = raw.as_bytes();
    if bytes.first() != Some(&b'/') {
        return None;
    }
    let mut after_slash = false;
    for &b in bytes {
        let refused = b == b'%' || b == 0 || (after_slash && (b == b'/' || b == b'.'));
        if refused {
            return None;
        }
        after_slash = b == b'/';
    }
    let inner = &raw[1..];
    Some(inner.strip_suffix('/').unwrap_or(inner))
}

/// Whether `s`, which starts with `%`, starts with a whole escape (`%` and two hex digits).
fn is_escape(s: &[u8]) -> bool {
    s.len() >= 3 && s[1].is_ascii_hexdigit() && s[2].is_ascii_hexdigit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_inside_the_root_or_not_at_all() {
        let ok = |raw: &str, relative: &str, slash: bool| {
            let relative = Cow::Borrowed(Path::new(relative));
            assert_eq!(map(raw), Ok(Mapped { relative, trailing_slash: slash }), "{raw:?}");
        };
        ok("/", "", true);
        ok("", "", false);
        ok("/a/b.txt", "a/b.txt", false);
        ok("/a//./b/", "a/b", true);
        ok("/%61%20b", "a b", false);
        ok("/a/%2e/b", "a/b", false);
        ok("/caf%C3%A9", "caf\u{e9}", false);
        ok("/a/b/", "a/b", true);
        ok("/.well-known/x", ".well-known/x", false);
        ok("/a.b/c..d", "a.b/c..d", false);
        let borrowed = |raw: &str| matches!(map(raw).map(|m| m.relative), Ok(Cow::Borrowed(_)));
        assert!(borrowed("/a/b.txt") && borrowed("/a/b/"), "a path that needs no decoding is the request's own");
        assert!(!borrowed("/%61") && !borrowed("/a//b"), "a decoded path is made anew");
        for raw in [
            "/../etc/passwd",
            "/a/../../b",
            "/%2e%2e/x",
            "/.%2E/x",
            "/a%2f..%2f..%2fb",
            "/a%2Fb",
            "/a%00b",
            "/a%0",
            "/%zz",
            "/..",
            "/a/..",
            "/a/../",
            "/./../b",
        ] {
            assert!(map(raw).is_err(), "{raw:?} must be refused");
        }
    }
}

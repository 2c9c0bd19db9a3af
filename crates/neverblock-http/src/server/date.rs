//! The `Date` header's value, formatted once a second per loop (nginx's cached time), not once a
//! response.

use std::cell::Cell;
use std::time::{SystemTime, UNIX_EPOCH};

/// An IMF-fixdate is always this long: `Sun, 06 Nov 1994 08:49:37 GMT`.
const LEN: usize = 29;

thread_local! {
    /// The second last formatted, and its text.
    static CACHE: Cell<(u64, [u8; LEN])> = const { Cell::new((u64::MAX, [0; LEN])) };
}

/// Now, as an HTTP date.
pub(super) fn now() -> [u8; LEN] {
    let now = SystemTime::now();
    let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    CACHE.with(|cache| {
        let (cached, text) = cache.get();
        if cached == second {
            return text;
        }
        let mut text = [0; LEN];
        text.copy_from_slice(&httpdate::fmt_http_date(now).as_bytes()[..LEN]);
        cache.set((second, text));
        text
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates_parse_back_to_this_second() {
        let text = super::now();
        let parsed = httpdate::parse_http_date(std::str::from_utf8(&text).unwrap()).unwrap();
        let age = std::time::SystemTime::now().duration_since(parsed).unwrap();
        assert!(age.as_secs() < 60, "{age:?}");
        assert!(text.ends_with(b" GMT"));
    }
}

//! The `Date` header's value, formatted once a second per loop and the clock read once per loop
//! turn (nginx's cached time), not once a response.

use std::cell::Cell;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// An IMF-fixdate is always this long: `Sun, 06 Nov 1994 08:49:37 GMT`.
const LEN: usize = 29;

thread_local! {
    /// The second last formatted, and its text.
    static CACHE: Cell<(u64, [u8; LEN])> = const { Cell::new((u64::MAX, [0; LEN])) };
    /// The loop turn whose start the cache was last checked in: within it, the text stands.
    static CHECKED_IN: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Now, as an HTTP date: the time of the running loop turn (outside a runtime, the clock's).
pub(super) fn now() -> [u8; LEN] {
    let turn = neverblock::runtime::turn_start();
    if turn.is_some() && CHECKED_IN.get() == turn {
        return CACHE.get().1;
    }
    CHECKED_IN.set(turn);
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

    #[test]
    fn a_later_turn_reads_the_clock_again() {
        let parse = |text: [u8; super::LEN]| httpdate::parse_http_date(std::str::from_utf8(&text).unwrap()).unwrap();
        neverblock::run(move || {
            let first = parse(super::now());
            assert_eq!(parse(super::now()), first, "the same turn, the same date");
            // A sleep parks the task: it goes on in a later turn, past the next second.
            neverblock::sleep(std::time::Duration::from_millis(1100));
            let later = parse(super::now());
            assert!(later > first, "{later:?} after {first:?}");
        });
    }
}

//! The client memory of a streamed result, measured: a counting global
//! allocator tracks the peak of live heap bytes while 5,000,000 rows go by, and,
//! for contrast, while `query` collects smaller results (which it holds whole).
//!
//! A binary of its own with one test: the allocator counts every thread of the
//! process, so nothing else may allocate beside the measurement.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

use neverblock_pg::throwaway::Postgres;
use neverblock_pg::Connection;

/// `System`, counting the bytes it has handed out and not yet taken back.
struct Counting;

/// Live heap bytes now.
static LIVE: AtomicUsize = AtomicUsize::new(0);
/// The most live heap bytes since the last [`peak_during`] began.
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    let live = LIVE.fetch_add(bytes, Relaxed) + bytes;
    PEAK.fetch_max(live, Relaxed);
}

fn shrank(bytes: usize) {
    LIVE.fetch_sub(bytes, Relaxed);
}

// SAFETY: every method passes its arguments unchanged to `System` and returns
// what `System` returns, so `System`'s guarantees are this allocator's; the
// counters only watch the sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller meets `alloc`'s contract (a non-zero size), which is `System`'s.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller passes a block this allocator, that is `System`, gave out with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` and `layout` as in `dealloc`; the caller meets `realloc`'s contract for `new_size`.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            // Both blocks counted for a moment, as a moving realloc holds both.
            grew(new_size);
            shrank(layout.size());
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// What `f` returns, and the peak of live heap bytes while it ran, above what was live when it began.
fn peak_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.load(Relaxed);
    PEAK.store(base, Relaxed);
    let value = f();
    (value, PEAK.load(Relaxed) - base)
}

const MIB: usize = 1 << 20;
/// The bound on a streamed result's client memory.
const STREAM_LIMIT: usize = 64 * MIB;
const STREAMED_ROWS: i32 = 5_000_000;

#[test]
fn five_million_streamed_rows_stay_under_64_mib_while_query_grows_with_its_result() {
    let postgres = Postgres::start().unwrap_or_else(|e| panic!("cannot start a throwaway PostgreSQL: {e}"));
    let config = postgres.config();
    neverblock::run(move || {
        let mut conn = Connection::connect(&config).unwrap();

        let start = Instant::now();
        let (count, streamed_peak) = peak_during(|| {
            let mut count = 0;
            let sql = "select g, 'a short text' from generate_series(1, 5000000) g";
            for row in conn.query_stream(sql, &[]).unwrap() {
                let row = row.unwrap();
                count += 1;
                assert_eq!(row.get::<i32>(0), count);
                assert_eq!(row.get::<&str>(1), "a short text");
            }
            count
        });
        eprintln!("stream: {count} rows, peak {streamed_peak} bytes above the start, in {:.1?}", start.elapsed());
        assert_eq!(count, STREAMED_ROWS);
        assert!(streamed_peak < STREAM_LIMIT, "the stream's peak: {streamed_peak} bytes");

        // The same rows collected: the measurement sees memory that grows with the result.
        let collect = |conn: &mut Connection, n: i32| {
            peak_during(|| conn.query("select g, 'a short text' from generate_series(1, $1) g", &[&n]).unwrap())
        };
        let (half, half_peak) = collect(&mut conn, 250_000);
        drop(half);
        let (rows, peak) = collect(&mut conn, 500_000);
        eprintln!(
            "query: 250000 rows peak {:.1} MiB, {} rows peak {:.1} MiB ({} bytes a row)",
            half_peak as f64 / MIB as f64,
            rows.len(),
            peak as f64 / MIB as f64,
            peak / rows.len()
        );
        assert_eq!(rows.len(), 500_000);
        assert!(peak > half_peak * 18 / 10, "twice the rows, about twice the memory: {half_peak} then {peak}");
        assert!(peak > STREAM_LIMIT, "a tenth of the streamed rows, collected, pass the stream's bound: {peak}");
    });
}

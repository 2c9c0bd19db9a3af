//! The library's log lines, captured: a test that expects a warning finds it here by a text only
//! its own request put in it.

use std::sync::{Mutex, OnceLock};

/// Every record logged at `Warn` or above since the first [`lines_containing`] call.
struct Captured(Mutex<Vec<String>>);

impl log::Log for Captured {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Warn
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            self.0.lock().unwrap_or_else(|p| p.into_inner()).push(format!("{}", record.args()));
        }
    }

    fn flush(&self) {}
}

fn captured() -> &'static Captured {
    static CAPTURED: OnceLock<&'static Captured> = OnceLock::new();
    CAPTURED.get_or_init(|| {
        let captured: &'static Captured = Box::leak(Box::new(Captured(Mutex::new(Vec::new()))));
        // Only this module sets a logger in the test binary.
        log::set_logger(captured).expect("no other logger in the test binary");
        log::set_max_level(log::LevelFilter::Warn);
        captured
    })
}

/// Starts capturing (call before the test's requests).
pub(crate) fn capture() {
    captured();
}

/// The warnings and errors logged so far that contain `text`.
pub(crate) fn lines_containing(text: &str) -> Vec<String> {
    captured().0.lock().unwrap_or_else(|p| p.into_inner()).iter().filter(|l| l.contains(text)).cloned().collect()
}

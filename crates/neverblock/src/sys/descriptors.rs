//! The process's descriptor table, grown to its working size before a runtime's loops start.
//!
//! The kernel keeps a process's open descriptors in one table, which its threads share, and grows
//! it by doubling as descriptors are opened: 64, 128, 256, and so on. While threads share it, the
//! old table may be freed only after an RCU grace period, and the thread that asked for the
//! descriptor (an `accept`, a `socket`, an `open`) sleeps until then. That is milliseconds, and
//! every fiber of that thread's loop waits meanwhile. A burst of a thousand connections, each
//! with a file open, takes the table from 64 entries to 2,048: five such sleeps, each holding up
//! the loop whose `accept` or `open` asked. A process of one thread frees the old table at once,
//! which is why nginx's workers never meet them.
//!
//! So a runtime grows the table once, before its threads start, to hold as many descriptors as the
//! open-files limit allows, up to [`TABLE_MOST`]. The cost is the table's memory in the kernel (8
//! bytes a descriptor, and two bits): 256 KiB at a limit of 20,000. If the process already has
//! threads, that one growth waits a grace period, once. Descriptors are numbered as before: the
//! lowest free one is still taken first.

use std::sync::atomic::{AtomicUsize, Ordering};

use rustix::process::{getrlimit, Resource};

/// The most descriptors the table is grown to hold ahead of need (512 KiB of kernel memory). A
/// process past that many takes its few remaining doublings as they come.
const TABLE_MOST: usize = 1 << 16;

/// The size the table was last grown to by [`grow_table`], so that later runtimes skip the calls.
static GROWN_TO: AtomicUsize = AtomicUsize::new(0);

/// Grows the descriptor table to hold [`working_size`] descriptors, unless an earlier call
/// already did. A failure leaves the table to grow as descriptors are opened, as it would have
/// anyway.
pub(crate) fn grow_table() {
    let size = working_size();
    if size <= GROWN_TO.load(Ordering::Relaxed) {
        return;
    }
    // Asking for a duplicate numbered `size - 1` or above makes the kernel grow the table to
    // cover that number. Any descriptor will do to duplicate: an eventfd is one no setting lacks.
    let grown = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC)
        .and_then(|fd| rustix::io::fcntl_dupfd_cloexec(&fd, size as i32 - 1));
    match grown {
        // `EMFILE`: the process holds its limit's worth of descriptors, or number `size - 1`
        // itself, so the table covers them already.
        Ok(_) | Err(rustix::io::Errno::MFILE) => {
            GROWN_TO.fetch_max(size, Ordering::Relaxed);
        }
        Err(e) => log::debug!("the descriptor table was not grown to {size}: {e}"),
    }
}

/// How many descriptors the table should hold: the open-files limit, at most [`TABLE_MOST`].
fn working_size() -> usize {
    let limit = getrlimit(Resource::Nofile).current;
    limit.map_or(TABLE_MOST, |limit| usize::try_from(limit).unwrap_or(TABLE_MOST).min(TABLE_MOST)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table's size, as `/proc/self/status` gives it (`FDSize`).
    fn table_size() -> usize {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find_map(|l| l.strip_prefix("FDSize:")).expect("Linux gives FDSize");
        line.trim().parse().unwrap()
    }

    #[test]
    fn the_table_holds_the_working_size_after_growing_and_nothing_is_left_open() {
        grow_table();
        let size = working_size();
        assert!(table_size() >= size, "FDSize {} after growing to {size}", table_size());
        // Nothing is left open at the top: the duplicate that grew the table was closed.
        let open: Vec<usize> = std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        assert!(!open.contains(&(size - 1)), "descriptor {} left open", size - 1);
        assert!(GROWN_TO.load(Ordering::Relaxed) >= size, "the growth is remembered: later runtimes skip it");
    }
}

//! Small files' bytes, kept by each loop from turn to turn, so a small file's response is its
//! head and body in one write with no read of the file.
//!
//! Bytes are reused only for the same file unchanged: the `statx` of the file just opened (once a
//! turn per path, see `this_turn.rs`) must show the device, inode, size, modification time and
//! change time they were read with. Timestamps tick coarsely (the kernel's clock, a few
//! milliseconds), so a write just after the read could leave them as they were; as git does with
//! its index ("racy git"), bytes are kept only when both times are more than [`SETTLED`] older
//! than the read, and a file changed more recently is read again on each turn. The change time
//! moves with every write, truncation, rename, link or permission change, and cannot be set back
//! (a modification time can): so a file edited in place to the same size, its modification time
//! put back, is still read again. A write through a shared mapping moves neither time until the
//! kernel notes it (at the first write fault after writeback), so such content is seen when it
//! does.

use std::cell::RefCell;
use std::fs::{File, Metadata};
use std::io::IoSliceMut;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::rc::Rc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use foldhash::HashMap;
use rustix::io::ReadWriteFlags;

/// The largest file kept in memory: 16 KiB.
pub(super) const SMALL_FILE: u64 = 16 * 1024;
/// The most each loop keeps, counting each file's name and bookkeeping with its bytes: 4 MiB.
const BUDGET: usize = 4 << 20;
/// What an entry costs beside its bytes and name: the map's slot, the allocation's header.
const OVERHEAD: usize = 96;
/// How much older than the read a file's last change must be for its bytes to be kept.
const SETTLED: Duration = Duration::from_secs(2);

thread_local! {
    static KEPT: RefCell<Kept> = RefCell::default();
}

/// One loop's small files.
#[derive(Default)]
struct Kept {
    /// By root and path beneath it.
    files: HashMap<(u64, Box<[u8]>), KeptFile>,
    /// What the entries cost, counted as [`cost`] does: at most [`BUDGET`].
    cost: usize,
    /// Ticks at each use: an entry's `used` says how recently it served.
    clock: u64,
}

struct KeptFile {
    identity: Identity,
    bytes: Rc<[u8]>,
    used: u64,
}

/// What must be unchanged for kept bytes to be the file's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    size: u64,
    modified: (i64, i64),
    changed: (i64, i64),
}

impl Identity {
    fn of(meta: &Metadata) -> Identity {
        Identity {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            modified: (meta.mtime(), meta.mtime_nsec()),
            changed: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// Whether the file's last change is more than [`SETTLED`] older than `read_at`: a write
    /// after `read_at` would give it other times.
    fn settled_before(&self, read_at: SystemTime) -> bool {
        let newest = self.modified.max(self.changed);
        let Ok(secs) = u64::try_from(newest.0) else { return true };
        let newest = UNIX_EPOCH + Duration::new(secs, newest.1.clamp(0, 999_999_999) as u32);
        newest + SETTLED < read_at
    }
}

/// The bytes of `file` (`relative` beneath the root numbered `root`, just opened, its metadata
/// `meta`), when it is a regular file of at most [`SMALL_FILE`] bytes: kept ones if the file is
/// unchanged, else read now if the page cache has them all (`preadv2` with `RWF_NOWAIT`: never a
/// disk wait), and kept if the file had settled when the read began, at `read_at`. `None` for a
/// larger file or one not wholly in the page cache.
pub(super) fn bytes(root: u64, relative: &Path, file: &File, meta: &Metadata, read_at: SystemTime) -> Option<Rc<[u8]>> {
    if !meta.is_file() || meta.len() > SMALL_FILE {
        return None;
    }
    let identity = Identity::of(meta);
    let key = (root, Box::from(relative.as_os_str().as_bytes()));
    let kept = KEPT.with_borrow_mut(|kept| kept.get(&key, &identity));
    if kept.is_some() {
        return kept;
    }
    let bytes = read_whole(file, meta.len())?;
    if identity.settled_before(read_at) {
        KEPT.with_borrow_mut(|kept| kept.insert(key, identity, Rc::clone(&bytes)));
    }
    Some(bytes)
}

/// The `len` bytes of `file` if the page cache holds them all and the file ends there.
fn read_whole(file: &File, len: u64) -> Option<Rc<[u8]>> {
    // One byte more than the file has: the read says whether it grew.
    let mut buf = vec![0u8; len as usize + 1];
    let read = rustix::io::preadv2(file, &mut [IoSliceMut::new(&mut buf)], 0, ReadWriteFlags::NOWAIT);
    match read {
        Ok(n) if n as u64 == len => Some(Rc::from(&buf[..n])),
        _ => None,
    }
}

impl Kept {
    /// The bytes kept for `key` if they are those of the file `identity` describes, now the most
    /// recently used; a stale entry is dropped.
    fn get(&mut self, key: &(u64, Box<[u8]>), identity: &Identity) -> Option<Rc<[u8]>> {
        let entry = self.files.get_mut(key)?;
        if entry.identity != *identity {
            self.remove(key);
            return None;
        }
        self.clock += 1;
        entry.used = self.clock;
        Some(Rc::clone(&entry.bytes))
    }

    /// Keeps `bytes` for `key`, giving up the least recently used quarter of the entries while
    /// they would not fit.
    fn insert(&mut self, key: (u64, Box<[u8]>), identity: Identity, bytes: Rc<[u8]>) {
        self.remove(&key);
        let cost = cost(&key, &bytes);
        while self.cost + cost > BUDGET && !self.files.is_empty() {
            self.give_up_least_used();
        }
        self.clock += 1;
        self.files.insert(key, KeptFile { identity, bytes, used: self.clock });
        self.cost += cost;
    }

    fn remove(&mut self, key: &(u64, Box<[u8]>)) {
        if let Some(old) = self.files.remove(key) {
            self.cost -= cost(key, &old.bytes);
        }
    }

    /// Drops the least recently used quarter of the entries (at least one): a burst of new
    /// files pays for one scan of the entries every quarter of them, not each.
    fn give_up_least_used(&mut self) {
        let mut uses: Vec<u64> = self.files.values().map(|entry| entry.used).collect();
        let quarter = (uses.len() / 4).max(1);
        let (_, &mut oldest_kept, _) = uses.select_nth_unstable(quarter - 1);
        let cost = &mut self.cost;
        self.files.retain(|key, entry| {
            let keep = entry.used > oldest_kept;
            if !keep {
                *cost -= self::cost(key, &entry.bytes);
            }
            keep
        });
    }
}

/// What an entry for `key` holding `bytes` counts against the budget.
fn cost(key: &(u64, Box<[u8]>), bytes: &[u8]) -> usize {
    bytes.len() + key.1.len() + OVERHEAD
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file holding `contents`, open, with its metadata; removed when the test's guard drops.
    fn file_of(name: &str, contents: &[u8]) -> (File, Metadata, RemoveOnDrop) {
        let path = std::env::temp_dir().join(format!("small-files-{name}-{}", std::process::id()));
        std::fs::write(&path, contents).unwrap();
        let file = File::open(&path).unwrap();
        let meta = file.metadata().unwrap();
        (file, meta, RemoveOnDrop(path))
    }

    struct RemoveOnDrop(std::path::PathBuf);

    impl Drop for RemoveOnDrop {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn a_settled_files_bytes_are_kept_and_a_recently_changed_ones_are_read_each_time() {
        let (file, meta, _guard) = file_of("kept", b"contents");
        let name = Path::new("kept.txt");
        let now = SystemTime::now();
        let first = bytes(1, name, &file, &meta, now).unwrap();
        let second = bytes(1, name, &file, &meta, now).unwrap();
        assert_eq!((&first[..], &second[..]), (&b"contents"[..], &b"contents"[..]));
        assert!(!Rc::ptr_eq(&first, &second), "changed just now: read again, never kept");
        let later = now + SETTLED + Duration::from_secs(1);
        let read = bytes(1, name, &file, &meta, later).unwrap();
        let kept = bytes(1, name, &file, &meta, later).unwrap();
        assert!(Rc::ptr_eq(&read, &kept), "settled: kept");
        assert!(bytes(2, name, &file, &meta, later).is_some_and(|other| !Rc::ptr_eq(&other, &kept)), "another root's");
    }

    #[test]
    fn kept_bytes_serve_only_the_file_they_were_read_from() {
        let (file, meta, _guard) = file_of("identity", b"contents");
        let name = Path::new("identity.txt");
        let later = SystemTime::now() + SETTLED + Duration::from_secs(1);
        let kept = bytes(3, name, &file, &meta, later).unwrap();
        let identity = Identity::of(&meta);
        let others = [
            Identity { ino: identity.ino + 1, ..identity },
            Identity { dev: identity.dev + 1, ..identity },
            Identity { size: identity.size + 1, ..identity },
            Identity { modified: (identity.modified.0 + 1, identity.modified.1), ..identity },
            Identity { changed: (identity.changed.0, identity.changed.1 + 1), ..identity },
        ];
        for other in others {
            let found = KEPT.with_borrow_mut(|kept| kept.get(&(3, Box::from(&b"identity.txt"[..])), &other));
            assert!(found.is_none(), "{other:?} is another file than {identity:?}");
        }
        let again = bytes(3, name, &file, &meta, later).unwrap();
        assert!(!Rc::ptr_eq(&again, &kept), "the stale entry was dropped and the file read again");
    }

    #[test]
    fn the_budget_gives_up_the_least_recently_used_files() {
        let mut kept = Kept::default();
        let identity = Identity { dev: 1, ino: 1, size: SMALL_FILE, modified: (0, 0), changed: (0, 0) };
        let key = |i: usize| (9, Box::from(format!("file-{i}").as_bytes()));
        let fits = BUDGET / (SMALL_FILE as usize + 6 + OVERHEAD);
        for i in 0..fits * 2 {
            kept.insert(key(i), identity, Rc::from(vec![0u8; SMALL_FILE as usize]));
            // The first file stays in use.
            assert!(kept.get(&key(0), &identity).is_some(), "after {i}");
        }
        assert!(kept.cost <= BUDGET, "{} over {BUDGET}", kept.cost);
        assert!(kept.get(&key(1), &identity).is_none(), "the least recently used went first");
        assert!(kept.get(&key(fits * 2 - 1), &identity).is_some(), "the newest stays");
        let counted: usize = kept.files.iter().map(|(key, entry)| cost(key, &entry.bytes)).sum();
        assert_eq!(counted, kept.cost);
    }
}

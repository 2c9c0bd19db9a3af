//! Zero-copy file sending: `sendfile(2)` from a file to a socket, with the disk
//! reads that could block the loop done first on the blocking pool.
//!
//! `sendfile` reads the file through the page cache; a page not there is read from
//! disk inside the call, which would stall every fiber of the loop. So before
//! each call the range is probed with `preadv2(RWF_NOWAIT)`, which reads only what
//! is cached and never waits: one byte at its first and last page. When either is
//! missing, the range is read into the page cache on the blocking pool (nginx's
//! `aio threads`), and the fiber parks meanwhile; `sendfile` then copies from the
//! cache to the socket in the kernel.

use std::fs::File;
use std::io::{self, IoSliceMut};
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;

use rustix::io::ReadWriteFlags;

/// The most one call hands `sendfile`, and so the most a cold range reads ahead:
/// large enough to fill a socket buffer, small enough that one fast client does
/// not keep its fiber running long while others wait.
pub(crate) const MAX_CHUNK: usize = 512 * 1024;

/// Whether the bytes of `file` in `offset..offset + len` are likely all in the page
/// cache: its first and last byte are (readahead fills the pages between). A file
/// system without `RWF_NOWAIT` says nothing, and is taken as cached.
pub(crate) fn is_cached(file: &File, offset: u64, len: usize) -> bool {
    let last = offset + len.saturating_sub(1) as u64;
    let page = crate::sys::memory::page_size() as u64;
    let probes = if offset / page == last / page { &[offset][..] } else { &[offset, last][..] };
    probes.iter().all(|&at| {
        let mut byte = [0u8];
        match rustix::io::preadv2(file, &mut [IoSliceMut::new(&mut byte)], at, ReadWriteFlags::NOWAIT) {
            Ok(_) => true,
            Err(e) => e != rustix::io::Errno::AGAIN,
        }
    })
}

/// Reads `offset..offset + len` of `file` into the page cache on the blocking pool,
/// parking the calling fiber (outside a runtime, on this thread). Each read names its
/// offset (`pread`): the descriptor's position, which a duplicate shares with the
/// original and so with every response sending the same open file, is left alone.
pub(crate) fn warm(file: &File, offset: u64, len: usize) -> io::Result<()> {
    let file = file.try_clone()?;
    crate::spawn_blocking(move || {
        let _ = rustix::fs::fadvise(&file, offset, std::num::NonZeroU64::new(len as u64), rustix::fs::Advice::WillNeed);
        let mut done = 0;
        let mut buf = vec![0u8; len.min(64 * 1024)];
        while done < len {
            let want = (len - done).min(buf.len());
            match file.read_at(&mut buf[..want], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    })
}

/// One `sendfile` call: up to `len` bytes of `file` from `offset` to `socket`,
/// which is non-blocking; `WouldBlock` when the socket's buffer is full.
pub(crate) fn send_once(socket: impl AsFd, file: &File, offset: u64, len: usize) -> io::Result<usize> {
    let mut at = offset;
    Ok(rustix::fs::sendfile(socket, file, Some(&mut at), len)?)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    /// Tries to evict a range this many times before the test gives up.
    const EVICTIONS: usize = 50;

    /// A file of `len` bytes in the target directory (a disk file system, so the page
    /// cache can drop it), written out.
    fn written_file(len: usize) -> (std::path::PathBuf, File) {
        let dir = std::env::current_exe().unwrap().parent().unwrap().to_path_buf();
        let path = dir.join(format!("send-file-cold-{}-{len}", std::process::id()));
        let mut file = File::create(&path).unwrap();
        file.write_all(&vec![7u8; len]).unwrap();
        file.sync_all().unwrap();
        let file = File::open(&path).unwrap();
        (path, file)
    }

    /// Drops `file` from the page cache until [`is_cached`] finds `offset..offset + len` gone;
    /// whether it did within [`EVICTIONS`] tries. `posix_fadvise(DONTNEED)` passes over a page
    /// it cannot drop at once (locked for a read in flight, such as the readahead a probe may
    /// start; held for a moment elsewhere), which a machine under load makes likelier.
    fn evicted(file: &File, offset: u64, len: usize) -> bool {
        (0..EVICTIONS).any(|attempt| {
            if attempt > 0 {
                crate::sleep(std::time::Duration::from_millis(10));
            }
            rustix::fs::fadvise(file, 0, None, rustix::fs::Advice::DontNeed).unwrap();
            !is_cached(file, offset, len)
        })
    }

    #[test]
    fn a_range_evicted_from_the_page_cache_is_cold_until_warmed() {
        let len = 4 << 20;
        let (path, file) = written_file(len);
        let (start, end) = (len as u64 / 2, MAX_CHUNK);
        assert!(evicted(&file, start, end), "dropped from the page cache within {EVICTIONS} tries");
        warm(&file, start, end).unwrap();
        assert!(is_cached(&file, start, end), "read in by warm");
        std::fs::remove_file(path).unwrap();
    }
}

//! Address space for fiber stacks: reserve, guard, release, and the limits that bound them.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// `MADV_GUARD_INSTALL` (Linux 6.13+): turn pages of a mapping into guard regions
/// that fault on access, without splitting the mapping. Neither rustix nor the
/// `libc` crate names it yet, so it is the one call here made through `libc`.
const MADV_GUARD_INSTALL: libc::c_int = 102;

/// The kernel's page size, asked once per process: asking goes through libc's `sysconf`, some fifty
/// instructions that every fiber's creation would otherwise pay.
pub(crate) fn page_size() -> usize {
    static PAGE: AtomicUsize = AtomicUsize::new(0);
    match PAGE.load(Ordering::Relaxed) {
        0 => {
            let page = rustix::param::page_size();
            PAGE.store(page, Ordering::Relaxed);
            page
        }
        page => page,
    }
}

/// Reserves `len` bytes of zeroed, readable and writable address space.
///
/// Memory is committed only as pages are touched (`MAP_NORESERVE`), and the
/// region never uses transparent huge pages, so an untouched stack costs no RAM.
pub(crate) fn reserve(len: usize) -> io::Result<usize> {
    use rustix::mm::{MapFlags, ProtFlags};
    let flags = MapFlags::PRIVATE | MapFlags::NORESERVE | MapFlags::STACK;
    // SAFETY: an anonymous private mapping at an address of the kernel's choosing
    // cannot alias any existing Rust object.
    let addr =
        unsafe { rustix::mm::mmap_anonymous(std::ptr::null_mut(), len, ProtFlags::READ | ProtFlags::WRITE, flags)? };
    // SAFETY: `addr..addr+len` is the mapping just created and owned by no one else.
    // A failure only means huge pages stay as the system default, so it is ignored.
    let _ = unsafe { rustix::mm::madvise(addr, len, rustix::mm::Advice::LinuxNoHugepage) };
    Ok(addr as usize)
}

/// Returns a region obtained from [`reserve`] to the kernel.
///
/// # Safety
///
/// `addr..addr+len` must be exactly a region returned by [`reserve`], and no
/// live reference may point into it.
pub(crate) unsafe fn release(addr: usize, len: usize) {
    // SAFETY: the caller guarantees the region is ours and unreferenced. Unmapping a
    // region we mapped fails only for arguments the caller vouched for.
    let _ = unsafe { rustix::mm::munmap(addr as *mut std::ffi::c_void, len) };
}

/// Gives the pages of `addr..addr+len` (page aligned, inside a region from [`reserve`]) back to
/// the kernel (`MADV_DONTNEED`): they cost no memory until touched again, and then read as zeros.
///
/// # Safety
///
/// Nothing in the range may be read again before it is written: whatever it held is lost.
pub(crate) unsafe fn discard(addr: usize, len: usize) -> io::Result<()> {
    use rustix::mm::Advice;
    // SAFETY: the range is the caller's to lose, as it promises; the mapping itself stays.
    unsafe { rustix::mm::madvise(addr as *mut std::ffi::c_void, len, Advice::LinuxDontNeed) }.map_err(io::Error::from)
}

/// How a guard page is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum GuardKind {
    /// `madvise(MADV_GUARD_INSTALL)`: no extra kernel mapping.
    Kernel,
    /// `mprotect(PROT_NONE)`: splits the mapping, costing two mappings per stack.
    Protect,
}

/// Whether this kernel supports `MADV_GUARD_INSTALL`, probed once per process.
pub(crate) fn kernel_guards_supported() -> bool {
    static SUPPORTED: OnceLock<bool> = OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        let page = page_size();
        let Ok(addr) = reserve(page) else { return false };
        let ok = guard(addr, page, GuardKind::Kernel).is_ok();
        // SAFETY: `addr` is the one-page probe region reserved above, referenced by nothing.
        unsafe { release(addr, page) };
        ok
    })
}

/// Makes `addr..addr+len` (page aligned, inside a reserved region) fault on any access.
pub(crate) fn guard(addr: usize, len: usize, kind: GuardKind) -> io::Result<()> {
    let ptr = addr as *mut std::ffi::c_void;
    match kind {
        GuardKind::Kernel => {
            // SAFETY: the range lies inside a region this process reserved and that no
            // Rust object occupies (it is a stack's guard page); it only becomes inaccessible.
            let rc = unsafe { libc::madvise(ptr, len, MADV_GUARD_INSTALL) };
            if rc == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        }
        // SAFETY: as above.
        GuardKind::Protect => Ok(unsafe { rustix::mm::mprotect(ptr, len, rustix::mm::MprotectFlags::empty()) }?),
    }
}

/// The kernel's limit on mappings per process (`vm.max_map_count`).
pub(crate) fn max_map_count() -> usize {
    std::fs::read_to_string("/proc/sys/vm/max_map_count").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(65530)
}

/// How many mappings this process holds now.
pub(crate) fn map_count() -> usize {
    std::fs::read("/proc/self/maps").map(|maps| maps.iter().filter(|&&b| b == b'\n').count()).unwrap_or(0)
}

/// Memory the kernel reports as available for new allocations, in bytes.
pub(crate) fn available_memory() -> Option<usize> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

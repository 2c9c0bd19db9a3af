//! Fiber stacks: carved from large mappings, guard-paged, and pooled per thread.
//!
//! A stack is a *slot*: one guard page at the low end, then the usable stack.
//! Slots are carved from *chunks*, mappings that double in size (16 slots, then
//! 32, … up to 1024), so a million stacks cost about a thousand mappings. A freed
//! stack goes on its thread's free list and the next fiber reuses it: after
//! warm-up, creating a fiber maps no memory and makes no system call. A stack
//! marked [`retire`](PooledStack::retire) (a runtime's worker idle for long) gives
//! its pages back to the kernel when freed (one `madvise`) and is reused after the
//! warm ones, so a loop that once ran ten thousand tasks keeps their address
//! space, not their memory.
//!
//! Guard pages are made one of two ways, chosen once per process:
//!
//! | kernel | guard made by | mappings per stack | limit met first |
//! |---|---|---|---|
//! | Linux 6.13+ | `madvise(MADV_GUARD_INSTALL)` | none (1 per chunk) | memory |
//! | older | `mprotect(PROT_NONE)` | 2 (the split) | `vm.max_map_count`: ~32,000 stacks at 65530 |
//!
//! Both protect the same way: a fiber that runs off its stack faults on the guard
//! page and the process stops with "a fiber's stack overflowed". Every limit is
//! checked before it is hit, and creation returns a [`StackError`] naming it.

use std::cell::RefCell;
use std::fmt;
use std::io;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use crate::sys::memory::{self, GuardKind};
use crate::sys::overflow::{self, StackUse};

/// Usable bytes of a fiber stack unless [`Builder::stack_size`](super::Builder::stack_size)
/// says otherwise. Only the pages a fiber touches become resident.
pub const DEFAULT_STACK_SIZE: usize = 128 * 1024;

const FIRST_CHUNK_SLOTS: usize = 16;
const MAX_CHUNK_SLOTS: usize = 1024;
/// Mappings left for everything else in the process (libraries, malloc, threads).
const MAP_COUNT_RESERVE: usize = 1024;

/// Why a fiber's stack could not be made.
#[derive(Debug)]
#[non_exhaustive]
pub enum StackError {
    /// Guard pages made with `mprotect` cost two kernel mappings per stack, and
    /// the process would pass `vm.max_map_count`.
    MapCountLimit {
        /// The kernel's limit, `vm.max_map_count`.
        limit: usize,
        /// Guarded stacks this process holds now.
        stacks: usize,
    },
    /// Mapping another chunk of stacks would pass the memory the kernel reports available.
    OutOfMemory {
        /// Bytes the new chunk would need resident (one page per stack, at least).
        needed: usize,
        /// Bytes the kernel reports available (`MemAvailable`).
        available: usize,
    },
    /// The limit set with [`set_stack_limit`] is reached.
    Cap {
        /// The configured number of live stacks on this thread.
        limit: usize,
    },
    /// The kernel refused a mapping or a guard page.
    Os(io::Error),
}

impl fmt::Display for StackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StackError::MapCountLimit { limit, stacks } => write!(
                f,
                "cannot make another fiber stack: vm.max_map_count = {limit} would be passed \
                 ({stacks} stacks hold 2 kernel mappings each for their mprotect guard pages); \
                 allow N fibers with `sysctl -w vm.max_map_count=<2*N + {MAP_COUNT_RESERVE}>` \
                 (for {stacks} more: {}), or use Linux 6.13+ where guard pages cost no mapping",
                limit + 2 * stacks
            ),
            StackError::OutOfMemory { needed, available } => write!(
                f,
                "cannot make another fiber stack: {needed} more bytes would pass the {available} \
                 bytes of memory available (MemAvailable)"
            ),
            StackError::Cap { limit } => {
                write!(f, "cannot make another fiber stack: the limit of {limit} live stacks on this thread is reached")
            }
            StackError::Os(e) => write!(f, "cannot make another fiber stack: {e}"),
        }
    }
}

impl std::error::Error for StackError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StackError::Os(e) => Some(e),
            _ => None,
        }
    }
}

/// Caps the number of live fiber stacks on this thread (`None`: no cap beyond the
/// system's own limits). Creating a fiber past the cap returns [`StackError::Cap`].
///
/// # Examples
///
/// ```
/// use neverblock::fiber::{self, Fiber, StackError};
///
/// fiber::set_stack_limit(Some(1));
/// let first = Fiber::new(|x: u32| x).unwrap();
/// assert!(matches!(Fiber::new(|x: u32| x), Err(StackError::Cap { limit: 1 })));
/// drop(first);
/// fiber::set_stack_limit(None);
/// ```
pub fn set_stack_limit(limit: Option<usize>) {
    CAP.with(|c| c.set(limit));
}

/// Statistics of this thread's stack pools, for tests and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackStats {
    /// Stacks in use by fibers.
    pub live: usize,
    /// Stacks carved and waiting on the free list (with their pages, or given back when retired).
    pub free: usize,
    /// Chunks mapped (kernel mappings, not counting guard splits).
    pub chunks: usize,
}

/// Reports this thread's stack pools.
///
/// # Examples
///
/// ```
/// use neverblock::fiber::{self, Fiber};
///
/// let f = Fiber::new(|x: u32| x + 1).unwrap();
/// assert!(fiber::stack_stats().live >= 1);
/// assert_eq!(f.resume(1).unwrap(), 2);
/// ```
pub fn stack_stats() -> StackStats {
    POOLS.with(|pools| {
        pools.borrow().iter().fold(StackStats::default(), |acc, pool| {
            let state = pool.state.borrow();
            StackStats {
                live: acc.live + state.live,
                free: acc.free + state.free.len() + state.cold.len(),
                chunks: acc.chunks + state.chunks.len(),
            }
        })
    })
}

/// Which way this process makes guard pages.
pub(crate) fn guard_kind(force_protect: bool) -> GuardKind {
    if !force_protect && memory::kernel_guards_supported() {
        GuardKind::Kernel
    } else {
        GuardKind::Protect
    }
}

thread_local! {
    static POOLS: RefCell<Vec<Rc<Pool>>> = const { RefCell::new(Vec::new()) };
    static CAP: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// Kernel mappings held by all pools of the process, for the `vm.max_map_count` check.
static MAPPINGS: AtomicUsize = AtomicUsize::new(0);
/// Guarded stacks whose guard page split their chunk (`mprotect`), process-wide.
static SPLIT_STACKS: AtomicUsize = AtomicUsize::new(0);

/// The smallest stack handed out: a page for the first frames and then some.
const MIN_STACK_SIZE: usize = 4096;

/// Takes a stack of `size` usable bytes from this thread's pool for `used`.
pub(crate) fn allocate(size: usize, guard: GuardKind, used: StackUse) -> Result<PooledStack, StackError> {
    let page = memory::page_size();
    // A page is a power of two: a mask rounds up without a division.
    let size = (size.max(MIN_STACK_SIZE) + page - 1) & !(page - 1);
    let pool = POOLS.with(|pools| {
        let mut pools = pools.borrow_mut();
        if let Some(pool) = pools.iter().find(|p| p.size == size && p.guard == guard && p.used == used) {
            return pool.clone();
        }
        overflow::ensure_alt_stack();
        let pool = Rc::new(Pool { size, guard, used, page, state: RefCell::new(PoolState::default()) });
        pools.push(pool.clone());
        pool
    });
    let low = pool.take()?;
    Ok(PooledStack { low, high: low + page + size, pool, retired: false })
}

/// Room left below the frame of [`trim_below_here`] for the call that discards: its own frames.
const TRIM_MARGIN: usize = 1024;

/// Gives the kernel back the pages of the running stack, whose usable part is `limit..base`, that
/// lie wholly below this call's frame (and a margin for the call that does it); returns how many
/// bytes. Out of line, so that its frame is below every frame of its callers.
#[inline(never)]
pub(crate) fn trim_below_here((limit, base): (usize, usize)) -> usize {
    let here = stack_pointer();
    if here <= limit || here > base {
        return 0; // not on this stack (a signal handler's): nothing is known to be free
    }
    let page = memory::page_size();
    let top = here.saturating_sub(TRIM_MARGIN) & !(page - 1);
    if top <= limit {
        return 0;
    }
    // SAFETY: the stack grows down and this frame is its lowest in use: `limit..top` lies below it
    // and below the margin the discarding call's frames need, so no live frame and no value any
    // frame refers to is there (a signal handler runs on the thread's alternate stack, or, on
    // this one, returns before the call that discards starts or begins after it ends).
    match unsafe { memory::discard(limit, top - limit) } {
        Ok(()) => top - limit,
        Err(_) => 0,
    }
}

/// The stack pointer: where the running frame's stack ends. Not a local's address, which
/// AddressSanitizer may place on a fake stack elsewhere.
#[inline(always)]
fn stack_pointer() -> usize {
    let sp: usize;
    // SAFETY: copies the stack pointer register; reads and writes no memory.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags));
    }
    // SAFETY: as above.
    #[cfg(target_arch = "aarch64")]
    unsafe {
        std::arch::asm!("mov {}, sp", out(reg) sp, options(nomem, nostack, preserves_flags));
    }
    sp
}

/// A fiber stack on loan from its thread's pool; dropping it returns it.
pub(crate) struct PooledStack {
    low: usize,
    high: usize,
    pool: Rc<Pool>,
    /// Give the pages back to the kernel when freed (see [`retire`](PooledStack::retire)).
    retired: bool,
}

impl fmt::Debug for PooledStack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PooledStack({:#x}..{:#x})", self.low, self.high)
    }
}

impl PooledStack {
    /// Marks the stack to give its pages back to the kernel when it is freed, rather than wait
    /// warm for the next fiber: its fiber is one a runtime let go after it sat idle.
    pub(crate) fn retire(&mut self) {
        self.retired = true;
    }

    /// The high end of the stack (stacks grow down from here), page aligned.
    pub(crate) fn base(&self) -> usize {
        self.high
    }

    /// The low end of the usable stack, just above its guard page.
    pub(crate) fn limit(&self) -> usize {
        self.low + self.pool.page
    }
}

impl Drop for PooledStack {
    fn drop(&mut self) {
        let mut state = self.pool.state.borrow_mut();
        state.live -= 1;
        if !self.retired {
            return state.free.push(self.low);
        }
        let (limit, len) = (self.limit(), self.pool.size);
        // SAFETY: the stack's fiber has finished or was unwound, or never ran: no frame on it will
        // run again, and the next fiber to take it writes its first frame before reading anything.
        if unsafe { memory::discard(limit, len) }.is_ok() {
            state.cold.push(self.low);
        } else {
            state.free.push(self.low);
        }
    }
}

/// The stacks of one size, guard kind and use on one thread.
struct Pool {
    size: usize,
    guard: GuardKind,
    /// Whose stacks: the overflow message names the setting that sizes them.
    used: StackUse,
    page: usize,
    state: RefCell<PoolState>,
}

#[derive(Default)]
struct PoolState {
    /// Slots ready for reuse, most recently freed last (reused first: its pages are warm).
    free: Vec<usize>,
    /// Slots of retired stacks, whose pages were given back: reused once `free` is empty.
    cold: Vec<usize>,
    chunks: Vec<Chunk>,
    /// The next uncarved slot of the newest chunk, and that chunk's end.
    carve: usize,
    carve_end: usize,
    live: usize,
}

struct Chunk {
    base: usize,
    len: usize,
    registration: Option<usize>,
}

impl Pool {
    fn slot(&self) -> usize {
        self.page + self.size
    }

    /// Hands out a slot: a freed one if any, else a new one carved (and guarded).
    fn take(&self) -> Result<usize, StackError> {
        let mut state = self.state.borrow_mut();
        if let Some(limit) = CAP.with(|c| c.get()) {
            if state.live >= limit {
                return Err(StackError::Cap { limit });
            }
        }
        let low = match state.free.pop().or_else(|| state.cold.pop()) {
            Some(low) => low,
            None => self.carve(&mut state)?,
        };
        state.live += 1;
        Ok(low)
    }

    fn carve(&self, state: &mut PoolState) -> Result<usize, StackError> {
        if self.guard == GuardKind::Protect {
            check_map_count(2)?;
        }
        if state.carve == state.carve_end {
            self.map_chunk(state)?;
        }
        let low = state.carve;
        memory::guard(low, self.page, self.guard).map_err(StackError::Os)?;
        if self.guard == GuardKind::Protect {
            MAPPINGS.fetch_add(2, Ordering::Relaxed);
            SPLIT_STACKS.fetch_add(1, Ordering::Relaxed);
        }
        state.carve += self.slot();
        Ok(low)
    }

    fn map_chunk(&self, state: &mut PoolState) -> Result<(), StackError> {
        let slots = (FIRST_CHUNK_SLOTS << state.chunks.len().min(10)).min(MAX_CHUNK_SLOTS);
        let len = slots * self.slot();
        check_map_count(1)?;
        let needed = slots * self.page;
        if let Some(available) = memory::available_memory() {
            if needed > available {
                return Err(StackError::OutOfMemory { needed, available });
            }
        }
        let base = memory::reserve(len).map_err(StackError::Os)?;
        MAPPINGS.fetch_add(1, Ordering::Relaxed);
        let registration = overflow::register(base, len, self.slot(), self.page, self.used);
        state.chunks.push(Chunk { base, len, registration });
        state.carve = base;
        state.carve_end = base + len;
        Ok(())
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let slot = self.slot();
        let state = self.state.get_mut();
        let carved = state.chunks.iter().map(|c| c.len / slot).sum::<usize>() - (state.carve_end - state.carve) / slot;
        for chunk in state.chunks.drain(..) {
            if let Some(index) = chunk.registration {
                overflow::unregister(index);
            }
            // SAFETY: every stack of this pool holds an `Rc` to it, so none is alive
            // now: no fiber runs on, and no reference points into, this chunk.
            unsafe { memory::release(chunk.base, chunk.len) };
            MAPPINGS.fetch_sub(1, Ordering::Relaxed);
        }
        if self.guard == GuardKind::Protect {
            MAPPINGS.fetch_sub(2 * carved, Ordering::Relaxed);
            SPLIT_STACKS.fetch_sub(carved, Ordering::Relaxed);
        }
    }
}

/// Fails if `more` mappings would take the process past `vm.max_map_count`.
fn check_map_count(more: usize) -> Result<(), StackError> {
    static BASELINE: OnceLock<(usize, usize)> = OnceLock::new();
    let &(limit, baseline) = BASELINE.get_or_init(|| (memory::max_map_count(), memory::map_count()));
    let budget = limit.saturating_sub(baseline + MAP_COUNT_RESERVE);
    if MAPPINGS.load(Ordering::Relaxed) + more > budget {
        return Err(StackError::MapCountLimit { limit, stacks: SPLIT_STACKS.load(Ordering::Relaxed) });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{switch, Fiber};
    use super::*;

    /// How many pages of `low..high` (page aligned) are resident.
    fn resident_pages(low: usize, high: usize) -> usize {
        let page = memory::page_size();
        let mut map = vec![0u8; (high - low) / page];
        // SAFETY: `low..high` is mapped (part of a stack chunk) and `map` has a byte per page.
        let rc = unsafe { libc::mincore(low as *mut libc::c_void, high - low, map.as_mut_ptr()) };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        map.iter().filter(|&&b| b & 1 == 1).count()
    }

    #[inline(never)]
    fn deep(n: u8) -> u8 {
        let scratch = std::hint::black_box([n; 32 * 1024]);
        scratch[usize::from(n)]
    }

    #[test]
    fn trimming_gives_back_the_pages_below_the_caller_and_they_come_back_as_zeros() {
        let fiber = Fiber::new(|n: u8| {
            let bounds = switch::current_stack_bounds().expect("on a fiber");
            let limit = bounds.0;
            let here = stack_pointer() & !(memory::page_size() - 1);
            let first = deep(n);
            let deep_pages = resident_pages(limit, here - memory::page_size());
            assert!(deep_pages >= 7, "the 32 KiB frame made its pages resident: {deep_pages}");
            let trimmed = trim_below_here(bounds);
            assert!(trimmed >= 32 * 1024, "{trimmed}");
            assert_eq!(resident_pages(limit, here - memory::page_size()), 0, "all below the caller went");
            first + deep(n)
        })
        .unwrap();
        assert_eq!(fiber.resume(3).unwrap(), 6, "the pages came back to a second deep call");
    }

    #[test]
    fn a_retired_stack_gives_its_pages_back_when_freed_and_is_reused_after_the_warm_ones() {
        let fiber = |retire: bool| {
            Fiber::new(move |depth: usize| {
                let bounds = switch::current_stack_bounds().expect("on a fiber");
                deep(u8::try_from(depth).unwrap());
                if retire {
                    switch::with_current(switch::retire_stack);
                }
                bounds.0
            })
            .unwrap()
        };
        let (warm, retired) = (fiber(false), fiber(true));
        let warm_low = warm.resume(1).unwrap();
        let retired_low = retired.resume(1).unwrap();
        let size = DEFAULT_STACK_SIZE;
        assert!(resident_pages(warm_low, warm_low + size) >= 8, "a freed stack keeps its pages");
        assert_eq!(resident_pages(retired_low, retired_low + size), 0, "a retired one gave them back");
        let fresh: Vec<Fiber<usize>> = (0..2).map(|_| fiber(false)).collect();
        let lows: Vec<usize> = fresh.iter().map(|f| f.resume(0).unwrap()).collect();
        assert_eq!(lows, [warm_low, retired_low], "the warm stack is reused first");
    }

    #[test]
    fn a_thread_stack_is_not_trimmed() {
        assert_eq!(super::super::trim_stack(), 0);
    }
}

//! Stack overflow in a fiber: a fault in a stack's guard page stops the process
//! with a message that says so, instead of a bare segmentation fault.
//!
//! Regions of fiber stacks are entered in a fixed, lock-free table that the
//! signal handler can read. A fault outside every region goes to the handler
//! that was installed before ours (Rust's own, which reports overflows of
//! thread stacks), or to the default action.

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Once;

/// How many stack regions can be registered at once; regions grow geometrically,
/// so this bounds fibers at tens of millions, far past any other limit.
const SLOTS: usize = 4096;

/// One registered region: `slot`-sized stacks from `start` to `end`, each
/// beginning with `guard` bytes of guard page. `end == 0` marks a free entry.
struct Region {
    start: AtomicUsize,
    end: AtomicUsize,
    slot: AtomicUsize,
    guard: AtomicUsize,
    /// Whose stacks these are: 0 fibers made with `fiber::Builder`, 1 runtime tasks.
    tasks: AtomicBool,
}

/// Whose stacks a region holds, so the message names the setting that sizes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum StackUse {
    /// Fibers made with `fiber::Builder`.
    Fiber,
    /// The worker fibers that run runtime tasks.
    Task,
}

#[allow(clippy::declare_interior_mutable_const)] // used only to initialise the table
const EMPTY: Region = Region {
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    slot: AtomicUsize::new(0),
    guard: AtomicUsize::new(0),
    tasks: AtomicBool::new(false),
};
static REGIONS: [Region; SLOTS] = [EMPTY; SLOTS];
static CLAIMED: [AtomicBool; SLOTS] = [const { AtomicBool::new(false) }; SLOTS];

/// The handlers in place before ours, for faults that are not fiber overflows.
static mut PREVIOUS: [MaybeUninit<libc::sigaction>; 2] = [MaybeUninit::zeroed(), MaybeUninit::zeroed()];
const SIGNALS: [libc::c_int; 2] = [libc::SIGSEGV, libc::SIGBUS];

/// Enters a region of stacks so that a fault in one of its guard pages is reported.
/// Returns the entry to pass to [`unregister`], or `None` when the table is full.
pub(crate) fn register(start: usize, len: usize, slot: usize, guard: usize, used: StackUse) -> Option<usize> {
    install();
    let index =
        CLAIMED.iter().position(|c| c.compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed).is_ok())?;
    let region = &REGIONS[index];
    region.start.store(start, Ordering::Relaxed);
    region.slot.store(slot, Ordering::Relaxed);
    region.guard.store(guard, Ordering::Relaxed);
    region.tasks.store(used == StackUse::Task, Ordering::Relaxed);
    region.end.store(start + len, Ordering::Release);
    Some(index)
}

/// Removes an entry made by [`register`] before its region is unmapped.
pub(crate) fn unregister(index: usize) {
    REGIONS[index].end.store(0, Ordering::Release);
    CLAIMED[index].store(false, Ordering::Release);
}

/// Gives this thread an alternate signal stack if it has none, so the handler can
/// run when the thread's current stack is the one that overflowed. Rust's runtime
/// gives one to the threads it starts; threads started elsewhere may lack it.
pub(crate) fn ensure_alt_stack() {
    thread_local!(static DONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
    if DONE.with(|d| d.replace(true)) {
        return;
    }
    let mut current = MaybeUninit::<libc::stack_t>::zeroed();
    // SAFETY: a null new stack only queries; `current` is valid for writing.
    let rc = unsafe { libc::sigaltstack(std::ptr::null(), current.as_mut_ptr()) };
    // SAFETY: sigaltstack filled `current` when it returned 0.
    if rc != 0 || unsafe { current.assume_init() }.ss_flags & libc::SS_DISABLE == 0 {
        return;
    }
    let size = libc::SIGSTKSZ.max(64 * 1024);
    let Ok(base) = super::memory::reserve(size) else { return };
    let stack = libc::stack_t { ss_sp: base as *mut libc::c_void, ss_flags: 0, ss_size: size };
    // SAFETY: `base..base+size` is a fresh mapping owned by this thread for the rest
    // of its life (it is deliberately never released: the kernel may run a handler on it).
    unsafe { libc::sigaltstack(&stack, std::ptr::null_mut()) };
}

fn install() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        for (i, &signal) in SIGNALS.iter().enumerate() {
            // SAFETY: `sigaction` is plain data; zeroed is a valid empty value.
            let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
            action.sa_sigaction = on_fault as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            // SAFETY: `PREVIOUS[i]` is written only here, once, before the handler that
            // reads it is installed (the new handler is installed by this same call,
            // which stores the previous action first).
            unsafe {
                libc::sigemptyset(&mut action.sa_mask);
                let previous = (*std::ptr::addr_of_mut!(PREVIOUS))[i].as_mut_ptr();
                libc::sigaction(signal, &action, previous);
            }
        }
    });
}

/// Finds the registered stack whose guard page holds `addr`; returns its usable
/// size and whose it is.
fn overflowed_stack(addr: usize) -> Option<(usize, StackUse)> {
    REGIONS.iter().find_map(|r| {
        let end = r.end.load(Ordering::Acquire);
        let start = r.start.load(Ordering::Relaxed);
        if addr < start || addr >= end {
            return None;
        }
        let (slot, guard) = (r.slot.load(Ordering::Relaxed), r.guard.load(Ordering::Relaxed));
        let used = if r.tasks.load(Ordering::Relaxed) { StackUse::Task } else { StackUse::Fiber };
        ((addr - start) % slot < guard).then_some((slot - guard, used))
    })
}

extern "C" fn on_fault(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for handlers installed with SA_SIGINFO.
    let addr = unsafe { (*info).si_addr() } as usize;
    if let Some((size, used)) = overflowed_stack(addr) {
        report_and_abort(size, used);
    }
    let index = SIGNALS.iter().position(|&s| s == signal).unwrap_or(0);
    // SAFETY: PREVIOUS was fully written by `install` before this handler could run.
    let previous = unsafe { (*std::ptr::addr_of!(PREVIOUS))[index].assume_init() };
    let handler = previous.sa_sigaction;
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // Restore the default action and return: the fault repeats and kills the process.
        // SAFETY: resetting a signal's disposition to the default is always allowed.
        unsafe { libc::signal(signal, libc::SIG_DFL) };
    } else if previous.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler was installed with SA_SIGINFO, so this is its type.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(handler) };
        f(signal, info, context);
    } else {
        // SAFETY: without SA_SIGINFO the previous handler takes only the signal number.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
        f(signal);
    }
}

/// Writes the overflow message with async-signal-safe calls only, then aborts.
fn report_and_abort(stack_size: usize, used: StackUse) -> ! {
    let mut buf = [0u8; 320];
    let mut len = 0;
    let mut put = |bytes: &[u8]| {
        let n = bytes.len().min(buf.len() - len);
        buf[len..len + n].copy_from_slice(&bytes[..n]);
        len += n;
    };
    put(b"\nneverblock: a fiber's stack overflowed (stack size ");
    let mut digits = [0u8; 20];
    let mut kib = stack_size / 1024;
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (kib % 10) as u8;
        kib /= 10;
        if kib == 0 {
            break;
        }
    }
    put(&digits[i..]);
    put(match used {
        StackUse::Fiber => b" KiB); give the fiber a larger stack with fiber::Builder::stack_size\n".as_slice(),
        StackUse::Task => {
            b" KiB) running a task; give tasks larger stacks with runtime::Builder::stack_size, \
              or this one with runtime::TaskBuilder::stack_size\n"
        }
    });
    // SAFETY: the write(2) system call and abort(3) are async-signal-safe; `buf[..len]` is
    // initialised. The system call, not libc's `write`: with the `hooks` feature that name is
    // a hook, which has no business in a fault handler.
    unsafe {
        libc::syscall(libc::SYS_write, libc::STDERR_FILENO, buf.as_ptr(), len);
        libc::abort();
    }
}

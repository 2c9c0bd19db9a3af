//! UNSAFE: whether this thread is inside a signal handler, so that a hook called
//! from one is the real call, however it interrupted a fiber.
//!
//! `sigaction` and `signal` are hooked too: a handler they install is replaced in
//! the kernel by a trampoline that counts, on the thread, the handlers running,
//! and calls the handler as it asked (`SA_SIGINFO` or not). What they report as
//! the current handler is the caller's, never the trampoline. A handler installed
//! by a raw system call (ASan's, Go's) is not seen, and one left by `siglongjmp`
//! leaves its thread counted as in a handler: its hooks are then real calls.

use std::cell::Cell;
use std::ffi::c_int;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

use libc::{sigaction, sighandler_t, siginfo_t};

use super::real;

thread_local! {
    /// How many signal handlers run on this thread (one interrupts another).
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Signals numbered up to here are tracked (Linux has 64).
const SIGNALS: usize = 65;

/// Each signal's handler as its caller installed it (0 when the trampoline is not installed).
static HANDLERS: [AtomicUsize; SIGNALS] = [const { AtomicUsize::new(0) }; SIGNALS];
/// Each handler's flags as its caller asked (`SA_SIGINFO`, `SA_RESETHAND`, …).
static FLAGS: [AtomicI32; SIGNALS] = [const { AtomicI32::new(0) }; SIGNALS];

/// Whether a signal handler runs on this thread now.
#[inline(always)]
pub(super) fn in_handler() -> bool {
    DEPTH.get() != 0
}

/// Runs the caller's handler of `signal`, counted.
extern "C" fn trampoline(signal: c_int, info: *mut siginfo_t, context: *mut libc::c_void) {
    let Some(index) = index(signal) else { return };
    let handler = HANDLERS[index].load(Ordering::Acquire);
    let flags = FLAGS[index].load(Ordering::Acquire);
    if flags & libc::SA_RESETHAND != 0 {
        // The kernel has put SIG_DFL back for the next one.
        HANDLERS[index].store(0, Ordering::Release);
    }
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        return; // changed meanwhile: nothing of the caller's to run
    }
    DEPTH.set(DEPTH.get() + 1);
    if flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the caller installed this function with SA_SIGINFO, so it takes these three.
        let handler: extern "C" fn(c_int, *mut siginfo_t, *mut libc::c_void) = unsafe { std::mem::transmute(handler) };
        handler(signal, info, context);
    } else {
        // SAFETY: the caller installed this function without SA_SIGINFO, so it takes the number alone.
        let handler: extern "C" fn(c_int) = unsafe { std::mem::transmute(handler) };
        handler(signal);
    }
    DEPTH.set(DEPTH.get() - 1);
}

fn index(signal: c_int) -> Option<usize> {
    usize::try_from(signal).ok().filter(|&i| i > 0 && i < SIGNALS)
}

/// `sigaction(2)` with the trampoline in place of a caller's handler, and the
/// caller's handler reported in place of the trampoline.
///
/// # Safety
///
/// libc's contract for `sigaction`.
pub(super) unsafe fn sigaction_counted(signal: c_int, act: *const sigaction, old: *mut sigaction) -> c_int {
    let Some(index) = index(signal) else {
        // SAFETY: the caller's arguments, under libc's contract.
        return unsafe { real::sigaction(signal, act, old) };
    };
    // SAFETY: a non-null `act` is a sigaction (the contract).
    let asked = unsafe { act.as_ref() }.copied();
    let installed = asked.map(|mut act| {
        if act.sa_sigaction != libc::SIG_DFL && act.sa_sigaction != libc::SIG_IGN {
            act.sa_sigaction = trampoline as *const () as sighandler_t;
            act.sa_flags |= libc::SA_SIGINFO;
        }
        act
    });
    let before = (HANDLERS[index].load(Ordering::Acquire), FLAGS[index].load(Ordering::Acquire));
    if let Some(asked) = asked {
        let wrapped = asked.sa_sigaction != libc::SIG_DFL && asked.sa_sigaction != libc::SIG_IGN;
        FLAGS[index].store(asked.sa_flags, Ordering::Release);
        HANDLERS[index].store(if wrapped { asked.sa_sigaction } else { 0 }, Ordering::Release);
    }
    let act = installed.as_ref().map_or(std::ptr::null(), |a| a as *const sigaction);
    // SAFETY: `act` is null or ours, `old` the caller's (the contract).
    let done = unsafe { real::sigaction(signal, act, old) };
    if done != 0 {
        HANDLERS[index].store(before.0, Ordering::Release);
        FLAGS[index].store(before.1, Ordering::Release);
        return done;
    }
    // SAFETY: a non-null `old` is the caller's sigaction, just filled by the kernel.
    if let Some(old) = unsafe { old.as_mut() } {
        if old.sa_sigaction == trampoline as *const () as sighandler_t && before.0 != 0 {
            old.sa_sigaction = before.0;
            old.sa_flags = before.1;
        }
    }
    done
}

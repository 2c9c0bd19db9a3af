//! UNSAFE: the machine-level switch between two stacks, the crate's one piece of
//! assembly.
//!
//! A fiber that is not running is one stack pointer: below it, on the fiber's own
//! stack, lie the callee-saved registers and the address to continue at.
//! [`switch`] pushes the running fiber's registers, stores its stack pointer,
//! loads the target's and pops the target's registers: a switch from any fiber
//! straight to any other. corosensei, whose coroutines suspend only to whoever
//! resumed them, would need a trip through a manager loop, two switches, for every
//! task switch; this one is the pushes, two stack-pointer moves and the pops of
//! `arch::raw_switch`, and a return that is predicted when both fibers parked at
//! the same call (the usual case for a scheduler).
//!
//! The floating-point control words (MXCSR, x87 CW; FPCR on aarch64) are not
//! saved: Rust code never changes them, and the scheduler switches only between
//! Rust fibers. Nor is the switch ready for control-flow protection (x86 CET
//! shadow stacks, aarch64 BTI): its indirect-jump return would trip them; Rust
//! binaries do not turn them on by default.
//!
//! With the `sanitizer` feature (nightly, `-Zsanitizer=address`), every switch
//! tells AddressSanitizer which stack it lands on, and a fresh fiber's stack is
//! unpoisoned, since frames abandoned on a recycled stack would otherwise keep
//! their red zones.

use std::cell::Cell;
use std::mem::{align_of, size_of};

#[cfg(test)]
mod tests;

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("neverblock's fiber switch is written for x86_64 and aarch64");

/// Where a fiber that is not running continues; for a fiber made by
/// [`Context::new`] that has not run yet, also the closure it starts with.
pub(crate) struct Context {
    /// The saved stack pointer; meaningless while the fiber runs.
    sp: Cell<*mut u8>,
    /// The closure waiting at the top of a fresh fiber's stack, until it starts.
    pending: Cell<Option<Pending>>,
    /// The stack's low end and size, and AddressSanitizer's fake stack of the
    /// fiber while it is not running.
    #[cfg(feature = "sanitizer")]
    bounds: Cell<(usize, usize)>,
    #[cfg(feature = "sanitizer")]
    fake: Cell<*mut u8>,
}

/// A closure written at `at` by [`Context::new`], and how to drop it there.
#[derive(Clone, Copy)]
struct Pending {
    at: *mut u8,
    drop: unsafe fn(*mut u8),
}

impl Context {
    /// The context of a fiber that is running now on a stack it did not get from
    /// [`Context::new`] (a thread's own stack).
    pub(crate) fn running() -> Context {
        Context {
            sp: Cell::new(std::ptr::null_mut()),
            pending: Cell::new(None),
            #[cfg(feature = "sanitizer")]
            bounds: Cell::new((0, 0)),
            #[cfg(feature = "sanitizer")]
            fake: Cell::new(std::ptr::null_mut()),
        }
    }

    /// A context that runs `start` on the stack `limit..base` when first switched
    /// to. `start` must not return (it ends by switching away for good); if it does,
    /// the process aborts. Dropped before it runs, the context drops `start`.
    ///
    /// # Safety
    ///
    /// `limit..base` is writable memory used by nothing else from now until the
    /// last switch to this context is over and `start` has ended by switching
    /// away, and until the context is dropped.
    pub(crate) unsafe fn new<F: FnOnce()>(limit: usize, base: usize, start: F) -> Context {
        let at = (base - size_of::<F>()) & !(align_of::<F>().max(16) - 1);
        let sp = arch::first_sp(at);
        assert!(sp >= limit + 1024, "a fiber's stack has room for its first frame and closure");
        let frame = arch::initial_frame(enter::<F> as *const () as usize, at);
        // A recycled stack keeps the red zones of the frames its last fiber abandoned.
        #[cfg(feature = "sanitizer")]
        // SAFETY: the caller gives us the whole range.
        unsafe {
            sanitizer::__asan_unpoison_memory_region(limit as *const u8, base - limit)
        };
        // SAFETY: `at..at + size_of::<F>()` and the first frame at `sp` lie inside `limit..base`
        // (checked above), are suitably aligned, and the caller gives us that memory.
        unsafe {
            std::ptr::write(at as *mut F, start);
            std::ptr::copy_nonoverlapping(frame.as_ptr(), sp as *mut usize, frame.len());
        }
        Context {
            sp: Cell::new(sp as *mut u8),
            pending: Cell::new(Some(Pending { at: at as *mut u8, drop: drop_pending::<F> })),
            #[cfg(feature = "sanitizer")]
            bounds: Cell::new((limit, base - limit)),
            #[cfg(feature = "sanitizer")]
            fake: Cell::new(std::ptr::null_mut()),
        }
    }

    /// Notes that the fiber's closure has been (or is about to be) started by the
    /// first switch to it, so that dropping the context no longer drops it.
    pub(crate) fn started(&self) {
        self.pending.set(None);
    }

    /// Notes that the fiber of this context, which switched away with [`switch`],
    /// will never run again; `running` is the context of the fiber calling this.
    /// Under AddressSanitizer this frees the fiber's fake stack; otherwise it is free.
    pub(crate) fn retire(&self, running: &Context) {
        #[cfg(feature = "sanitizer")]
        sanitizer::retire(self, running);
        #[cfg(not(feature = "sanitizer"))]
        let _ = running;
    }
}

impl Context {
    /// Drops the closure of a fiber that never started, now: it will never run.
    pub(crate) fn discard(&self) {
        if let Some(p) = self.pending.take() {
            // SAFETY: the closure was written at `p.at` by `new`, has not been started
            // (`started` clears `pending` first) nor dropped (`pending` is taken once),
            // and `new`'s caller keeps the stack until the context is dropped.
            unsafe { (p.drop)(p.at) };
        }
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        self.discard();
    }
}

unsafe fn drop_pending<F>(at: *mut u8) {
    // SAFETY: `at` holds an `F` written by `Context::new` and never moved out.
    unsafe { std::ptr::drop_in_place(at.cast::<F>()) }
}

/// Where a fresh fiber starts: reads its closure off its stack and runs it.
extern "C" fn enter<F: FnOnce()>(at: *mut u8) -> ! {
    #[cfg(feature = "sanitizer")]
    sanitizer::landed(None);
    // SAFETY: `at` holds the `F` written by `Context::new`; the first switch here is the
    // only one (a started context is never switched to at its start again), and
    // `started` was called before it, so the context's drop will not drop it too.
    let start = unsafe { std::ptr::read(at.cast::<F>()) };
    start();
    // Straight to stderr, as std's own fatal-error messages before an abort: no
    // logger is sure to write out a line before the process dies.
    eprintln!("neverblock: a fiber's start closure returned; this is a bug");
    std::process::abort()
}

/// Saves the running fiber's registers and stack pointer into `from` and
/// continues `to`. Returns when some fiber switches to `from`.
///
/// # Safety
///
/// `from` is the context of the running fiber; `to` is another fiber's context,
/// saved by a switch from it (or made by [`Context::new`], `started` called) and
/// not continued since; its stack is still there. Nothing on `from`'s stack may be
/// freed until `from` is continued or abandoned for good.
#[inline(always)]
pub(crate) unsafe fn switch(from: &Context, to: &Context) {
    #[cfg(feature = "sanitizer")]
    sanitizer::leaving(from, to);
    // SAFETY: as the caller promises.
    unsafe { raw_switch(from.sp.as_ptr(), to.sp.get()) };
    #[cfg(feature = "sanitizer")]
    sanitizer::landed(Some(from));
}

/// Continues `to` and abandons the running fiber: nothing on its stack is used
/// again, not even by the switch, so its stack may be reused as soon as `to` runs.
///
/// # Safety
///
/// As for [`switch`]'s `to`; and nothing on the running fiber's stack is used again.
pub(crate) unsafe fn switch_for_good(to: &Context) -> ! {
    thread_local! {
        /// Where an abandoned fiber's stack pointer goes (nowhere anyone reads).
        static ABANDONED: Cell<*mut u8> = const { Cell::new(std::ptr::null_mut()) };
    }
    #[cfg(feature = "sanitizer")]
    sanitizer::leaving_for_good(to);
    let abandoned = ABANDONED.with(Cell::as_ptr);
    // SAFETY: as the caller promises; `abandoned` is this thread's, written and never read.
    unsafe { raw_switch(abandoned, to.sp.get()) };
    unreachable!("a fiber switched away for good is never continued")
}

#[cfg(target_arch = "x86_64")]
mod arch {
    /// Callee-saved registers popped by `raw_switch`, then its return address.
    pub(super) const FRAME_WORDS: usize = 7;

    /// Where the first frame of a fresh fiber goes, below its closure at `at`: the
    /// return into the trampoline leaves the stack 16-byte aligned for its call.
    pub(super) fn first_sp(at: usize) -> usize {
        ((at - (FRAME_WORDS + 1) * 8) & !15) + 8
    }

    /// The first frame of a fresh fiber: `raw_switch` pops r15, r14, r13 (the entry
    /// function), r12 (its argument), rbx and rbp (0: the end of the frame chain),
    /// then returns into `trampoline` with the stack 16-byte aligned.
    pub(super) fn initial_frame(entry: usize, arg: usize) -> [usize; FRAME_WORDS] {
        [0, 0, entry, arg, 0, 0, trampoline as *const () as usize]
    }

    /// Saves rbp, rbx, r12–r15 on the running stack, stores the stack pointer at
    /// `*from` and loads `to`, pops the target's registers and returns into it.
    ///
    /// The return is a `ret` only when the target continues where this call
    /// returns to (both parked through the same call, as a scheduler's tasks do):
    /// then the return-address predictor is right. Otherwise (a resume and the
    /// matching yield, say) it is an indirect jump, which the branch predictor
    /// learns, where a `ret` would be mispredicted on every switch.
    #[unsafe(naked)]
    pub(super) unsafe extern "C" fn raw_switch(from: *mut *mut u8, to: *mut u8) {
        std::arch::naked_asm!(
            "push rbp",
            "push rbx",
            "push r12",
            "push r13",
            "push r14",
            "push r15",
            "mov [rdi], rsp",
            "mov rax, [rsp + 48]",
            "mov rsp, rsi",
            "pop r15",
            "pop r14",
            "pop r13",
            "pop r12",
            "pop rbx",
            "pop rbp",
            "cmp rax, [rsp]",
            "jne 2f",
            "ret",
            "2:",
            "pop rcx",
            "jmp rcx",
        )
    }

    /// Calls the entry function in r13 with the argument in r12. It never returns;
    /// the return address it would use marks the bottom of the fiber's call stack for
    /// unwinders and debuggers (no caller: `rip` undefined).
    #[unsafe(naked)]
    unsafe extern "C" fn trampoline() {
        std::arch::naked_asm!(".cfi_startproc", ".cfi_undefined rip", "mov rdi, r12", "call r13", "ud2", ".cfi_endproc",)
    }
}

#[cfg(target_arch = "aarch64")]
mod arch {
    /// x19–x28, x29 (fp), x30 (lr) and d8–d15, as `raw_switch` stores them.
    pub(super) const FRAME_WORDS: usize = 22;

    /// Where the first frame of a fresh fiber goes, below its closure at `at`.
    pub(super) fn first_sp(at: usize) -> usize {
        (at - FRAME_WORDS * 8) & !15
    }

    /// The first frame of a fresh fiber: x19 holds the argument, x20 the entry
    /// function, fp is 0 (the end of the frame chain) and lr the trampoline.
    pub(super) fn initial_frame(entry: usize, arg: usize) -> [usize; FRAME_WORDS] {
        let mut frame = [0; FRAME_WORDS];
        frame[0] = arg;
        frame[1] = entry;
        frame[11] = trampoline as *const () as usize;
        frame
    }

    /// Saves the callee-saved registers on the running stack, stores the stack
    /// pointer at `*from` and loads `to`, restores the target's registers and
    /// returns into it: by `ret` when the target continues where this call returns
    /// to, else by an indirect branch (see the x86_64 version).
    #[unsafe(naked)]
    pub(super) unsafe extern "C" fn raw_switch(from: *mut *mut u8, to: *mut u8) {
        std::arch::naked_asm!(
            "sub sp, sp, #176",
            "stp x19, x20, [sp, #0]",
            "stp x21, x22, [sp, #16]",
            "stp x23, x24, [sp, #32]",
            "stp x25, x26, [sp, #48]",
            "stp x27, x28, [sp, #64]",
            "stp x29, x30, [sp, #80]",
            "stp d8, d9, [sp, #96]",
            "stp d10, d11, [sp, #112]",
            "stp d12, d13, [sp, #128]",
            "stp d14, d15, [sp, #144]",
            "mov x2, sp",
            "str x2, [x0]",
            "mov x9, x30",
            "mov sp, x1",
            "ldp x19, x20, [sp, #0]",
            "ldp x21, x22, [sp, #16]",
            "ldp x23, x24, [sp, #32]",
            "ldp x25, x26, [sp, #48]",
            "ldp x27, x28, [sp, #64]",
            "ldp x29, x30, [sp, #80]",
            "ldp d8, d9, [sp, #96]",
            "ldp d10, d11, [sp, #112]",
            "ldp d12, d13, [sp, #128]",
            "ldp d14, d15, [sp, #144]",
            "add sp, sp, #176",
            "cmp x9, x30",
            "b.ne 2f",
            "ret",
            "2:",
            "br x30",
        )
    }

    /// Calls the entry function in x20 with the argument in x19; it never returns.
    #[unsafe(naked)]
    unsafe extern "C" fn trampoline() {
        std::arch::naked_asm!(
            ".cfi_startproc",
            ".cfi_undefined x30",
            "mov x0, x19",
            "blr x20",
            "brk #1",
            ".cfi_endproc",
        )
    }
}

use arch::raw_switch;

/// AddressSanitizer's fiber-switch protocol: before a switch, the stack it lands
/// on; after, which stack it came from. Each fiber keeps its own fake stack (for
/// use-after-return detection) in its context while it is not running.
#[cfg(feature = "sanitizer")]
mod sanitizer {
    use super::Context;
    use std::cell::Cell;

    extern "C" {
        fn __sanitizer_start_switch_fiber(fake_stack_save: *mut *mut u8, bottom: *const u8, size: usize);
        fn __sanitizer_finish_switch_fiber(fake_stack_save: *mut u8, bottom_old: *mut *const u8, size_old: *mut usize);
        pub(super) fn __asan_unpoison_memory_region(addr: *const u8, size: usize);
    }

    thread_local! {
        /// The context being left: a thread's own stack learns its bounds from the
        /// first switch away from it.
        static LEAVING: Cell<*const Context> = const { Cell::new(std::ptr::null()) };
    }

    /// Tells ASan the running fiber moves to `to`'s stack, keeping its fake stack in `from`.
    pub(super) fn leaving(from: &Context, to: &Context) {
        let (bottom, size) = to.bounds.get();
        LEAVING.with(|l| l.set(from));
        // SAFETY: a plain call into the ASan runtime; `from.fake` outlives the switch.
        unsafe { __sanitizer_start_switch_fiber(from.fake.as_ptr(), bottom as *const u8, size) };
    }

    /// Tells ASan the running fiber moves to `to`'s stack for good: its fake stack
    /// is freed. Takes no address of a local, so it has no frame on that fake stack.
    pub(super) fn leaving_for_good(to: &Context) {
        let (bottom, size) = to.bounds.get();
        LEAVING.with(|l| l.set(std::ptr::null()));
        // SAFETY: a plain call into the ASan runtime.
        unsafe { __sanitizer_start_switch_fiber(std::ptr::null_mut(), bottom as *const u8, size) };
    }

    /// Tells ASan the switch has landed in `me` (`None`: a fresh fiber), restoring
    /// its fake stack; the context left, if it was a thread's own stack, learns its
    /// bounds.
    pub(super) fn landed(me: Option<&Context>) {
        let fake = me.map_or(std::ptr::null_mut(), |c| c.fake.get());
        let (mut bottom, mut size) = (std::ptr::null(), 0);
        // SAFETY: a plain call into the ASan runtime with valid pointers.
        unsafe { __sanitizer_finish_switch_fiber(fake, &mut bottom, &mut size) };
        let left = LEAVING.with(|l| l.replace(std::ptr::null()));
        // SAFETY: `left` is the context that switched here; it stays alive while
        // suspended (its fiber's `FiberInner` or frame owns it), and this runs right after the switch.
        if let Some(left) = unsafe { left.as_ref() } {
            if left.bounds.get().1 == 0 {
                left.bounds.set((bottom as usize, size));
            }
        }
    }

    /// Frees the fake stack of `dead` (switched away, never to run again), from the
    /// fiber of `running`: makes it current for a moment, as if switching, without
    /// leaving this stack, and then leaves it for good.
    pub(super) fn retire(dead: &Context, running: &Context) {
        let (bottom, size) = running.bounds.get();
        // SAFETY: plain calls into the ASan runtime, paired as a switch requires; no
        // instrumented stack access happens between them.
        unsafe {
            __sanitizer_start_switch_fiber(running.fake.as_ptr(), bottom as *const u8, size);
            __sanitizer_finish_switch_fiber(dead.fake.get(), std::ptr::null_mut(), std::ptr::null_mut());
            __sanitizer_start_switch_fiber(std::ptr::null_mut(), bottom as *const u8, size);
            __sanitizer_finish_switch_fiber(running.fake.get(), std::ptr::null_mut(), std::ptr::null_mut());
        }
    }
}

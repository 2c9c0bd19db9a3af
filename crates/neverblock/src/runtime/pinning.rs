//! Loops pinned to CPUs ([`Builder::pin_threads`](super::Builder::pin_threads)): loop `i` to the
//! `i`-th CPU the thread that starts the runtime may run on, so that a server can have the kernel
//! hand each loop the connections whose packets arrive on its CPU; the helper threads a pinned
//! loop starts (the blocking pool, the sentinel) run where the loop could before it was pinned.

use std::cell::Cell;
use std::io;
use std::thread;

use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};

thread_local! {
    /// The CPU this thread's loop is pinned to, and what it could run on before.
    static PINNED: Cell<Option<(usize, CpuSet)>> = const { Cell::new(None) };
}

/// The CPU for each of `loops` loops, in loop order, or `None` when there are more loops than
/// CPUs this thread may run on (pinning two loops to one CPU would only make them take turns) or
/// its CPUs cannot be read.
pub(super) fn plan(loops: usize) -> Option<Vec<usize>> {
    let allowed = sched_getaffinity(None).ok()?;
    let cpus: Vec<usize> = (0..CpuSet::MAX_CPU).filter(|&cpu| allowed.is_set(cpu)).take(loops).collect();
    if cpus.len() < loops {
        log::info!("{loops} loops on {} CPUs: none pinned", cpus.len());
        return None;
    }
    Some(cpus)
}

/// A loop's thread pinned to its CPU, until this drops (a return or an unwind): then it may run
/// where it could before.
pub(super) struct Pin(CpuSet);

impl Drop for Pin {
    fn drop(&mut self) {
        PINNED.with(|p| p.set(None));
        let _ = sched_setaffinity(None, &self.0);
    }
}

/// Pins the calling thread, loop `index`'s, to `cpu`; a refusal (a cpuset that changed under the
/// process, a sandbox) is logged and leaves the loop unpinned.
pub(super) fn pin(index: usize, cpu: usize) -> Option<Pin> {
    let before = sched_getaffinity(None).ok()?;
    let mut only = CpuSet::new();
    only.set(cpu);
    match sched_setaffinity(None, &only) {
        Ok(()) => {
            PINNED.with(|p| p.set(Some((cpu, before))));
            log::debug!("loop {index} pinned to CPU {cpu}");
            Some(Pin(before))
        }
        Err(e) => {
            log::info!("loop {index} left unpinned: cannot pin it to CPU {cpu}: {e}");
            None
        }
    }
}

/// Starts a thread the runtime needs for itself (the blocking pool's, the sentinel), named `name`:
/// where the calling loop could run before it was pinned, not on its one CPU; anywhere the caller
/// may run when it is not pinned.
pub(crate) fn spawn_helper(name: &str, f: impl FnOnce() + Send + 'static) -> io::Result<thread::JoinHandle<()>> {
    let before_pinning = PINNED.with(Cell::get).map(|(_, before)| before);
    thread::Builder::new().name(name.to_owned()).spawn(move || {
        if let Some(cpus) = before_pinning {
            let _ = sched_setaffinity(None, &cpus);
        }
        f();
    })
}

/// The CPU the calling thread's loop is pinned to: `None` when its runtime was not built with
/// [`Builder::pin_threads`](super::Builder::pin_threads), when it has more loops than the CPUs it
/// may use, when pinning was refused, and outside a runtime.
///
/// # Examples
///
/// ```
/// let cpu = neverblock::runtime::Builder::new().pin_threads(true).run(neverblock::runtime::pinned_cpu);
/// let allowed = rustix::thread::sched_getaffinity(None).unwrap();
/// assert!(allowed.is_set(cpu.unwrap()));
/// assert_eq!(neverblock::run(neverblock::runtime::pinned_cpu), None);
/// ```
pub fn pinned_cpu() -> Option<usize> {
    PINNED.with(Cell::get).map(|(cpu, _)| cpu)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{spawn_on, Builder};

    /// The CPUs the calling thread may run on.
    fn allowed() -> Vec<usize> {
        let set = sched_getaffinity(None).unwrap();
        (0..CpuSet::MAX_CPU).filter(|&cpu| set.is_set(cpu)).collect()
    }

    #[test]
    fn each_loop_runs_on_its_own_cpu_and_the_caller_gets_its_cpus_back() {
        let before = allowed();
        if before.len() < 2 {
            eprintln!("skipped: one CPU allowed, so two loops are not pinned");
            return;
        }
        let seen = Builder::new().threads(2).pin_threads(true).run(|| {
            let here = (pinned_cpu(), allowed());
            let there = spawn_on(1, || (pinned_cpu(), allowed())).join().unwrap();
            [here, there]
        });
        for (index, (cpu, allowed)) in seen.iter().enumerate() {
            assert_eq!(*cpu, Some(before[index]), "loop {index}");
            assert_eq!(*allowed, [before[index]], "loop {index} runs on its CPU alone");
        }
        assert_eq!(allowed(), before, "the calling thread may run anywhere again");
        assert_eq!(pinned_cpu(), None);
    }

    #[test]
    fn more_loops_than_cpus_leaves_every_loop_unpinned() {
        let before = allowed();
        let loops = before.len() + 1;
        let seen = Builder::new().threads(loops).pin_threads(true).run(move || {
            (0..loops).map(|index| spawn_on(index, || (pinned_cpu(), allowed())).join().unwrap()).collect::<Vec<_>>()
        });
        assert!(seen.iter().all(|(cpu, allowed)| cpu.is_none() && *allowed == before), "{seen:?}");
    }

    #[test]
    fn a_helper_thread_a_pinned_loop_starts_runs_on_every_cpu() {
        let before = allowed();
        let (pinned, helper) = Builder::new().pin_threads(true).run(|| {
            let (tx, rx) = std::sync::mpsc::channel();
            spawn_helper("helper", move || tx.send((allowed(), std::thread::spawn(allowed).join().unwrap())).unwrap())
                .unwrap();
            (allowed(), rx.recv().unwrap())
        });
        assert_eq!(pinned.len(), 1);
        let (helper, started_by_helper) = helper;
        assert_eq!(helper, before, "the helper thread");
        assert_eq!(started_by_helper, before, "a thread the helper thread starts");
    }

    #[test]
    fn the_caller_gets_its_cpus_back_when_the_runtime_unwinds() {
        let before = allowed();
        let unwound =
            std::panic::catch_unwind(|| Builder::new().pin_threads(true).run(|| panic!("the runtime's fiber")));
        assert!(unwound.is_err());
        assert_eq!((allowed(), pinned_cpu()), (before, None));
    }

    #[test]
    fn without_pin_threads_no_loop_is_pinned() {
        let before = allowed();
        let seen = Builder::new()
            .threads(2)
            .run(|| [(pinned_cpu(), allowed()), spawn_on(1, || (pinned_cpu(), allowed())).join().unwrap()]);
        assert!(seen.iter().all(|(cpu, allowed)| cpu.is_none() && *allowed == before), "{seen:?}");
    }
}

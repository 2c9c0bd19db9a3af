//! FiberPool: bounded concurrency, FIFO order, reused fibers, counters.

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::rc::Rc;
use std::time::Duration;

use neverblock::fiber::Fiber;
use neverblock::{run, sleep, FiberPool};

#[test]
fn jobs_start_in_order_on_at_most_n_reused_fibers() {
    let (started, fibers, peak) = run(|| {
        let pool = FiberPool::new(3);
        let started = Rc::new(RefCell::new(Vec::new()));
        let fibers = Rc::new(RefCell::new(HashSet::new()));
        let (running, peak) = (Rc::new(Cell::new(0)), Rc::new(Cell::new(0)));
        for i in 0..30 {
            let (started, fibers, running, peak) = (started.clone(), fibers.clone(), running.clone(), peak.clone());
            pool.spawn(move || {
                started.borrow_mut().push(i);
                fibers.borrow_mut().insert(Fiber::<()>::current().id());
                running.set(running.get() + 1);
                peak.set(peak.get().max(running.get()));
                sleep(Duration::from_millis(1));
                running.set(running.get() - 1);
            });
        }
        assert_eq!(pool.queued() + pool.busy(), 30);
        pool.wait_idle().unwrap();
        assert_eq!((pool.completed(), pool.busy(), pool.queued()), (30, 0, 0));
        assert!(pool.workers() <= 3);
        let (s, f, p) = (started.take(), fibers.take(), peak.get());
        (s, f, p)
    });
    assert_eq!(started, (0..30).collect::<Vec<_>>(), "FIFO");
    assert_eq!(fibers.len(), 3, "30 jobs ran on 3 reused fibers");
    assert_eq!(peak, 3);
}

#[test]
fn a_panicking_job_is_counted_and_its_worker_goes_on() {
    run(|| {
        let pool = FiberPool::new(1);
        let after = Rc::new(Cell::new(false));
        pool.spawn(|| panic!("job failed"));
        let a = after.clone();
        pool.spawn(move || a.set(true));
        pool.wait_idle().unwrap();
        assert_eq!((pool.completed(), pool.panicked()), (2, 1));
        assert!(after.get());
    });
}

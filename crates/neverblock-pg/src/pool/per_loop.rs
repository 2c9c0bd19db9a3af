//! `LoopPools`: one pool per event loop, behind a handle any thread may hold.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Pool, PoolBuilder};

thread_local! {
    /// This thread's pool of each `LoopPools`, by its number.
    static POOLS: RefCell<HashMap<u64, Pool>> = RefCell::new(HashMap::new());
}

/// A [`Pool`] for each event loop that asks, made from one [`PoolBuilder`] the
/// first time a loop asks: a `Send + Sync` handle, so an HTTP handler shared by a
/// server's loops can hold it, where a [`Pool`] (whose connections belong to one
/// loop) cannot be shared. Each loop gets a whole pool of the builder's size.
///
/// # Examples
///
/// ```
/// use neverblock_pg::{Config, LoopPools, Pool};
///
/// let pools = LoopPools::new(Pool::builder(Config::new()).max_size(4));
/// let size = neverblock::run(move || pools.pool().status().max_size);
/// assert_eq!(size, 4);
/// ```
#[derive(Debug)]
pub struct LoopPools {
    builder: PoolBuilder,
    /// Names this set in every thread's map; never reused in the process.
    id: u64,
}

impl LoopPools {
    /// Pools to be built from `builder`, one per loop, when first asked for.
    pub fn new(builder: PoolBuilder) -> LoopPools {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        LoopPools { builder, id: NEXT.fetch_add(1, Ordering::Relaxed) }
    }

    /// The calling thread's pool (a handle to it: clones share it).
    pub fn pool(&self) -> Pool {
        POOLS.with(|pools| pools.borrow_mut().entry(self.id).or_insert_with(|| self.builder.clone().build()).clone())
    }
}

impl Drop for LoopPools {
    /// Forgets this thread's pool; other threads' go when their thread ends.
    fn drop(&mut self) {
        let _ = POOLS.try_with(|pools| pools.borrow_mut().remove(&self.id));
    }
}

//! One integration-test binary for the runtime crate.

mod bridge;
mod bridge_h2;
mod fiber_drop;
mod fiber_kill;
mod fiber_rules;
mod fiber_values;
mod mri;
mod net;
mod observe;
mod pool;
mod runtime;
mod stack;
mod support;
mod sync;
mod turn_end;

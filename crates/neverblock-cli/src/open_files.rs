//! The process's open-files limit, raised as far as it may go.
//!
//! A server holds a descriptor for each connection, each file it sends and each upstream
//! connection, so the soft limit most systems start a process with (1,024) is reached long before
//! the machine's. The hard limit is what an administrator allows; Go's runtime raises the soft
//! limit to it at start-up, and `serve` and `get` do the same.

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// Raises the soft open-files limit to the hard one; returns the limit now in force (`None`: no
/// limit). A refusal (a sandbox that forbids `setrlimit`) is logged, and the limit stays.
pub(crate) fn raise_to_hard_limit() -> Option<u64> {
    let limit = getrlimit(Resource::Nofile);
    if limit.current == limit.maximum {
        return limit.current;
    }
    match setrlimit(Resource::Nofile, Rlimit { current: limit.maximum, ..limit }) {
        Ok(()) => {
            log::debug!("raised the open-files limit from {:?} to {:?}", limit.current, limit.maximum);
            limit.maximum
        }
        Err(e) => {
            log::info!("the open-files limit stays at {:?}: {e}", limit.current);
            limit.current
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lowered_soft_limit_is_raised_to_the_hard_one() {
        let before = getrlimit(Resource::Nofile);
        // Linux caps the hard limit (at `nr_open`), so there is one.
        let hard = before.maximum.expect("a hard open-files limit");
        // One below it: any lower could starve the tests running beside this one.
        setrlimit(Resource::Nofile, Rlimit { current: Some(hard - 1), ..before }).expect("lower it");
        assert_eq!(raise_to_hard_limit(), Some(hard));
        assert_eq!(getrlimit(Resource::Nofile).current, Some(hard));
        setrlimit(Resource::Nofile, before).expect("put it back");
    }
}

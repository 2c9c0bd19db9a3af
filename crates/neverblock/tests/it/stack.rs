//! Stacks: pooled reuse, both guard-page paths, overflow, and every limit.

use neverblock::fiber::{self, Builder, Fiber, StackError};

use crate::support::{map_count, mappings_lock, run_example};

#[test]
fn a_hundred_thousand_fibers_reuse_pooled_stacks() {
    let _lock = mappings_lock();
    // Warm up the pool, then check that creating and finishing many fibers maps nothing.
    for _ in 0..100 {
        Fiber::new(|x: u32| x).unwrap().resume(1).unwrap();
    }
    let (maps, chunks) = (map_count(), fiber::stack_stats().chunks);
    for i in 0..100_000u32 {
        let f = Fiber::new(move |x: u32| x + i).unwrap();
        assert_eq!(f.resume(1).unwrap(), i + 1);
    }
    assert_eq!(fiber::stack_stats().chunks, chunks, "no new chunk of stacks was mapped");
    // Without reuse this would map 100 chunks or more; other tests' threads may map a few.
    assert!(map_count() <= maps + 30, "mappings stayed flat: {maps} before, {} after", map_count());
}

#[test]
fn mprotect_guards_cost_two_mappings_per_stack() {
    let _lock = mappings_lock();
    let before = map_count();
    let fibers: Vec<Fiber<u8>> =
        (0..500).map(|_| Builder::new().mprotect_guards(true).build(|x: u8| x).unwrap()).collect();
    let added = map_count() - before;
    assert!((990..=1030).contains(&added), "500 mprotect-guarded stacks added {added} mappings");
    assert!(fibers.iter().all(|f| f.resume(1).unwrap() == 1));
}

#[test]
fn kernel_guards_cost_no_mapping_per_stack() {
    let _lock = mappings_lock();
    let before = map_count();
    let fibers: Vec<Fiber<u8>> = (0..2000).map(|_| Builder::new().stack_size(8192).build(|x: u8| x).unwrap()).collect();
    let added = map_count() - before;
    // On kernels without MADV_GUARD_INSTALL this path is the mprotect one (2 per stack).
    let kernel_guards = added < 100;
    eprintln!("2000 stacks added {added} mappings (kernel guard regions: {kernel_guards})");
    assert!(kernel_guards || added >= 3990);
    assert!(fibers.iter().all(|f| f.resume(2).unwrap() == 2));
}

#[test]
fn a_stack_cap_is_a_clear_error_and_is_survived() {
    let live = fiber::stack_stats().live;
    fiber::set_stack_limit(Some(live + 3));
    let held: Vec<_> = (0..3).map(|_| Fiber::new(|x: u8| x).unwrap()).collect();
    let err = Fiber::new(|x: u8| x).unwrap_err();
    fiber::set_stack_limit(None);
    assert!(matches!(err, StackError::Cap { .. }));
    assert!(err.to_string().contains("limit of"), "{err}");
    drop(held);
    assert_eq!(Fiber::new(|x: u8| x + 1).unwrap().resume(1).unwrap(), 2);
}

#[test]
fn stack_overflow_stops_the_process_with_a_message() {
    for (args, setting) in [
        (&[][..], "fiber::Builder::stack_size"),
        (&["mprotect"][..], "fiber::Builder::stack_size"),
        (&["task"][..], "runtime::Builder::stack_size"),
    ] {
        let out = run_example("stack_overflow", args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: the process must stop");
        assert!(stderr.contains("a fiber's stack overflowed (stack size 16 KiB)"), "{args:?}: {stderr}");
        assert!(stderr.contains(setting), "{args:?}: the message names the setting that applies: {stderr}");
        assert!(!stderr.contains("unreachable"), "{args:?}: {stderr}");
    }
}

#[test]
fn mapping_limit_is_a_clear_error_not_a_crash() {
    let out = run_example("map_count_limit", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("map count limit: true"), "{stderr}");
    assert!(stderr.contains("vm.max_map_count"), "{stderr}");
    assert!(stderr.contains("after freeing: 2"), "{stderr}");
    let fibers: usize =
        stderr.lines().find_map(|l| l.strip_prefix("fibers: ")).and_then(|n| n.parse().ok()).expect("count line");
    let limit: usize = std::fs::read_to_string("/proc/sys/vm/max_map_count").unwrap().trim().parse().unwrap();
    assert!(fibers > limit / 2 - 2000 && fibers < limit / 2, "{fibers} fibers under limit {limit}");
}

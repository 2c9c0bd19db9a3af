//! Ruby 3's fiber rules, scenario by scenario: each is written once in Rust and
//! once in Ruby, records what every call returned, and must match MRI 3.1.

use std::cell::RefCell;

use neverblock::fiber::{self, Fiber, FiberError};

thread_local!(static LOG: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) });

/// Records the outcome of one call in the words the Ruby side uses.
fn rec(outcome: Result<i64, FiberError>) {
    let line = match outcome {
        Ok(v) => format!("value: {v}"),
        Err(e @ FiberError::Panicked(_)) => format!("panic: {}", e.panic_message().unwrap_or("?")),
        Err(e) => format!("error: {e}"),
    };
    LOG.with(|l| l.borrow_mut().push(line));
}

fn new(body: impl FnOnce(i64) -> i64 + 'static) -> Fiber<i64> {
    Fiber::new(body).expect("stack available")
}

fn root() -> Fiber<i64> {
    Fiber::current()
}

pub(crate) struct Scenario {
    pub(crate) name: &'static str,
    /// The same steps in Ruby, with `rec { … }` recording a call's outcome and
    /// `root` bound to the root fiber.
    pub(crate) ruby: &'static str,
    run: fn(),
    /// MRI 3.1's outcomes.
    expected: &'static [&'static str],
}

impl Scenario {
    /// Runs the Rust side and returns the recorded outcomes.
    pub(crate) fn outcomes(&self) -> Vec<String> {
        LOG.with(|l| l.borrow_mut().clear());
        (self.run)();
        LOG.with(|l| l.take())
    }
}

pub(crate) const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "resume_terminated",
        ruby: "f = Fiber.new { |x| x }; rec { f.resume(1) }; rec { f.resume(2) }",
        run: || {
            let f = new(|x| x);
            rec(f.resume(1));
            rec(f.resume(2));
        },
        expected: &["value: 1", "error: attempt to resume a terminated fiber"],
    },
    Scenario {
        name: "resume_current",
        ruby: "f = Fiber.new { rec { Fiber.current.resume(0) }; 5 }; rec { f.resume(0) }",
        run: || {
            let f = new(|_| {
                rec(root().resume(0));
                5
            });
            rec(f.resume(0));
        },
        expected: &["error: attempt to resume the current fiber", "value: 5"],
    },
    Scenario {
        name: "double_resume",
        ruby: "a = Fiber.new { me = Fiber.current; b = Fiber.new { rec { me.resume(0) }; 7 }; rec { b.resume(0) }; 8 }; rec { a.resume(0) }",
        run: || {
            let a = new(|_| {
                let me = root();
                let b = new(move |_| {
                    rec(me.resume(0));
                    7
                });
                rec(b.resume(0));
                8
            });
            rec(a.resume(0));
        },
        expected: &["error: attempt to resume a resumed fiber (double resume)", "value: 7", "value: 8"],
    },
    Scenario {
        name: "resume_the_resuming_root",
        ruby: "a = Fiber.new { rec { root.resume(0) }; 1 }; rec { a.resume(0) }",
        run: || {
            let r = root();
            let a = new(move |_| {
                rec(r.resume(0));
                1
            });
            rec(a.resume(0));
        },
        expected: &["error: attempt to resume a resuming fiber", "value: 1"],
    },
    Scenario {
        name: "yield_from_root",
        ruby: "rec { Fiber.yield(1) }",
        run: || rec(fiber::yield_now(1)),
        expected: &["error: attempt to yield on a not resumed fiber"],
    },
    Scenario {
        name: "yield_after_transfer",
        ruby: "a = Fiber.new { rec { Fiber.yield(1) }; root.transfer(2) }; rec { a.transfer(0) }",
        run: || {
            let r = root();
            let a = new(move |_| {
                rec(fiber::yield_now(1i64));
                r.transfer(2).unwrap()
            });
            rec(a.transfer(0));
        },
        expected: &["error: attempt to yield on a not resumed fiber", "value: 2"],
    },
    Scenario {
        name: "resume_transferring",
        ruby: "a = Fiber.new { root.transfer(1); 2 }; rec { a.transfer(0) }; rec { a.resume(0) }",
        run: || {
            let r = root();
            let a = new(move |_| {
                r.transfer(1).unwrap();
                2
            });
            rec(a.transfer(0));
            rec(a.resume(0));
        },
        expected: &["value: 1", "error: attempt to resume a transferring fiber"],
    },
    Scenario {
        name: "transfer_to_yielding",
        ruby: "a = Fiber.new { Fiber.yield(1); 2 }; rec { a.resume(0) }; rec { a.transfer(0) }; rec { a.resume(0) }",
        run: || {
            let a = new(|_| {
                fiber::yield_now(1i64).unwrap();
                2
            });
            rec(a.resume(0));
            rec(a.transfer(0));
            rec(a.resume(0));
        },
        expected: &["value: 1", "error: attempt to transfer to a yielding fiber", "value: 2"],
    },
    Scenario {
        name: "transfer_to_resuming",
        ruby: "a = Fiber.new { me = Fiber.current; b = Fiber.new { rec { me.transfer(0) }; 3 }; rec { b.resume(0) }; 4 }; rec { a.resume(0) }",
        run: || {
            let a = new(|_| {
                let me = root();
                let b = new(move |_| {
                    rec(me.transfer(0));
                    3
                });
                rec(b.resume(0));
                4
            });
            rec(a.resume(0));
        },
        expected: &["error: attempt to transfer to a resuming fiber", "value: 3", "value: 4"],
    },
    Scenario {
        name: "transfer_to_the_resuming_root",
        ruby: "a = Fiber.new { rec { root.transfer(1) }; 2 }; rec { a.resume(0) }",
        run: || {
            let r = root();
            let a = new(move |_| {
                rec(r.transfer(1));
                2
            });
            rec(a.resume(0));
        },
        expected: &["error: attempt to transfer to a resuming fiber", "value: 2"],
    },
    Scenario {
        name: "transfer_to_terminated",
        ruby: "a = Fiber.new { |x| x }; rec { a.resume(1) }; rec { a.transfer(2) }",
        run: || {
            let a = new(|x| x);
            rec(a.resume(1));
            rec(a.transfer(2));
        },
        expected: &["value: 1", "error: dead fiber called"],
    },
    Scenario {
        name: "transfer_to_self",
        ruby: "rec { Fiber.current.transfer(5) }; a = Fiber.new { rec { Fiber.current.transfer(6) }; 7 }; rec { a.resume(0) }",
        run: || {
            rec(root().transfer(5));
            let a = new(|_| {
                rec(root().transfer(6));
                7
            });
            rec(a.resume(0));
        },
        expected: &["value: 5", "value: 6", "value: 7"],
    },
    Scenario {
        name: "transferred_fiber_finishing_returns_to_root",
        ruby: "a = Fiber.new { |x| x + 41 }; rec { a.transfer(1) }; rec { a.transfer(1) }",
        run: || {
            let a = new(|x| x + 41);
            rec(a.transfer(1));
            rec(a.transfer(1));
        },
        expected: &["value: 42", "error: dead fiber called"],
    },
    Scenario {
        name: "finish_after_transfers_returns_to_root_through_a_chain",
        ruby: "b = Fiber.new { |x| root.transfer(x * 2); 0 }; a = Fiber.new { |x| b.transfer(x + 1) }; c = Fiber.new { |x| x + 100 }; rec { a.transfer(1) }; rec { c.transfer(1) }",
        run: || {
            let r = root();
            let b = new(move |x| {
                r.transfer(x * 2).unwrap();
                0
            });
            let a = new(move |x| b.transfer(x + 1).unwrap());
            let c = new(|x| x + 100);
            rec(a.transfer(1));
            rec(c.transfer(1));
        },
        expected: &["value: 4", "value: 101"],
    },
    Scenario {
        name: "transferred_fiber_finishing_returns_to_the_end_of_the_roots_resume_chain",
        ruby: "b = Fiber.new { |x| x + 6 }; a = Fiber.new { rec { b.transfer(1) }; 9 }; rec { a.resume(0) }",
        run: || {
            let b = new(|x| x + 6);
            let a = new(move |_| {
                rec(b.transfer(1));
                9
            });
            rec(a.resume(0));
        },
        expected: &["value: 7", "value: 9"],
    },
    Scenario {
        name: "deep_resume_chain_then_transfer_finish",
        ruby: "c = Fiber.new { |x| 9 }; a = Fiber.new { b = Fiber.new { rec { c.transfer(0) }; 5 }; rec { b.resume(0) }; 6 }; rec { a.resume(0) }",
        run: || {
            let c = new(|_| 9);
            let a = new(move |_| {
                let b = new(move |_| {
                    rec(c.transfer(0));
                    5
                });
                rec(b.resume(0));
                6
            });
            rec(a.resume(0));
        },
        expected: &["value: 9", "value: 5", "value: 6"],
    },
    Scenario {
        name: "resumed_fiber_continued_by_transfer_may_still_yield",
        ruby: "a = Fiber.new { me = Fiber.current; b = Fiber.new { rec { me.resume(0) }; me.transfer(3) }; rec { b.transfer(0) }; Fiber.yield(10); 11 }; rec { a.resume(0) }; rec { a.resume(0) }",
        run: || {
            let a = new(|_| {
                let me = root();
                let b = new(move |_| {
                    rec(me.resume(0));
                    me.transfer(3).unwrap()
                });
                rec(b.transfer(0));
                fiber::yield_now(10i64).unwrap();
                11
            });
            rec(a.resume(0));
            rec(a.resume(0));
        },
        expected: &["error: attempt to resume a resumed fiber (double resume)", "value: 3", "value: 10", "value: 11"],
    },
    Scenario {
        name: "resume_inside_a_transferred_fiber",
        ruby: "a = Fiber.new { b = Fiber.new { Fiber.yield(5); 0 }; rec { b.resume(0) }; root.transfer(6) }; rec { a.transfer(0) }",
        run: || {
            let r = root();
            let a = new(move |_| {
                let b = new(|_| {
                    fiber::yield_now(5i64).unwrap();
                    0
                });
                rec(b.resume(0));
                r.transfer(6).unwrap()
            });
            rec(a.transfer(0));
        },
        expected: &["value: 5", "value: 6"],
    },
    Scenario {
        name: "panic_reaches_the_resumer",
        ruby: "a = Fiber.new { raise 'boom' }; rec { a.resume(0) }; rec { a.resume(0) }",
        run: || {
            let a = new(|_| panic!("boom"));
            rec(a.resume(0));
            rec(a.resume(0));
        },
        expected: &["panic: boom", "error: attempt to resume a terminated fiber"],
    },
    Scenario {
        name: "panic_in_a_transferred_fiber_reaches_the_root",
        ruby: "b = Fiber.new { raise 'bad' }; a = Fiber.new { b.transfer(0) }; rec { a.transfer(0) }",
        run: || {
            let b = new(|_| panic!("bad"));
            let a = new(move |_| b.transfer(0).unwrap());
            rec(a.transfer(0));
        },
        expected: &["panic: bad"],
    },
    Scenario {
        name: "raise_into_an_unborn_fiber",
        ruby: "f = Fiber.new { |x| x }; rec { f.raise('boom') }; rec { f.resume(3) }",
        run: || {
            let f = new(|x| x);
            rec(f.raise("boom"));
            rec(f.resume(3));
        },
        expected: &["error: cannot raise exception on unborn fiber", "value: 3"],
    },
    Scenario {
        name: "raise_into_a_terminated_fiber",
        ruby: "f = Fiber.new { |x| x }; rec { f.resume(1) }; rec { f.raise('boom') }",
        run: || {
            let f = new(|x| x);
            rec(f.resume(1));
            rec(f.raise("boom"));
        },
        expected: &["value: 1", "error: attempt to resume a terminated fiber"],
    },
    Scenario {
        name: "raise_into_a_yielding_fiber_that_rescues",
        ruby: "f = Fiber.new { |x| begin; Fiber.yield(x); rescue => e; 100 + e.message.size; end }; rec { f.resume(1) }; rec { f.raise('abc') }",
        run: || {
            let f = new(|x| match fiber::yield_now(x) {
                Ok(y) => y,
                Err(FiberError::Raised(e)) => 100 + e.message().map_or(0, str::len) as i64,
                Err(other) => other.resume_unwind(),
            });
            rec(f.resume(1));
            rec(f.raise("abc"));
        },
        expected: &["value: 1", "value: 103"],
    },
    Scenario {
        name: "raise_into_a_yielding_fiber_that_does_not",
        ruby: "f = Fiber.new { |x| Fiber.yield(x); 5 }; rec { f.resume(1) }; rec { f.raise('boom') }; rec { f.resume(2) }",
        run: || {
            let f = new(|x| {
                fiber::yield_now(x).unwrap_or_else(|e| e.resume_unwind());
                5
            });
            rec(f.resume(1));
            rec(f.raise("boom"));
            rec(f.resume(2));
        },
        expected: &["value: 1", "panic: boom", "error: attempt to resume a terminated fiber"],
    },
    Scenario {
        name: "raise_into_a_transferring_fiber",
        ruby: "f = Fiber.new { |x| begin; root.transfer(x); rescue => e; root.transfer(200 + e.message.size); end }; rec { f.transfer(1) }; rec { f.raise('ab') }",
        run: || {
            let r = root();
            let f = new(move |x| match r.transfer(x) {
                Ok(y) => y,
                Err(FiberError::Raised(e)) => r.transfer(200 + e.message().map_or(0, str::len) as i64).unwrap(),
                Err(other) => other.resume_unwind(),
            });
            rec(f.transfer(1));
            rec(f.raise("ab"));
        },
        expected: &["value: 1", "value: 202"],
    },
];

#[test]
fn every_scenario_matches_mri() {
    let mut failures = Vec::new();
    for scenario in SCENARIOS {
        let got = scenario.outcomes();
        if got != scenario.expected {
            failures.push(format!("{}: got {got:?}, MRI gives {:?}", scenario.name, scenario.expected));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_refused_call_changes_nothing() {
    let a = new(|_| fiber::yield_now(1).unwrap() + 1);
    assert_eq!(a.resume(0).unwrap(), 1);
    assert!(matches!(a.transfer(0), Err(FiberError::TransferToYielding)));
    assert!(matches!(fiber::yield_now(0i64), Err(FiberError::YieldNotResumed)));
    assert_eq!(a.resume(5).unwrap(), 6, "the fiber continues as if the refused calls never happened");
}

//! Seeing what the loops do: the stall sentinel's warnings (captured by a test
//! logger), task names and activities in the fiber dump, and turn statistics.

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use neverblock::runtime::{self, Builder, TaskActivity};

/// Every warning of the runtime logged in this test binary, in order.
fn warnings() -> &'static Mutex<Vec<String>> {
    struct Capture(Mutex<Vec<String>>);
    impl log::Log for Capture {
        fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
            metadata.level() <= log::Level::Warn && metadata.target().starts_with("neverblock")
        }
        fn log(&self, record: &log::Record<'_>) {
            if self.enabled(record.metadata()) {
                self.0.lock().unwrap_or_else(|p| p.into_inner()).push(record.args().to_string());
            }
        }
        fn flush(&self) {}
    }
    static CAPTURE: OnceLock<&'static Capture> = OnceLock::new();
    let capture = CAPTURE.get_or_init(|| {
        let capture: &'static Capture = Box::leak(Box::new(Capture(Mutex::new(Vec::new()))));
        log::set_logger(capture).expect("the only logger of this test binary");
        log::set_max_level(log::LevelFilter::Warn);
        capture
    });
    &capture.0
}

/// The first warning logged that contains every one of `words`.
fn warning_with(words: &[&str]) -> Option<String> {
    let warnings = warnings().lock().unwrap_or_else(|p| p.into_inner());
    warnings.iter().find(|w| words.iter().all(|word| w.contains(word))).cloned()
}

/// `312.5ms` or `1.2s`, as `Duration`'s `Debug` prints it, in milliseconds.
fn millis_in(text: &str) -> f64 {
    let (number, scale) = match text.strip_suffix("ms") {
        Some(ms) => (ms, 1.0),
        None => (text.strip_suffix('s').expect("a duration in ms or s"), 1000.0),
    };
    number.parse::<f64>().expect("a number") * scale
}

#[test]
fn a_task_that_spins_is_named_while_it_holds_its_loop_and_when_it_lets_go() {
    warnings();
    let threshold = Duration::from_millis(100);
    let spin = Duration::from_millis(300);
    let warned_after = Builder::new().stall_warning(threshold).run(move || {
        let spinner = neverblock::spawn_named("spinner-300ms", move || {
            TaskActivity::current().expect("a task").set(format_args!("crunching {} numbers", 42));
            let start = Instant::now();
            let mut warned_after = None;
            while start.elapsed() < spin {
                if warned_after.is_none() && warning_with(&["spinner-300ms", "has not come back"]).is_some() {
                    warned_after = Some(start.elapsed());
                }
            }
            warned_after
        });
        spinner.join().unwrap()
    });
    let warned_after = warned_after.expect("the warning came while the task still spun");
    // The bound is 150 ms past the threshold; a loaded machine may pause the sentinel,
    // so the test only insists on the warning arriving before the spin ended.
    assert!(warned_after >= threshold / 2, "no warning before the threshold: {warned_after:?}");
    let warning = warning_with(&["spinner-300ms", "has not come back"]).unwrap();
    for part in ["task ", "\"spinner-300ms\"", "doing \"crunching 42 numbers\"", "(spawned at ", file!()] {
        assert!(warning.contains(part), "{part:?} missing from: {warning}");
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    let back = loop {
        if let Some(back) = warning_with(&["spinner-300ms", "is back in its event loop after"]) {
            break back;
        }
        assert!(Instant::now() < deadline, "no warning that the loop came back");
        #[allow(clippy::disallowed_methods)] // the test's own thread, outside any runtime
        std::thread::sleep(Duration::from_millis(10));
    };
    let total = back.split("after ").nth(1).and_then(|rest| rest.split(';').next()).unwrap();
    assert!(millis_in(total) >= spin.as_millis() as f64, "the total covers the whole spin: {back}");
}

#[test]
fn a_loop_without_a_stall_warning_is_not_watched() {
    warnings();
    let stalls = Builder::new().stall_warning(Duration::ZERO).run(|| {
        neverblock::spawn_named("unwatched-spinner", || {
            let start = Instant::now();
            while start.elapsed() < Duration::from_millis(150) {}
        })
        .join()
        .unwrap();
        neverblock::sleep(Duration::from_millis(50));
        runtime::stats()[0].stalls
    });
    assert_eq!(stalls, 0);
    assert_eq!(warning_with(&["unwatched-spinner"]), None);
}

#[test]
fn the_dump_names_each_task_says_what_it_does_and_how_long_it_has_been_parked() {
    neverblock::run(|| {
        let server = neverblock::spawn_named("http 127.0.0.1:4242", || {
            TaskActivity::current().unwrap().set(format_args!("GET /slow"));
            neverblock::sleep(Duration::from_millis(300));
        });
        let inheritor = neverblock::spawn_named("pg reader", || {
            neverblock::spawn(|| neverblock::sleep(Duration::from_millis(300))).join().unwrap();
        });
        neverblock::sleep(Duration::from_millis(120));
        let dump = runtime::dump().unwrap();
        let line = |name: &str| dump.lines().find(|l| l.contains(name)).unwrap_or_else(|| panic!("{name}: {dump}"));
        let server_line = line("\"http 127.0.0.1:4242\" doing \"GET /slow\"");
        assert!(server_line.contains("is parked on a timer for "), "{server_line}");
        let parked = server_line.rsplit("for ").next().unwrap();
        let parked_ms = parked.strip_suffix("ms").expect("under a second").parse::<u64>().unwrap();
        assert!((100..1000).contains(&parked_ms), "parked about 120 ms: {server_line}");
        assert_eq!(dump.matches("\"pg reader\"").count(), 2, "a spawned task inherits its spawner's name: {dump}");
        assert!(line("\"pg reader\" (spawned at").contains(file!()), "{dump}");
        server.join().unwrap();
        inheritor.join().unwrap();
    });
}

#[test]
fn a_task_that_inherits_a_name_says_what_it_does_without_changing_its_spawners_activity() {
    neverblock::run(|| {
        TaskActivity::current().unwrap().set(format_args!("accepting"));
        let main_label = neverblock::current_task_id().unwrap();
        let child = neverblock::runtime::TaskBuilder::new().name("conn").spawn(|| {
            neverblock::spawn(|| {
                TaskActivity::current().unwrap().set(format_args!("stream 1"));
                neverblock::sleep(Duration::from_millis(50));
            })
            .join()
            .unwrap()
        });
        neverblock::sleep(Duration::from_millis(10));
        let dump = runtime::dump().unwrap();
        assert!(dump.contains("\"conn\" doing \"stream 1\""), "{dump}");
        assert_eq!(dump.matches("doing \"stream 1\"").count(), 1, "only the stream's task: {dump}");
        let main_line = dump.lines().find(|l| l.contains(&format!("task {main_label} "))).unwrap();
        assert!(main_line.contains("doing \"accepting\""), "{main_line}");
        child.join().unwrap();
    });
}

#[test]
fn turns_are_counted_and_their_lengths_add_up() {
    let (turns, elapsed) = neverblock::run(|| {
        let start = Instant::now();
        for _ in 0..5 {
            neverblock::sleep(Duration::from_millis(2));
        }
        (runtime::stats()[0].turns.clone(), start.elapsed())
    });
    assert!(turns.count() >= 5, "a turn at least after each sleep: {turns:?}");
    assert!(turns.sum() < elapsed, "waiting in the poller is no part of a turn: {turns:?}");
}

#[test]
fn a_task_that_cannot_get_a_stack_is_logged_though_nobody_joins_it() {
    warnings();
    Builder::new().run(|| {
        let live = neverblock::fiber::stack_stats().live;
        neverblock::fiber::set_stack_limit(Some(live)); // no stack beyond those in use
        drop(neverblock::spawn_named("starved-and-detached", || ()));
        neverblock::sleep(Duration::from_millis(1)); // its turn comes, and it cannot start
        neverblock::fiber::set_stack_limit(None);
    });
    let warning = warning_with(&["could not start", "starved-and-detached"]).expect("a warning names it");
    assert!(warning.contains("1 task(s)"), "{warning}");
}

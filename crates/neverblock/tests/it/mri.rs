//! The rules table run against the real MRI, when `ruby` is installed (CI installs it).

use std::process::Command;

use crate::fiber_rules::SCENARIOS;

/// Runs every scenario in MRI and returns each one's recorded outcomes.
fn mri_outcomes() -> Option<Vec<Vec<String>>> {
    let mut script = String::from(
        "$stdout.sync = true\nroot = Fiber.current\n\
         def rec\n  v = yield\n  $log << \"value: #{v}\"\n\
         rescue FiberError => e\n  $log << \"error: #{e.message}\"\n\
         rescue RuntimeError => e\n  $log << \"panic: #{e.message}\"\nend\n",
    );
    for scenario in SCENARIOS {
        script.push_str(&format!("$log = []\n{}\nputs $log.join('|')\n", scenario.ruby));
    }
    let output = Command::new("ruby").arg("-e").arg(&script).output().ok()?;
    assert!(output.status.success(), "ruby failed: {}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8(output.stdout).expect("utf-8");
    Some(stdout.lines().map(|l| l.split('|').filter(|s| !s.is_empty()).map(String::from).collect()).collect())
}

#[test]
fn scenarios_agree_with_live_mri() {
    let Some(mri) = mri_outcomes() else {
        eprintln!("note: ruby is not installed; the table's MRI outcomes were recorded from MRI 3.1");
        return;
    };
    assert_eq!(mri.len(), SCENARIOS.len());
    let mut failures = Vec::new();
    for (scenario, mri) in SCENARIOS.iter().zip(mri) {
        let ours = scenario.outcomes();
        if ours != mri {
            failures.push(format!("{}: neverblock {ours:?}, MRI {mri:?}", scenario.name));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

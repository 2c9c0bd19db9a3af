//! The `neverblock` binary is linked with `crates/neverblock/hot-text.ld`, and
//! every line of that script still names a function the binary holds, placed in
//! the script's section: a renamed runtime function fails here instead of
//! quietly leaving the hot path's group (and costing the benchmarks their layout).

use object::{Object, ObjectSection, ObjectSymbol};

const SCRIPT: &str = include_str!("../../neverblock/hot-text.ld");
const SECTION: &str = ".text.neverblock_hot";

/// The symbol prefixes the script's input-section lines name, in order.
fn prefixes() -> Vec<&'static str> {
    SCRIPT
        .lines()
        .filter_map(|l| l.trim().strip_prefix("*(.text."))
        .map(|rest| rest.strip_suffix("*)").unwrap_or_else(|| panic!("a line of the form *(.text.PREFIX*): {rest}")))
        .collect()
}

#[test]
fn the_script_names_the_park_wake_and_switch_functions() {
    let prefixes = prefixes();
    assert!(prefixes.len() >= 5, "the script lists the hot path: {prefixes:?}");
    for needed in ["Scheduler8dispatch", "switch_to", "raw_switch", "waiter", "channel"] {
        assert!(prefixes.iter().any(|p| p.contains(needed)), "{needed} is in the group");
    }
}

#[test]
fn every_line_of_the_script_places_a_function_of_the_binary_in_the_group() {
    let data = std::fs::read(env!("CARGO_BIN_EXE_neverblock")).expect("read the neverblock binary");
    let file = object::File::parse(&*data).expect("an object file");
    let section =
        file.section_by_name(SECTION).expect("the binary has the hot section: was it linked with the script?");
    let range = section.address()..section.address() + section.size();
    let symbols: Vec<_> = file.symbols().filter_map(|s| Some((s.name().ok()?, s.address()))).collect();
    for prefix in prefixes() {
        let found: Vec<_> = symbols.iter().filter(|(name, _)| name.starts_with(prefix)).collect();
        assert!(!found.is_empty(), "no function of the binary starts with {prefix}: renamed? mend hot-text.ld");
        for (name, address) in found {
            assert!(range.contains(address), "{name} at {address:#x} lies outside {SECTION} ({range:#x?})");
        }
    }
}

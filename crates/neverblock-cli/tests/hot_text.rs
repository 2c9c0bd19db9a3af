//! The `neverblock` binary is linked with `crates/neverblock/hot-text.ld`, and
//! every line of that script still names a function the binary holds, placed in
//! the script's section: a renamed runtime function fails here instead of
//! quietly leaving the hot path's group (and costing the benchmarks their layout).
//! CI runs this in release too, where a function inlined into all its callers
//! would leave its line nothing to place.

use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};

const SCRIPT: &str = include_str!("../../neverblock/hot-text.ld");
const SECTION: &str = ".text.neverblock_hot";

/// The symbol prefixes the script's input-section lines (`*(.text.PREFIX*)`) name, in order.
fn prefixes() -> Vec<&'static str> {
    SCRIPT
        .lines()
        .filter_map(|l| l.trim().strip_prefix("*("))
        .map(|rest| {
            let prefix = rest.strip_prefix(".text.").and_then(|r| r.strip_suffix("*)"));
            prefix.filter(|p| !p.contains('*')).unwrap_or_else(|| panic!("a line of the form *(.text.PREFIX*): {rest}"))
        })
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
    if option_env!("NEVERBLOCK_HOT_TEXT").is_none() {
        eprintln!(
            "note: this build of the command is not linked with hot-text.ld (see its build.rs); nothing to check"
        );
        return;
    }
    let data = std::fs::read(env!("CARGO_BIN_EXE_neverblock")).expect("read the neverblock binary");
    let file = object::File::parse(&*data).expect("an object file");
    let section =
        file.section_by_name(SECTION).expect("the binary has the hot section: was it linked with the script?");
    let range = section.address()..section.address() + section.size();
    let functions: Vec<_> = file
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text)
        .filter_map(|s| Some((s.name().ok()?, s.address())))
        .collect();
    for prefix in prefixes() {
        let found: Vec<_> = functions.iter().filter(|(name, _)| name.starts_with(prefix)).collect();
        assert!(
            !found.is_empty(),
            "no function of the binary starts with {prefix}: renamed or inlined away? mend hot-text.ld"
        );
        for (name, address) in found {
            assert!(range.contains(address), "{name} at {address:#x} lies outside {SECTION} ({range:#x?})");
        }
    }
}

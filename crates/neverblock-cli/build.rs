//! Links the `neverblock` binary with the runtime's hot-path layout
//! (`crates/neverblock/hot-text.ld`: the park, wake and switch functions side by
//! side), so the benchmarks' figures do not hang on where unrelated code
//! happens to push them. `NEVERBLOCK_SCATTERED_TEXT=1` at build time leaves the
//! linker's own layout, to compare against.

fn main() {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../neverblock/hot-text.ld");
    println!("cargo::rerun-if-changed={}", script.display());
    println!("cargo::rerun-if-env-changed=NEVERBLOCK_SCATTERED_TEXT");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux");
    if linux && std::env::var_os("NEVERBLOCK_SCATTERED_TEXT").is_none() {
        println!("cargo::rustc-link-arg-bins=-Wl,-T,{}", script.display());
    }
}

//! Links the `neverblock` binary with `crates/neverblock/hot-text.ld`, which
//! groups the runtime's park, wake, switch and spawn functions, so the
//! benchmarks' figures do not hang on where unrelated code happens to push them.
//!
//! It is left out (with a warning) under mold or gold, which do not read such
//! a script, and when `NEVERBLOCK_SCATTERED_TEXT` is set (to anything) at build
//! time, to compare against the linker's own layout. The command's tests learn
//! which through `NEVERBLOCK_HOT_TEXT`.

fn main() {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../neverblock/hot-text.ld");
    println!("cargo::rerun-if-changed={}", script.display());
    println!("cargo::rerun-if-env-changed=NEVERBLOCK_SCATTERED_TEXT");
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let other_linker = ["fuse-ld=mold", "fuse-ld=gold"].into_iter().find(|l| flags.contains(l));
    if let Some(linker) = other_linker {
        println!("cargo::warning=hot-text.ld left out: -{linker} does not read linker scripts of its kind");
    }
    let linux = std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux");
    if linux && other_linker.is_none() && std::env::var_os("NEVERBLOCK_SCATTERED_TEXT").is_none() {
        println!("cargo::rustc-link-arg-bins=-Wl,-T,{}", script.display());
        println!("cargo::rustc-env=NEVERBLOCK_HOT_TEXT=1");
    }
}

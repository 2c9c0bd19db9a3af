//! The PostgreSQL benchmarks' peers, built on first use: Go pgx (pgxpool), a
//! module fetched through the Go proxy, and tokio-postgres (deadpool, and
//! clients shared by tasks), a cargo project outside the workspace. Each is
//! skipped with a note when it cannot be built.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use super::super::peers::{run_peer, work_dir};
use super::Row;

const GO_MOD: &str = include_str!("../../../../../peers/go/pgxbench/go.mod");
const GO_SUM: &str = include_str!("../../../../../peers/go/pgxbench/go.sum");
const GO_MAIN: &str = include_str!("../../../../../peers/go/pgxbench/main.go");
const RUST_MANIFEST: &str = include_str!("../../../../../peers/rust/pgpeer/Cargo.toml");
const RUST_LOCK: &str = include_str!("../../../../../peers/rust/pgpeer/Cargo.lock");
const RUST_MAIN: &str = include_str!("../../../../../peers/rust/pgpeer/src/main.rs");

/// A built peer program.
pub(super) struct Peer {
    name: &'static str,
    binary: PathBuf,
}

impl Peer {
    /// Runs one mode (`select1`, `mix`) with `--name value` flags; its JSON rows.
    pub(super) fn run(&self, mode: &str, flags: &[(&str, String)]) -> Vec<Row> {
        let args = flags.iter().flat_map(|(k, v)| [format!("--{k}"), v.clone()]);
        run_peer(self.name, Command::new(&self.binary).arg(mode).args(args))
    }
}

/// Writes `files` (path, text) under `dir`.
fn write_tree(dir: &std::path::Path, files: &[(&str, &str)]) -> std::io::Result<()> {
    for (path, text) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().expect("a file in a directory"))?;
        std::fs::write(path, text)?;
    }
    Ok(())
}

/// The Go pgx peer, built in this run's peer directory (Go's caches keep later builds quick).
pub(super) fn go() -> Option<Peer> {
    let dir = work_dir().join("pgxbench");
    let binary = dir.join("pgxbench");
    let built = write_tree(&dir, &[("go.mod", GO_MOD), ("go.sum", GO_SUM), ("main.go", GO_MAIN)]).is_ok()
        && Command::new("go")
            .args(["build", "-o"])
            .arg(&binary)
            .arg(".")
            .current_dir(&dir)
            .env("GOFLAGS", "-mod=mod")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    if !built {
        eprintln!("note: go-pgxpool peer skipped: `go` is not installed or peers/go/pgxbench did not build");
        return None;
    }
    Some(Peer { name: "go-pgxpool", binary })
}

/// The tokio-postgres peer. Its release build takes a minute or two, so its
/// target directory is kept in the system's temporary directory, named after a
/// hash of its sources: later runs reuse it, and a changed peer gets a new one.
pub(super) fn tokio() -> Option<Peer> {
    let mut hasher = DefaultHasher::new();
    (RUST_MANIFEST, RUST_LOCK, RUST_MAIN).hash(&mut hasher);
    let target = std::env::temp_dir().join(format!("neverblock-pgpeer-{:016x}", hasher.finish()));
    let binary = target.join("release/pgpeer");
    if !binary.exists() {
        let dir = work_dir().join("pgpeer");
        eprintln!("note: building the tokio-postgres peer (once; kept in {})", target.display());
        let built =
            write_tree(&dir, &[("Cargo.toml", RUST_MANIFEST), ("Cargo.lock", RUST_LOCK), ("src/main.rs", RUST_MAIN)])
                .is_ok()
                && Command::new("cargo")
                    .args(["build", "--release", "--quiet", "--manifest-path"])
                    .arg(dir.join("Cargo.toml"))
                    .arg("--target-dir")
                    .arg(&target)
                    .stdout(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
        if !built {
            eprintln!("note: tokio-postgres peer skipped: peers/rust/pgpeer did not build with cargo");
            return None;
        }
    }
    Some(Peer { name: "tokio-postgres", binary })
}

//! `--pid-file`: the pid of the process that serves, written once it serves (by each new process
//! after an upgrade, which so takes it over) and removed at exit by the process it still names.

use std::path::{Path, PathBuf};

use anyhow::Context;

/// The file that names the serving process.
#[derive(Clone, Debug)]
pub(crate) struct PidFile {
    path: PathBuf,
}

impl PidFile {
    /// The pid file at `path`, whose directory must exist.
    pub(crate) fn new(path: &Path) -> anyhow::Result<PidFile> {
        let dir = path.parent().filter(|dir| !dir.as_os_str().is_empty()).unwrap_or(Path::new("."));
        anyhow::ensure!(dir.is_dir(), "--pid-file {}: no directory {}", path.display(), dir.display());
        Ok(PidFile { path: path.to_owned() })
    }

    /// Writes this process's pid (into a file of its own first, then renamed over the pid file, so
    /// that a reader never sees half of it).
    pub(crate) fn write(&self) -> anyhow::Result<()> {
        let pid = std::process::id();
        let mut partial = self.path.clone().into_os_string();
        partial.push(format!(".{pid}"));
        std::fs::write(&partial, format!("{pid}\n")).with_context(|| format!("write {:?}", partial))?;
        std::fs::rename(&partial, &self.path).with_context(|| format!("write {}", self.path.display()))
    }

    /// Removes the file if it still names this process (after an upgrade it names the new one).
    pub(crate) fn remove_if_ours(&self) {
        let ours = std::fs::read_to_string(&self.path).is_ok_and(|pid| pid.trim() == std::process::id().to_string());
        if ours {
            if let Err(e) = std::fs::remove_file(&self.path) {
                log::warn!("cannot remove the pid file {}: {e}", self.path.display());
            }
        }
    }
}

//! The log's writer: a thread of its own that takes lines from a channel and writes them in
//! batches, so a request never waits for a disk; it reopens its file when asked (log rotation)
//! and writes every line it was given before it ends.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::thread::JoinHandle;

use neverblock::sync::{bounded, Receiver, Sender};

/// Lines queued at most; a fiber that logs while the queue is full parks until the writer catches
/// up (nothing is dropped).
const QUEUE: usize = 16 * 1024;
/// Bytes gathered before a write, when lines arrive faster than they are written.
const BATCH: usize = 64 * 1024;

/// What the writer is told.
enum Message {
    Line(Vec<u8>),
    Reopen,
    Close,
}

/// Where lines go.
enum Sink {
    Stdout,
    File { path: PathBuf, file: File },
}

/// The sending end, and the writer thread until it is closed.
#[derive(Debug)]
pub(super) struct Writer {
    tx: Sender<Message>,
    thread: Mutex<Option<JoinHandle<()>>>,
    target: String,
}

impl Writer {
    /// A writer to standard output.
    pub(super) fn stdout() -> io::Result<Writer> {
        Writer::start(Sink::Stdout, "standard output".to_owned())
    }

    /// A writer appending to `path` (made if missing).
    pub(super) fn file(path: &Path) -> io::Result<Writer> {
        let file = open(path)?;
        Writer::start(Sink::File { path: path.to_owned(), file }, path.display().to_string())
    }

    fn start(sink: Sink, target: String) -> io::Result<Writer> {
        let (tx, rx) = bounded(QUEUE);
        let thread = std::thread::Builder::new().name("access-log".into()).spawn(move || run(rx, sink))?;
        Ok(Writer { tx, thread: Mutex::new(Some(thread)), target })
    }

    /// Where the lines go, for messages.
    pub(super) fn target(&self) -> &str {
        &self.target
    }

    /// Queues `line` (parks the fiber, or blocks the thread, while the queue is full).
    pub(super) fn send(&self, line: Vec<u8>) {
        if self.tx.send(Message::Line(line)).is_err() {
            log::debug!("a line for the access log on {} came after it was closed", self.target);
        }
    }

    /// Asks the writer to reopen its file once the lines queued so far are written.
    pub(super) fn reopen(&self) {
        let _ = self.tx.send(Message::Reopen);
    }

    /// Writes every line queued so far, and waits for the writer to end.
    pub(super) fn close(&self) {
        let _ = self.tx.send(Message::Close);
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(thread) = thread {
            if thread.join().is_err() {
                log::error!("the access log's writer for {} panicked", self.target);
            }
        }
    }
}

/// The writer thread: gathers what is queued, writes it when the queue is empty (or a batch is
/// full), until told to close or every sender is gone.
fn run(rx: Receiver<Message>, mut sink: Sink) {
    let mut batch = Vec::with_capacity(BATCH);
    let mut failing = false;
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        while let Some(message) = next.take() {
            match message {
                Message::Line(line) => {
                    batch.extend_from_slice(&line);
                    if batch.len() >= BATCH {
                        sink.write(&mut batch, &mut failing);
                    }
                }
                Message::Reopen => {
                    sink.write(&mut batch, &mut failing);
                    sink.reopen();
                }
                Message::Close => {
                    sink.write(&mut batch, &mut failing);
                    return;
                }
            }
            next = rx.try_recv().ok();
        }
        sink.write(&mut batch, &mut failing);
    }
    sink.write(&mut batch, &mut failing);
}

impl Sink {
    /// Writes and empties `batch`; the first failure of a run of them is logged.
    fn write(&mut self, batch: &mut Vec<u8>, failing: &mut bool) {
        if batch.is_empty() {
            return;
        }
        let result = match self {
            Sink::Stdout => {
                let mut out = io::stdout().lock();
                out.write_all(batch).and_then(|()| out.flush())
            }
            Sink::File { file, .. } => file.write_all(batch),
        };
        match result {
            Err(e) if !*failing => {
                log::error!("writing the access log to {}: {e}; {} bytes of lines lost", self.name(), batch.len());
                *failing = true;
            }
            Err(_) => {}
            Ok(()) => *failing = false,
        }
        batch.clear();
    }

    /// Opens the file again at its path (after a rotation moved it); keeps the old one if that fails.
    fn reopen(&mut self) {
        if let Sink::File { path, file } = self {
            match open(path) {
                Ok(fresh) => *file = fresh,
                Err(e) => {
                    log::error!("reopening the access log {}: {e}; still writing to the old file", path.display())
                }
            }
        }
    }

    fn name(&self) -> String {
        match self {
            Sink::Stdout => "standard output".to_owned(),
            Sink::File { path, .. } => path.display().to_string(),
        }
    }
}

fn open(path: &Path) -> io::Result<File> {
    OpenOptions::new().append(true).create(true).open(path)
}

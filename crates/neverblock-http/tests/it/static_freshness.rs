//! Static files as fresh as the disk: a loop shares what it opened among one turn's requests and
//! keeps small files' bytes from turn to turn, yet every change made between two requests is
//! seen by the second; and a burst of many files holds no more descriptors than the bound.

use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use neverblock_http::server::{Request, Server, StaticFiles};

use crate::serving::{read_reply, Reply, Running, TempDir};

/// Longer than a file's last change must be past for a loop to keep its bytes (two seconds).
const SETTLING: Duration = Duration::from_millis(2_500);
/// The most paths a loop keeps open in a turn.
const MAX_ENTRIES: usize = 1024;

/// Waits until files written now count as settled, so their bytes are kept from turn to turn.
fn let_settle() {
    // Outside a runtime, the runtime's sleep sleeps the thread.
    neverblock::sleep(SETTLING);
}

/// `GET target` on `conn` (kept alive), and the reply.
fn get(conn: &mut BufReader<std::net::TcpStream>, target: &str) -> Reply {
    conn.get_mut().write_all(format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).unwrap();
    read_reply(conn, false)
}

fn bytes_of(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// What happens to a file between the two requests, and what the second must be answered.
struct Change {
    name: &'static str,
    make: fn(&Path, usize),
    expect: Expect,
}

enum Expect {
    /// 200 with the bytes `bytes` makes of the file's first length; a new entity tag if `new_tag`.
    Bytes {
        bytes: fn(usize) -> Vec<u8>,
        new_tag: bool,
    },
    Status(u16),
}

fn renamed_over(path: &Path, len: usize) {
    let new = path.with_extension("new");
    std::fs::write(&new, bytes_of(len, 7)).unwrap();
    std::fs::rename(new, path).unwrap();
}

fn edited_in_place(path: &Path, len: usize) {
    std::fs::OpenOptions::new().write(true).open(path).unwrap().write_all(&bytes_of(len, 8)).unwrap();
}

fn edited_in_place_its_time_put_back(path: &Path, len: usize) {
    let before = std::fs::metadata(path).unwrap().modified().unwrap();
    let mut file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.write_all(&bytes_of(len, 9)).unwrap();
    file.set_modified(before).unwrap();
}

fn truncated(path: &Path, len: usize) {
    std::fs::OpenOptions::new().write(true).open(path).unwrap().set_len(len as u64 / 2).unwrap();
}

fn grown(path: &Path, _: usize) {
    std::fs::OpenOptions::new().append(true).open(path).unwrap().write_all(b"+more").unwrap();
}

fn deleted(path: &Path, _: usize) {
    std::fs::remove_file(path).unwrap();
}

fn made_unreadable(path: &Path, _: usize) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o000)).unwrap();
}

fn replaced_by_a_fifo(path: &Path, _: usize) {
    std::fs::remove_file(path).unwrap();
    rustix::fs::mknodat(rustix::fs::CWD, path, rustix::fs::FileType::Fifo, rustix::fs::Mode::RUSR, 0).unwrap();
}

fn changes() -> Vec<Change> {
    // Root reads any file whatever its mode (CAP_DAC_OVERRIDE), so there it gets the file as it
    // was; the 403 is for everyone else.
    let unreadable = match rustix::process::geteuid().is_root() {
        true => Expect::Bytes { bytes: |len| bytes_of(len, 0), new_tag: false },
        false => Expect::Status(403),
    };
    vec![
        Change {
            name: "renamed over",
            make: renamed_over,
            expect: Expect::Bytes { bytes: |len| bytes_of(len, 7), new_tag: true },
        },
        Change {
            name: "edited in place",
            make: edited_in_place,
            expect: Expect::Bytes { bytes: |len| bytes_of(len, 8), new_tag: true },
        },
        // The tag is made of inode, size and modification time, all as they were.
        Change {
            name: "edited in place, its modification time put back",
            make: edited_in_place_its_time_put_back,
            expect: Expect::Bytes { bytes: |len| bytes_of(len, 9), new_tag: false },
        },
        Change {
            name: "truncated",
            make: truncated,
            expect: Expect::Bytes { bytes: |len| bytes_of(len, 0)[..len / 2].to_vec(), new_tag: true },
        },
        Change {
            name: "grown",
            make: grown,
            expect: Expect::Bytes { bytes: |len| [bytes_of(len, 0), b"+more".to_vec()].concat(), new_tag: true },
        },
        Change { name: "deleted", make: deleted, expect: Expect::Status(404) },
        Change { name: "made unreadable", make: made_unreadable, expect: unreadable },
        Change { name: "replaced by a FIFO", make: replaced_by_a_fifo, expect: Expect::Status(403) },
    ]
}

#[test]
fn a_file_changed_between_two_requests_on_one_connection_is_answered_fresh() {
    let tree = TempDir::new("changed");
    let changes = changes();
    // Small files come from memory, large ones from the open file.
    let sizes = [13, 100 << 10];
    let cases: Vec<(String, &Change, usize)> = changes
        .iter()
        .enumerate()
        .flat_map(|(i, change)| sizes.map(|len| (format!("f{i}-{len}.bin"), change, len)))
        .collect();
    for (name, _, len) in &cases {
        tree.write(name, bytes_of(*len, 0));
    }
    let_settle();
    let server = Running::start(StaticFiles::new(tree.path()).unwrap());
    let mut conn = BufReader::new(server.connect());
    let mut tags = Vec::new();
    // Twice: the second time, a small file's bytes are those the loop kept.
    for _ in 0..2 {
        tags.clear();
        for (name, _, len) in &cases {
            let reply = get(&mut conn, &format!("/{name}"));
            assert_eq!((reply.status, reply.body.len()), (200, *len), "{name}");
            assert!(reply.body == bytes_of(*len, 0), "{name}");
            tags.push(reply.header("etag").unwrap().to_owned());
        }
    }
    for (name, change, len) in &cases {
        (change.make)(&tree.path().join(name), *len);
    }
    for ((name, change, len), tag) in cases.iter().zip(&tags) {
        let reply = get(&mut conn, &format!("/{name}"));
        let what = format!("{name}, {}", change.name);
        match change.expect {
            Expect::Status(status) => assert_eq!(reply.status, status, "{what}"),
            Expect::Bytes { bytes, new_tag } => {
                let expected = bytes(*len);
                assert_eq!(reply.status, 200, "{what}");
                assert_eq!(reply.header("content-length"), Some(expected.len().to_string().as_str()), "{what}");
                assert!(reply.body == expected, "{what}: the new bytes");
                if new_tag {
                    assert_ne!(reply.header("etag"), Some(tag.as_str()), "{what}: a new tag");
                }
            }
        }
    }
}

#[test]
fn under_load_a_rename_is_served_to_every_request_sent_after_it() {
    // One loop too: a client that sends its next request while the loop's turn still runs is the
    // one whose request must wait for the loop's next look at the kernel, not be read at once.
    for workers in [1, 2] {
        rename_under_load(workers);
    }
}

/// 100 clients hammer one file on a server of `workers` loops while it is renamed over.
fn rename_under_load(workers: usize) {
    const CLIENTS: usize = 100;
    const AFTER: usize = 20;
    let tree = TempDir::new("renamed-under-load");
    let hot = tree.write("hot.txt", "old contents");
    let_settle();
    let server = Running::with(Server::builder().workers(workers), StaticFiles::new(tree.path()).unwrap());
    // Set before the rename starts and after it completes: a reply is old only if it came before
    // the first, new only if its request was sent after the second.
    let renaming = Arc::new(AtomicBool::new(false));
    let renamed = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let mut conn = BufReader::new(server.connect());
            let (renaming, renamed, answered) = (renaming.clone(), renamed.clone(), answered.clone());
            std::thread::spawn(move || {
                let mut after = 0;
                for _ in 0..100_000 {
                    let sent_after_rename = renamed.load(SeqCst);
                    let reply = get(&mut conn, "/hot.txt");
                    answered.fetch_add(1, SeqCst);
                    if sent_after_rename {
                        assert_eq!(reply.text(), "new contents", "a request sent after the rename completed");
                        after += 1;
                        if after == AFTER {
                            return;
                        }
                    } else if !renaming.load(SeqCst) {
                        assert_eq!(reply.text(), "old contents", "answered before the rename");
                    }
                }
                panic!("the rename was not made within the bound");
            })
        })
        .collect();
    // Every client under way first (a client that failed ends the wait too).
    while answered.load(SeqCst) < 20 * CLIENTS && !clients.iter().any(|client| client.is_finished()) {
        std::thread::yield_now();
    }
    let new = tree.write("hot.new", "new contents");
    renaming.store(true, SeqCst);
    std::fs::rename(new, &hot).unwrap();
    renamed.store(true, SeqCst);
    for client in clients {
        client.join().unwrap();
    }
}

/// How many descriptors of this process are open on files under `dir`.
fn open_under(dir: &Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter(|target| target.starts_with(dir))
        .count()
}

#[test]
fn ten_thousand_files_in_one_burst_hold_no_more_descriptors_than_the_bound() {
    const FILES: usize = 10_000;
    const CONNECTIONS: usize = 10;
    const SAMPLE_EVERY: usize = 16;
    let tree = TempDir::new("burst");
    let names: Vec<String> = (0..FILES).map(|i| format!("d{}/f{i}.txt", i % 100)).collect();
    for name in &names {
        tree.write(name, name);
    }
    let files = StaticFiles::new(tree.path()).unwrap();
    let (served, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (counted, highest, dir): (_, _, PathBuf) = (served.clone(), peak.clone(), files.root().to_owned());
    // Counted while the handler runs: the loop's table then holds every file its turn opened.
    let handler = move |request: &mut Request<'_>| {
        let response = files.serve(request);
        if counted.fetch_add(1, SeqCst) % SAMPLE_EVERY == 0 {
            highest.fetch_max(open_under(&dir), SeqCst);
        }
        response
    };
    let server = Running::start(handler);
    let clients: Vec<_> = names
        .chunks(FILES / CONNECTIONS)
        .map(|chunk| {
            let conn = server.connect();
            let requests: String =
                chunk.iter().map(|name| format!("GET /{name} HTTP/1.1\r\nHost: x\r\n\r\n")).collect();
            let mut writer = conn.try_clone().unwrap();
            let chunk = chunk.to_vec();
            std::thread::spawn(move || {
                // Every request at once, from a thread of its own: the replies are read meanwhile.
                let sending = std::thread::spawn(move || writer.write_all(requests.as_bytes()).unwrap());
                let mut conn = BufReader::new(conn);
                for name in chunk {
                    let reply = read_reply(&mut conn, false);
                    assert_eq!((reply.status, reply.text()), (200, name.clone()), "{name}");
                }
                sending.join().unwrap();
            })
        })
        .collect();
    for client in clients {
        client.join().unwrap();
    }
    assert_eq!(served.load(SeqCst), FILES);
    let peak = peak.load(SeqCst);
    assert!(
        peak <= MAX_ENTRIES + CONNECTIONS + 1,
        "at most the table's {MAX_ENTRIES}, a response in flight per connection and the file being opened: {peak}"
    );
}

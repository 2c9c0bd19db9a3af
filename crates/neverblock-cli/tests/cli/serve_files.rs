//! `neverblock serve`'s files at the process's descriptor limit: the files a loop keeps open for
//! its turn's requests are let go, each request opens its own, and every one is answered.

use super::serve_options::{dir_arg, wait_until, Serving};

#[test]
fn serve_at_its_descriptor_limit_answers_every_file_and_says_why() {
    const LIMIT: usize = 200;
    const FILES: usize = 1_000;
    let dir = crate::Dir::new("fd-limit");
    for i in 0..FILES {
        std::fs::write(dir.0.join(format!("f{i}.txt")), format!("file {i}\n")).unwrap();
    }
    let serving = Serving::start_under_fd_limit(LIMIT, &[dir_arg(&dir)]);
    // Every request at once on one connection: one turn of the loop opens far more files than
    // the limit leaves it.
    let requests: String = (0..FILES)
        .map(|i| {
            let close = if i == FILES - 1 { "Connection: close\r\n" } else { "" };
            format!("GET /f{i}.txt HTTP/1.1\r\nHost: x\r\n{close}\r\n")
        })
        .collect();
    let answer = serving.send(&requests);
    assert_eq!(answer.matches("HTTP/1.1 200 OK\r\n").count(), FILES, "every file, never a 5xx: {}", serving.stderr());
    for i in 0..FILES {
        assert!(answer.contains(&format!("\r\n\r\nfile {i}\n")), "file {i}");
    }
    wait_until("the warning", || serving.stderr().contains("out of file descriptors with"));
}

//! Why a file piece sits half a page into its buffer (`server/file_piece.rs`): the TLS library
//! copies each piece into a record that starts 5 bytes into a fresh heap block, and a heap piece
//! starts 16 bytes into its page too. This times that copy, 16 KiB with `memcpy`, at two
//! distances of the destination past the source modulo 4 KiB: 5 bytes, where AMD Zen's
//! `rep movsb` (which glibc uses at this size) takes its slow path, and 2 KiB, where the piece is
//! placed. Elsewhere the two match.
//!
//! `cargo bench -p neverblock-http --bench copy_placement`

#![allow(missing_docs)] // criterion_group! generates undocumented items

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const LEN: usize = 16 * 1024;

/// The index of the first page-aligned byte of `buffer`.
fn page_start(buffer: &[u8]) -> usize {
    (4096 - buffer.as_ptr() as usize % 4096) % 4096
}

fn copies(c: &mut Criterion) {
    let source = vec![7u8; LEN + 4096];
    let from = page_start(&source);
    let mut destination = vec![0u8; LEN + 2 * 4096];
    let page = page_start(&destination);
    let mut group = c.benchmark_group("memcpy 16 KiB, destination past the source mod 4 KiB by");
    group.throughput(Throughput::Bytes(LEN as u64));
    for distance in [5, 2048] {
        let to = page + distance;
        group.bench_function(BenchmarkId::from_parameter(format!("{distance} B")), |b| {
            b.iter(|| {
                destination[to..to + LEN].copy_from_slice(std::hint::black_box(&source[from..from + LEN]));
                std::hint::black_box(&destination);
            });
        });
    }
    group.finish();
}

criterion_group!(benches, copies);
criterion_main!(benches);

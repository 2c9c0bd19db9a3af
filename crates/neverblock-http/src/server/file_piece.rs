//! A piece of a file read for a protocol that cannot hand the kernel the file (TLS, HTTP/2's
//! frames): from the page cache at once, else on the blocking pool, into a buffer the loop keeps
//! for its next piece.
//!
//! Where the bytes sit in their buffer matters as much as the buffer. The piece is copied twice
//! more: by the kernel from the page cache into it, then by the TLS library from it into a new
//! record, five bytes past the start of a fresh heap block. `memcpy` copies blocks of this size
//! with `rep movsb`, which on AMD Zen runs twenty to forty times slower when the destination lies
//! 1 to 31 bytes past the source modulo 4 KiB (`cargo bench -p neverblock-http --bench
//! copy_placement`, 16 KiB on this machine's EPYC: 2.5 GiB/s at 5 bytes, 76 GiB/s at 2 KiB). A
//! heap buffer for the piece would start 16 bytes into a page, as the record's does, and both
//! copies would take the slow path: that was a third of the server's time sending a large file
//! over TLS (`perf record` of `serve --tls-listen` under `wrk`, before and after; `neverblock
//! bench https` shows the gain as MB/s for a 1 MiB file). So a piece starts half a page in (a
//! page-aligned source is 2 KiB behind it), moved by a cache line per piece, so that no placement
//! of the record's block can put every piece in the slow window.

use std::cell::{Cell, RefCell};
use std::fs::File;
use std::io;
use std::ops::Deref;

/// How much of a file is read (and then encrypted) at a time.
pub(crate) const FILE_PIECE: usize = 64 * 1024;
/// Where in a page a piece's first byte goes, before the turn's shift.
const PAGE_OFFSET: usize = 2048;
/// How far a piece's start moves from one piece to the next, and in how many steps it comes back.
const SHIFT: usize = 64;
const SHIFTS: usize = 8;
/// A buffer's size: a piece, wherever in its first page it starts.
const BUFFER: usize = FILE_PIECE + 4096 + SHIFT * SHIFTS;
/// Buffers a loop keeps for its next pieces, 2 MiB at most (more at once, as a hundred HTTP/2
/// downloads each with a piece or two waiting for the socket, are allocated and then let go).
const KEPT: usize = 32;

thread_local! {
    static KEPT_BUFFERS: RefCell<Vec<Box<[u8]>>> = const { RefCell::new(Vec::new()) };
    static NEXT_SHIFT: Cell<usize> = const { Cell::new(0) };
}

/// Bytes of a file, in a buffer that goes back to its loop when the piece is dropped.
#[derive(Debug)]
pub(crate) struct FilePiece {
    /// Empty only once the piece is dropped and its buffer has gone back to the loop.
    buffer: Box<[u8]>,
    start: usize,
    len: usize,
}

impl FilePiece {
    /// An empty piece of `capacity` bytes at most (up to [`FILE_PIECE`]), placed as the module says.
    fn new(capacity: usize) -> FilePiece {
        let buffer = KEPT_BUFFERS.with_borrow_mut(Vec::pop).unwrap_or_else(|| vec![0; BUFFER].into_boxed_slice());
        let shift = NEXT_SHIFT.replace((NEXT_SHIFT.get() + 1) % SHIFTS);
        let wanted = PAGE_OFFSET + shift * SHIFT;
        let start = (wanted + 4096 - buffer.as_ptr() as usize % 4096) % 4096;
        FilePiece { buffer, start, len: capacity.min(FILE_PIECE) }
    }

    fn space(&mut self) -> &mut [u8] {
        &mut self.buffer[self.start..self.start + self.len]
    }
}

impl Deref for FilePiece {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.buffer[self.start..self.start + self.len]
    }
}

impl AsRef<[u8]> for FilePiece {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl Drop for FilePiece {
    fn drop(&mut self) {
        let buffer = std::mem::take(&mut self.buffer);
        KEPT_BUFFERS.with_borrow_mut(|kept| {
            if kept.len() < KEPT {
                kept.push(buffer);
            }
        });
    }
}

/// Reads up to `len` bytes (at most [`FILE_PIECE`]) of `file` from `offset`: at once when they are
/// in the page cache (`preadv2` with `RWF_NOWAIT`), else on the blocking pool, so a cold disk
/// stalls no other fiber. Fewer bytes only at the end of the file.
///
/// # Errors
///
/// The read's error.
pub(crate) fn read_piece(file: &File, offset: u64, len: usize) -> io::Result<FilePiece> {
    let mut piece = FilePiece::new(len);
    let cached = rustix::io::preadv2(
        file,
        &mut [io::IoSliceMut::new(piece.space())],
        offset,
        rustix::io::ReadWriteFlags::NOWAIT,
    );
    if let Ok(n @ 1..) = cached {
        piece.len = n;
        return Ok(piece);
    }
    let file = file.try_clone()?;
    neverblock::spawn_blocking(move || {
        piece.len = std::os::unix::fs::FileExt::read_at(&file, piece.space(), offset)?;
        Ok(piece)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A file with `bytes` in it and no name (`O_TMPFILE`), gone when closed.
    fn file_of(bytes: &[u8]) -> File {
        let flags = rustix::fs::OFlags::TMPFILE | rustix::fs::OFlags::RDWR;
        let fd =
            rustix::fs::open(std::env::temp_dir(), flags, rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR).unwrap();
        let mut file = File::from(fd);
        file.write_all(bytes).unwrap();
        file
    }

    #[test]
    fn a_piece_holds_the_bytes_asked_for_and_fewer_at_the_end() {
        let bytes: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let file = file_of(&bytes);
        let piece = read_piece(&file, 10, FILE_PIECE).unwrap();
        assert_eq!(&piece[..], &bytes[10..10 + FILE_PIECE]);
        let last = read_piece(&file, 90_000, FILE_PIECE).unwrap();
        assert_eq!(&last[..], &bytes[90_000..]);
        assert!(read_piece(&file, 100_000, FILE_PIECE).unwrap().is_empty());
    }

    #[test]
    fn pieces_start_half_a_page_in_a_cache_line_further_each_time() {
        let file = file_of(&[7; 4096]);
        let offsets: Vec<usize> = (0..SHIFTS + 1)
            .map(|_| read_piece(&file, 0, 4096).unwrap().as_ptr() as usize % 4096 - PAGE_OFFSET)
            .collect();
        let first = offsets[0];
        let expected: Vec<usize> = (0..=SHIFTS).map(|i| (first + i * SHIFT) % (SHIFT * SHIFTS)).collect();
        assert_eq!(offsets, expected, "each piece moves one cache line and comes back after {SHIFTS}");
    }

    #[test]
    fn a_loop_keeps_the_buffers_of_its_dropped_pieces() {
        let file = file_of(&[1; 10]);
        let address = |piece: &FilePiece| piece.buffer.as_ptr();
        let first = read_piece(&file, 0, 10).unwrap();
        let buffer = address(&first);
        drop(first);
        let again = read_piece(&file, 0, 10).unwrap();
        assert_eq!(address(&again), buffer, "the dropped piece's buffer is used again");
    }
}

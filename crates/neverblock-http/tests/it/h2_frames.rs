//! A raw HTTP/2 client on std sockets for the defence tests: frames written by hand (the 9-byte
//! header, HPACK literals without Huffman), so a test can send what no well-behaved client would.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

pub(crate) const DATA: u8 = 0x0;
pub(crate) const HEADERS: u8 = 0x1;
pub(crate) const RST_STREAM: u8 = 0x3;
pub(crate) const SETTINGS: u8 = 0x4;
pub(crate) const PING: u8 = 0x6;
pub(crate) const GOAWAY: u8 = 0x7;
pub(crate) const WINDOW_UPDATE: u8 = 0x8;
pub(crate) const CONTINUATION: u8 = 0x9;

pub(crate) const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;

pub(crate) const END_STREAM: u8 = 0x1;
pub(crate) const END_HEADERS: u8 = 0x4;
pub(crate) const ACK: u8 = 0x1;

pub(crate) const NO_ERROR: u32 = 0x0;
pub(crate) const INTERNAL_ERROR: u32 = 0x2;
pub(crate) const FLOW_CONTROL_ERROR: u32 = 0x3;
pub(crate) const CANCEL: u32 = 0x8;
pub(crate) const ENHANCE_YOUR_CALM: u32 = 0xb;

/// A frame: its 9-byte header and `payload`.
pub(crate) fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap();
    assert!(len < 1 << 24, "a frame's length has 24 bits");
    let mut out = len.to_be_bytes()[1..].to_vec();
    out.extend_from_slice(&[kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// An HPACK integer with an `n`-bit prefix, its first byte's other bits `flags` (RFC 7541 §5.1).
pub(crate) fn hpack_int(flags: u8, n: u32, value: usize) -> Vec<u8> {
    let max = (1usize << n) - 1;
    if value < max {
        return vec![flags | value as u8];
    }
    let (mut out, mut rest) = (vec![flags | max as u8], value - max);
    while rest >= 128 {
        out.push((rest % 128) as u8 | 0x80);
        rest /= 128;
    }
    out.push(rest as u8);
    out
}

/// The header block of `GET path` (`:method GET` and `:scheme http` from the static table).
pub(crate) fn get(path: &str) -> Vec<u8> {
    let mut out = vec![0x82, 0x86];
    for (index, value) in [(4, path), (1, "localhost")] {
        out.push(index);
        out.extend(hpack_int(0, 7, value.len()));
        out.extend_from_slice(value.as_bytes());
    }
    out
}

/// A whole request without a body: HEADERS ending the stream and the block.
pub(crate) fn request(stream: u32, path: &str) -> Vec<u8> {
    frame(HEADERS, END_STREAM | END_HEADERS, stream, &get(path))
}

pub(crate) fn rst_stream(stream: u32, code: u32) -> Vec<u8> {
    frame(RST_STREAM, 0, stream, &code.to_be_bytes())
}

/// A PING frame (`ACK` among `flags` for an answer).
pub(crate) fn ping(flags: u8, payload: [u8; 8]) -> Vec<u8> {
    frame(PING, flags, 0, &payload)
}

/// A frame as read: type, flags, stream and payload.
#[derive(Debug)]
pub(crate) struct Frame {
    pub(crate) kind: u8,
    pub(crate) flags: u8,
    pub(crate) stream: u32,
    pub(crate) payload: Vec<u8>,
}

impl Frame {
    /// A GOAWAY's last stream id.
    pub(crate) fn last_stream(&self) -> u32 {
        assert_eq!(self.kind, GOAWAY);
        u32::from_be_bytes(self.payload[..4].try_into().unwrap()) & 0x7fff_ffff
    }

    /// A RST_STREAM's or GOAWAY's error code.
    pub(crate) fn code(&self) -> u32 {
        let at = if self.kind == GOAWAY { 4 } else { 0 };
        u32::from_be_bytes(self.payload[at..at + 4].try_into().unwrap())
    }
}

/// How a connection ended, as the client saw it.
#[derive(Debug, PartialEq)]
pub(crate) enum Ending {
    /// A GOAWAY with this error code and debug data (h2's own limits name themselves there;
    /// the server's GOAWAYs carry none).
    GoAway { code: u32, debug: String },
    /// Closed (or reset) without a GOAWAY.
    Closed,
}

/// A connection after the preface, the client's SETTINGS sent and the server's acknowledged.
pub(crate) struct RawH2 {
    pub(crate) stream: TcpStream,
}

impl RawH2 {
    /// Connects, sends the preface and `settings`, and acknowledges the server's SETTINGS (h2
    /// applies its own limits only once they are acknowledged). Each read waits at most `patience`.
    pub(crate) fn connect(addr: SocketAddr, settings: &[(u16, u32)], patience: Duration) -> RawH2 {
        let stream = TcpStream::connect(addr).expect("connect to the server");
        // Each write goes at once: with Nagle's algorithm a write waits for the last one's ACK,
        // which the server's delayed ACK holds ~40 ms, and the frames of that time arrive as one.
        stream.set_nodelay(true).unwrap();
        stream.set_read_timeout(Some(patience)).unwrap();
        let mut raw = RawH2 { stream };
        let mut payload = Vec::new();
        for (id, value) in settings {
            payload.extend_from_slice(&id.to_be_bytes());
            payload.extend_from_slice(&value.to_be_bytes());
        }
        let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        hello.extend(frame(SETTINGS, 0, 0, &payload));
        raw.stream.write_all(&hello).unwrap();
        loop {
            let frame = raw.read_frame().expect("the server's SETTINGS");
            if frame.kind == SETTINGS && frame.flags & ACK == 0 {
                break;
            }
        }
        raw.stream.write_all(&frame(SETTINGS, ACK, 0, &[])).unwrap();
        raw
    }

    pub(crate) fn read_frame(&mut self) -> io::Result<Frame> {
        let mut head = [0u8; 9];
        self.stream.read_exact(&mut head)?;
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let mut payload = vec![0; len];
        self.stream.read_exact(&mut payload)?;
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        Ok(Frame { kind: head[3], flags: head[4], stream, payload })
    }

    /// Writes `frames` and a PING, then reads until the PING's answer: the server has read the
    /// frames by then. How the connection ended if it did first (a write failing, or the end
    /// read before the answer).
    pub(crate) fn sync(&mut self, frames: &[u8]) -> Result<(), Ending> {
        const MARK: [u8; 8] = *b"in-step!";
        let mut out = frames.to_vec();
        out.extend(ping(0, MARK));
        if self.stream.write_all(&out).is_err() {
            return Err(self.ending().0);
        }
        loop {
            match self.read_frame() {
                Ok(frame) if frame.kind == PING && frame.flags & ACK != 0 && frame.payload == MARK => return Ok(()),
                Ok(frame) if frame.kind == GOAWAY => return Err(go_away(&frame)),
                Ok(_) => {}
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                    panic!("no answer to a PING within the connection's patience")
                }
                Err(_) => return Err(Ending::Closed),
            }
        }
    }

    /// Reads every frame until the server closes the connection (a reset counts as its close).
    /// Panics if a read waits longer than the connection's patience.
    pub(crate) fn until_closed(&mut self) -> Vec<Frame> {
        let mut frames = Vec::new();
        loop {
            match self.read_frame() {
                Ok(frame) => frames.push(frame),
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                    panic!("the connection still open after its patience; read {frames:?}")
                }
                Err(_) => return frames,
            }
        }
    }

    /// Reads until the server ends the connection, returning how and the frames before it.
    /// Panics if a read waits longer than the connection's patience.
    pub(crate) fn ending(&mut self) -> (Ending, Vec<Frame>) {
        let mut frames = Vec::new();
        loop {
            match self.read_frame() {
                Ok(frame) if frame.kind == GOAWAY => return (go_away(&frame), frames),
                Ok(frame) => frames.push(frame),
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                    panic!("the connection still open after its patience; {} frames read", frames.len())
                }
                Err(_) => return (Ending::Closed, frames),
            }
        }
    }
}

/// The ending a GOAWAY frame says.
fn go_away(frame: &Frame) -> Ending {
    Ending::GoAway { code: frame.code(), debug: String::from_utf8_lossy(&frame.payload[8..]).into_owned() }
}

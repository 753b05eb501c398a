//! The tokio codec that frames memcached traffic and enforces [`ProtocolLimits`].
//!
//! # States
//!
//! ```text
//!   Line ──header──▶ Data(len) ──block + \r\n──▶ Line
//!    │  └─too large / ms error──▶ Swallow(n) ──n bytes dropped──▶ Line
//!    └─over-long line, HTTP, quit──▶ Closed (buffer dropped, nothing more decoded)
//! ```
//!
//! # Limits (the invariant the proptest checks)
//!
//! When `decode` returns `Ok(None)`, the buffer holds at most one partial line
//! (≤ the line limit) or one partial data block (≤ `max_item_size + 2`), so never more than
//! [`ProtocolLimits::max_buffered`]. Swallowed bytes are dropped as they arrive. Every
//! [`Frame::Request`] has keys ≤ `max_key_len` and values ≤ `max_item_size`.

use std::io;

use bytes::{Buf, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use super::request::{Request, TooLarge};
use super::scan::find;
use super::text::{parse_line, DataHeader, ErrorReply, Parsed};
use super::ProtocolLimits;

/// memcached's read buffer (`READ_BUFFER_SIZE`): it finds a command line's newline in up to
/// this many bytes read at once.
pub const SIZE_LINE_WINDOW: usize = 16 * 1024;

/// What the decoder yields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// A request to execute.
    Request(Request),
    /// A protocol error to send back at once, in order with other replies.
    Error(ErrorReply),
    /// Close the connection after writing earlier replies, sending nothing more.
    Close,
}

/// Where the decoder is in the byte stream.
#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    /// At the start of a command line.
    Line,
    /// Waiting for a data block of `header.len` bytes plus `\r\n`.
    Data(DataHeader),
    /// Dropping this many more bytes (a refused data block).
    Swallow(usize),
    /// The connection is closing: nothing more is decoded.
    Closed,
}

/// The memcached codec: decodes [`Frame`]s, encodes reply bytes.
#[derive(Clone, Debug)]
pub struct MemcacheCodec {
    limits: ProtocolLimits,
    state: State,
}

impl MemcacheCodec {
    /// A codec enforcing `limits`.
    pub fn new(limits: ProtocolLimits) -> Self {
        MemcacheCodec {
            limits,
            state: State::Line,
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> &ProtocolLimits {
        &self.limits
    }

    /// Whether the codec has decided to close the connection.
    pub fn is_closed(&self) -> bool {
        self.state == State::Closed
    }

    /// The longest line allowed for the buffered command: memcached lets `get `/`gets ` lines
    /// (after at most 100 spaces) grow past the normal limit.
    fn line_limit(&self, buf: &[u8]) -> usize {
        let spaces = buf.iter().take_while(|b| **b == b' ').count();
        let rest = &buf[spaces..];
        let multiget = rest.starts_with(b"get ") || rest.starts_with(b"gets ");
        if spaces <= 100 && multiget {
            self.limits
                .max_multiget_line_len
                .max(self.limits.max_line_len)
        } else {
            self.limits.max_line_len
        }
    }

    /// Takes the next complete line (without `\r\n`), `Ok(None)` if it has not all arrived,
    /// or `Err(())` when it is over the limit.
    ///
    /// As memcached's `try_read_command_ascii`: a line whose newline is already buffered within
    /// [`SIZE_LINE_WINDOW`] is taken whatever its length; the limit applies only to a line
    /// still waiting for its newline.
    fn next_line(&self, buf: &mut BytesMut) -> Result<Option<Bytes>, ()> {
        let limit = self.line_limit(buf);
        let window = &buf[..buf.len().min(limit.max(SIZE_LINE_WINDOW) + 1)];
        let Some(newline) = find(window, b'\n') else {
            return if buf.len() > limit { Err(()) } else { Ok(None) };
        };
        let mut line = buf.split_to(newline + 1).freeze();
        line.truncate(newline);
        if line.last() == Some(&b'\r') {
            line.truncate(newline - 1);
        }
        Ok(Some(line))
    }

    /// Turns a parsed line into a frame, switching state for data blocks and swallowing.
    fn on_parsed(&mut self, parsed: Parsed) -> Option<Frame> {
        match parsed {
            Parsed::Request(request) => {
                if request == Request::Quit {
                    self.state = State::Closed;
                }
                Some(Frame::Request(request))
            }
            Parsed::Data(header) if header.len > self.limits.max_item_size => {
                self.state = State::Swallow(header.len + 2);
                Some(Frame::Request(Request::TooLarge(too_large(header.request))))
            }
            Parsed::Data(header) => {
                self.state = State::Data(header);
                None
            }
            Parsed::Error(error) => Some(Frame::Error(error)),
            Parsed::Swallow(error, len) => {
                self.state = State::Swallow(len + 2);
                Some(Frame::Error(error))
            }
            Parsed::Silent => None,
            Parsed::Close => {
                self.state = State::Closed;
                Some(Frame::Close)
            }
        }
    }

    /// One step of the state machine: `Err(())` means "need more bytes".
    fn step(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, ()> {
        match std::mem::replace(&mut self.state, State::Line) {
            State::Closed => {
                self.state = State::Closed;
                buf.clear();
                Err(())
            }
            State::Swallow(remaining) => {
                let dropped = remaining.min(buf.len());
                buf.advance(dropped);
                if dropped < remaining {
                    self.state = State::Swallow(remaining - dropped);
                    return Err(());
                }
                Ok(None)
            }
            State::Data(header) => self.take_block(header, buf),
            State::Line => match self.next_line(buf) {
                Ok(Some(line)) => Ok(self.on_parsed(parse_line(&line, &self.limits))),
                Ok(None) => Err(()),
                Err(()) => {
                    buf.clear();
                    Ok(self.on_parsed(Parsed::Close))
                }
            },
        }
    }

    /// Completes a storage command once its whole data block is buffered.
    fn take_block(&mut self, header: DataHeader, buf: &mut BytesMut) -> Result<Option<Frame>, ()> {
        let need = header.len + 2;
        if buf.len() < need {
            buf.reserve(need - buf.len());
            self.state = State::Data(header);
            return Err(());
        }
        let mut block = buf.split_to(need).freeze();
        if block[header.len..] != b"\r\n"[..] {
            return Ok(bad_chunk(&header.request));
        }
        block.truncate(header.len);
        Ok(Some(Frame::Request(with_value(header.request, block))))
    }
}

/// `CLIENT_ERROR bad data chunk`, hidden by a text `noreply` (never by meta `q`).
fn bad_chunk(request: &Request) -> Option<Frame> {
    match request {
        Request::Store(s) if s.noreply => None,
        _ => Some(Frame::Error(ErrorReply::BAD_DATA_CHUNK)),
    }
}

/// Puts the data block into a storage request.
fn with_value(mut request: Request, value: Bytes) -> Request {
    match &mut request {
        Request::Store(s) => s.value = value,
        Request::MetaSet(ms) => ms.value = value,
        _ => {}
    }
    request
}

/// The refusal of a storage request whose block is over the limit.
fn too_large(request: Request) -> TooLarge {
    let (key, mode, meta, noreply) = match request {
        Request::Store(s) => (s.key, s.mode, false, s.noreply),
        Request::MetaSet(ms) => (ms.key.bytes, ms.mode, true, false),
        other => unreachable!("only storage commands carry data blocks: {other:?}"),
    };
    TooLarge {
        key,
        mode,
        meta,
        noreply,
    }
}

impl Decoder for MemcacheCodec {
    type Item = Frame;
    type Error = io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> io::Result<Option<Frame>> {
        loop {
            match self.step(buf) {
                Ok(Some(frame)) => return Ok(Some(frame)),
                Ok(None) => continue,
                Err(()) => return Ok(None),
            }
        }
    }

    /// At end of stream a partial command is dropped, as memcached drops it on close.
    fn decode_eof(&mut self, buf: &mut BytesMut) -> io::Result<Option<Frame>> {
        let frame = self.decode(buf)?;
        if frame.is_none() {
            buf.clear();
        }
        Ok(frame)
    }
}

impl Encoder<Bytes> for MemcacheCodec {
    type Error = io::Error;

    fn encode(&mut self, reply: Bytes, dst: &mut BytesMut) -> io::Result<()> {
        dst.extend_from_slice(&reply);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::request::{Retrieve, Store};
    use podkv_store::Mode;

    fn frames(codec: &mut MemcacheCodec, input: &[u8]) -> (Vec<Frame>, BytesMut) {
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        while let Some(frame) = codec.decode(&mut buf).unwrap() {
            out.push(frame);
        }
        (out, buf)
    }

    fn decode_all(input: &[u8]) -> Vec<Frame> {
        frames(&mut MemcacheCodec::new(ProtocolLimits::default()), input).0
    }

    fn set(value: &'static [u8], noreply: bool) -> Frame {
        Frame::Request(Request::Store(Store {
            mode: Mode::Set,
            key: Bytes::from_static(b"k"),
            flags: 0,
            exptime: 0,
            value: Bytes::from_static(value),
            noreply,
        }))
    }

    #[test]
    fn binary_safe_data_block() {
        assert_eq!(
            decode_all(b"set k 0 0 4\r\n\r\n\0\n\r\n"),
            vec![set(b"\r\n\0\n", false)]
        );
    }

    #[test]
    fn bare_newlines_end_lines_too() {
        let get = Frame::Request(Request::Get(Retrieve {
            keys: vec![Bytes::from_static(b"a")],
            touch: None,
            refused: false,
        }));
        assert_eq!(decode_all(b"get a\n"), vec![get]);
    }

    #[test]
    fn bad_chunk_then_the_rest_is_a_command() {
        let frames = decode_all(b"set k 0 0 4\r\nerror\r\n");
        let expected = vec![
            Frame::Error(ErrorReply::BAD_DATA_CHUNK),
            Frame::Error(ErrorReply::ERROR),
        ];
        assert_eq!(frames, expected);
        assert_eq!(
            decode_all(b"set k 0 0 1 noreply\r\nab\r\n"),
            vec![Frame::Error(ErrorReply::ERROR)]
        );
    }

    #[test]
    fn too_large_swallows_exactly_the_block() {
        let limits = ProtocolLimits {
            max_item_size: 4,
            ..ProtocolLimits::default()
        };
        let mut codec = MemcacheCodec::new(limits);
        let (got, rest) = frames(&mut codec, b"set k 0 0 5\r\nab");
        let refused = TooLarge {
            key: Bytes::from_static(b"k"),
            mode: Mode::Set,
            meta: false,
            noreply: false,
        };
        assert_eq!(got, vec![Frame::Request(Request::TooLarge(refused))]);
        assert!(rest.is_empty(), "swallowed bytes are not kept");
        let (got, _) = frames(&mut codec, b"cde\r\nset k 0 0 1\r\nx\r\n");
        assert_eq!(got, vec![set(b"x", false)]);
    }

    #[test]
    fn over_long_line_closes_without_reply() {
        let mut codec = MemcacheCodec::new(ProtocolLimits::default());
        let (got, rest) = frames(&mut codec, &[b'x'; 2049]);
        assert_eq!(got, vec![Frame::Close]);
        assert!(rest.is_empty() && codec.is_closed());
        let (got, _) = frames(&mut codec, b"version\r\n");
        assert!(got.is_empty(), "nothing is decoded after close");
        let mut line = vec![b'x'; 2048];
        line.extend_from_slice(b"\n");
        assert_eq!(decode_all(&line), vec![Frame::Error(ErrorReply::ERROR)]);
    }

    #[test]
    fn long_line_with_its_newline_is_answered() {
        let mut line = vec![b'x'; 3000];
        line.extend_from_slice(b"\r\n");
        assert_eq!(decode_all(&line), vec![Frame::Error(ErrorReply::ERROR)]);
        let mut codec = MemcacheCodec::new(ProtocolLimits::default());
        let mut line = vec![b'x'; SIZE_LINE_WINDOW + 1];
        line.extend_from_slice(b"\r\n");
        let (got, _) = frames(&mut codec, &line);
        assert_eq!(got, vec![Frame::Close], "beyond memcached's read buffer");
    }

    #[test]
    fn long_multiget_lines_are_allowed() {
        let mut line = b"get".to_vec();
        for n in 0..400 {
            line.extend_from_slice(format!(" key{n:06}").as_bytes());
        }
        line.extend_from_slice(b"\r\n");
        assert!(line.len() > 2048);
        let got = decode_all(&line);
        assert!(matches!(&got[..], [Frame::Request(Request::Get(r))] if r.keys.len() == 400));
    }

    #[test]
    fn quit_stops_decoding() {
        assert_eq!(
            decode_all(b"quit\r\nversion\r\n"),
            vec![Frame::Request(Request::Quit)]
        );
    }

    #[test]
    fn partial_input_waits() {
        let mut codec = MemcacheCodec::new(ProtocolLimits::default());
        let (got, rest) = frames(&mut codec, b"set k 0 0 3\r\nab");
        assert!(got.is_empty());
        assert_eq!(&rest[..], b"ab");
        let mut buf = rest;
        buf.extend_from_slice(b"c\r\n");
        assert!(codec.decode(&mut buf).unwrap().is_some());
    }
}

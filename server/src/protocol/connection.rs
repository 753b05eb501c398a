//! One client connection: read → decode every complete frame → dispatch each → one write.
//!
//! Replies to pipelined requests go out together, in request order, after each read, as
//! memcached batches them. The loop ends at end of stream, on `quit`, or when the codec
//! closes the connection (over-long line, HTTP probe); replies already composed are written
//! first.

use std::io;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::codec::Decoder;

use super::codec::MemcacheCodec;
use super::dispatch::{dispatch, Flow};
use super::storage::Storage;
use super::ProtocolLimits;

/// Bytes the read buffer keeps free before each read.
const SIZE_READ_CHUNK: usize = 16 * 1024;
/// Reply bytes after which [`drain`] stops for them to be written: one read of 16 KiB of
/// `get` lines for a 1 MiB value would otherwise make 1.8 GB of replies at once. memcached
/// too answers a bounded number of requests per event and stops parsing while a write waits.
pub const SIZE_OUTPUT_MAX: usize = 256 * 1024;

/// Serves one connection until the client leaves or the protocol closes it.
pub async fn serve<S, IO>(storage: &S, mut io: IO, limits: ProtocolLimits) -> io::Result<()>
where
    S: Storage + ?Sized,
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let mut codec = MemcacheCodec::new(limits);
    let mut input = BytesMut::with_capacity(SIZE_READ_CHUNK);
    let mut output = BytesMut::new();
    loop {
        input.reserve(SIZE_READ_CHUNK);
        let eof = io.read_buf(&mut input).await? == 0;
        let flow = loop {
            let flow = drain(storage, &mut codec, &mut input, &mut output, eof)?;
            if !output.is_empty() {
                io.write_all(&output).await?;
                output.clear();
            }
            if flow != Flow::Full {
                break flow;
            }
        };
        if eof || flow == Flow::Close {
            return io.shutdown().await;
        }
    }
}

/// Decodes and dispatches every complete frame in `input`, appending replies to `output`;
/// stops early with [`Flow::Full`] once `output` holds [`SIZE_OUTPUT_MAX`] bytes, for the
/// caller to write them and call again.
pub fn drain<S: Storage + ?Sized>(
    storage: &S,
    codec: &mut MemcacheCodec,
    input: &mut BytesMut,
    output: &mut BytesMut,
    eof: bool,
) -> io::Result<Flow> {
    loop {
        let frame = if eof {
            codec.decode_eof(input)?
        } else {
            codec.decode(input)?
        };
        let Some(frame) = frame else {
            return Ok(if codec.is_closed() {
                Flow::Close
            } else {
                Flow::Continue
            });
        };
        if dispatch(storage, frame, output) == Flow::Close {
            return Ok(Flow::Close);
        }
        if output.len() >= SIZE_OUTPUT_MAX && !input.is_empty() {
            return Ok(Flow::Full);
        }
    }
}

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
        let flow = drain(storage, &mut codec, &mut input, &mut output, eof)?;
        if !output.is_empty() {
            io.write_all(&output).await?;
            output.clear();
        }
        if eof || flow == Flow::Close {
            return io.shutdown().await;
        }
    }
}

/// Decodes and dispatches every complete frame in `input`, appending replies to `output`.
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
    }
}

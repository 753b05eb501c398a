//! What parsing one command line yields, for the text and the meta protocol alike: a
//! request, a storage command's header waiting for its data block, or one of memcached's
//! error lines ([`ErrorReply`], every text and meta one).

use bytes::{BufMut, BytesMut};

use super::request::Request;

/// One of memcached's error lines, without its `\r\n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ErrorReply(pub &'static str);

impl ErrorReply {
    /// Unknown command or wrong number of tokens.
    pub const ERROR: Self = Self("ERROR");
    /// A malformed argument or an over-long key.
    pub const BAD_FORMAT: Self = Self("CLIENT_ERROR bad command line format");
    /// `delete` with arguments other than `0` / `noreply`.
    pub const DELETE_USAGE: Self =
        Self("CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]");
    /// A bad exptime on `touch`, `gat`, `flush_all`.
    pub const INVALID_EXPTIME: Self = Self("CLIENT_ERROR invalid exptime argument");
    /// A bad delta on `incr` / `decr`.
    pub const INVALID_DELTA: Self = Self("CLIENT_ERROR invalid numeric delta argument");
    /// The two bytes after a data block were not `\r\n`.
    pub const BAD_DATA_CHUNK: Self = Self("CLIENT_ERROR bad data chunk");
    /// incr/decr of a value that is not a number.
    pub const NON_NUMERIC: Self =
        Self("CLIENT_ERROR cannot increment or decrement non-numeric value");
    /// A value over the item size limit.
    pub const TOO_LARGE: Self = Self("SERVER_ERROR object too large for cache");
    /// The store could not allocate the item.
    pub const OUT_OF_MEMORY_STORING: Self = Self("SERVER_ERROR out of memory storing object");
    /// incr/decr could not allocate.
    pub const OUT_OF_MEMORY: Self = Self("SERVER_ERROR out of memory");
    /// `shutdown` without memcached's `-A`.
    pub const SHUTDOWN_DISABLED: Self = Self("ERROR: shutdown not enabled");
    /// `stats cachedump` with dumps disabled.
    pub const CACHEDUMP_DISABLED: Self = Self("CLIENT_ERROR stats cachedump not allowed");
    /// `stats detail` with a bad argument.
    pub const DETAIL_USAGE: Self = Self("CLIENT_ERROR usage: stats detail on|off|dump");

    // The meta protocol's own.
    /// `mg` with 20 or more tokens.
    pub const MG_OPTIONS_TOO_LONG: Self = Self("CLIENT_ERROR options flags are too long");
    /// `ms`, `md`, `ma` with 20 or more tokens.
    pub const OPTIONS_TOO_LONG: Self = Self("CLIENT_ERROR options flags too long");
    /// A flag given twice (or a byte ≥ 127).
    pub const DUPLICATE_FLAG: Self = Self("CLIENT_ERROR duplicate flag");
    /// An unknown flag.
    pub const INVALID_FLAG: Self = Self("CLIENT_ERROR invalid flag");
    /// `md`/`ma`: any pre-parse failure.
    pub const INVALID_OR_DUPLICATE_FLAG: Self = Self("CLIENT_ERROR invalid or duplicate flag");
    /// A numeric token that does not parse (`N T R C E`).
    pub const BAD_TOKEN: Self = Self("CLIENT_ERROR bad token in command line format");
    /// `J` does not parse.
    pub const BAD_INITIAL: Self = Self("CLIENT_ERROR invalid numeric initial value");
    /// `D` does not parse.
    pub const BAD_DELTA: Self = Self("CLIENT_ERROR invalid numeric delta value");
    /// A `b` key that is not valid base64.
    pub const BAD_KEY_ENCODING: Self = Self("CLIENT_ERROR error decoding key");
    /// An `M` token that is not exactly two bytes.
    pub const MODE_LENGTH: Self = Self("CLIENT_ERROR incorrect length for M token");
    /// An unknown `ms` mode.
    pub const MS_MODE: Self = Self("CLIENT_ERROR invalid mode for ms M token");
    /// An unknown `ma` mode.
    pub const MA_MODE: Self = Self("CLIENT_ERROR invalid mode for ma M token");
    /// An `O` token over 32 bytes.
    pub const OPAQUE_TOO_LONG: Self = Self("CLIENT_ERROR opaque token too long");

    /// Writes the line and its `\r\n`.
    pub fn compose(self, out: &mut BytesMut) {
        out.put_slice(self.0.as_bytes());
        out.put_slice(b"\r\n");
    }
}

/// What one command line yields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A complete request.
    Request(Request),
    /// A storage command: its data block (`len` bytes, then `\r\n`) follows.
    Data(DataHeader),
    /// Reply with this error and carry on with the next line.
    Error(ErrorReply),
    /// Reply with this error, then discard the next `len + 2` bytes (an `ms` refused after
    /// its length was read).
    Swallow(ErrorReply, usize),
    /// A `noreply` command failed: nothing to send.
    Silent,
    /// Close the connection without a reply (an HTTP request).
    Close,
}

/// A storage command waiting for its data block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataHeader {
    /// The request, its value still empty.
    pub request: Request,
    /// The data block length, without `\r\n`.
    pub len: usize,
}

//! The memcached wire protocol (text and meta), parsed into request types with no store access.
//!
//! # Map
//!
//! bytes → [`codec`] (framing, limits, swallowing) → [`text`] / [`meta`] (one line → one
//! [`Request`]) → [`dispatch`] (runs the request against any [`Storage`], composes the exact
//! reply bytes) → bytes. [`connection`] drives that loop over a tokio stream.
//!
//! - [`request`]: one type per command, plus the [`Request`] enum; no bytes of the store.
//! - [`text`]: the classic text protocol — tokenizer, parse, compose, byte-literal tests.
//! - [`meta`]: the meta protocol (`mg ms md ma mn me`) — flags, parse, compose.
//! - [`parsed`]: what parsing a line yields for both: [`parsed::Parsed`], every error line.
//! - `tests_text`, `tests_meta`: their byte-literal tests.
//! - [`storage`]: the [`Storage`] trait, one method per command, in the store's types.
//! - [`codec`]: a `tokio_util` codec: yields [`Frame`]s, enforces [`ProtocolLimits`].
//! - [`dispatch`]: executes a [`Frame`] against a [`Storage`], honouring `noreply` and `q`.
//! - [`connection`]: read → decode all → dispatch all → one write, until close.
//! - `numeric`, `base64`: memcached's `safe_strto*` number rules and its base64 key codec.
//! - `scan`: finding newlines and spaces eight bytes at a time.
//!
//! # Behaviour reference
//!
//! Every reply, error string and edge case follows memcached 1.6 (`proto_text.c`,
//! `memcached.c`, `doc/protocol.txt`). Where podkv had to choose, the choice is written here:
//!
//! 1. **Over-long lines.** As memcached's `try_read_command_ascii`: when more than
//!    [`ProtocolLimits::max_line_len`] (2048) bytes are buffered and no newline is among them,
//!    the connection closes without a reply, except for `get `/`gets ` lines, which may grow to
//!    [`ProtocolLimits::max_multiget_line_len`] (256 KiB; memcached: unbounded). A line whose
//!    newline is already buffered within 16 KiB (memcached's read buffer,
//!    [`codec::SIZE_LINE_WINDOW`]) is answered whatever its length (usually `ERROR` or
//!    `CLIENT_ERROR bad command line format`). Like memcached's, the outcome for a long line
//!    depends on how much of it one read delivers. There is no `CLIENT_ERROR line too long`
//!    in memcached 1.6's text protocol, so podkv sends none.
//! 2. **Over-size values.** As memcached: the data block is swallowed (exactly `<bytes>` + 2
//!    bytes, whatever they are), the reply is `SERVER_ERROR object too large for cache`, and for
//!    `set` (and every `ms`) the old item under that key is removed. podkv compares `<bytes>`
//!    with [`ProtocolLimits::max_item_size`]; memcached compares the whole item (header + key +
//!    value) with its slab limit, so its threshold is a few dozen bytes lower. The store may
//!    still refuse a value with `StoreError::TooLarge` by its own accounting.
//! 3. **Errors before the data block** (`CLIENT_ERROR bad command line format` for a bad
//!    number, a negative length or a key over 250 bytes) do *not* swallow the data block, as in
//!    memcached: the block is then read as a command line, usually giving `ERROR`.
//! 4. **Bad data chunk.** When the two bytes after the data block are not `\r\n`, the reply is
//!    `CLIENT_ERROR bad data chunk` and parsing resumes right after those two bytes, as in
//!    memcached (so `set k 0 0 4\r\nerror\r\n` answers `CLIENT_ERROR bad data chunk\r\nERROR\r\n`).
//! 5. **noreply** is detected as memcached does, by the last token being `noreply`, before
//!    validation; it then hides errors of that command too. Meta commands never hide errors.
//! 6. **NUL bytes** end a command line, as memcached's `strlen`-based tokenizer does.
//! 7. **Numbers** follow memcached's `safe_strtoul` / `safe_strtol` / `safe_strtoull`,
//!    including `flags` and exptimes, lengths and `T N R` wrapping to 32 bits (4294967296 is
//!    0), leading `+`, and rejecting negatives where memcached does.
//! 8. **`shutdown`** is refused with `ERROR: shutdown not enabled` (memcached without `-A`).
//!    `stats cachedump` answers `CLIENT_ERROR stats cachedump not allowed` (memcached with
//!    dumps disabled). Admin commands podkv has no equivalent for (`slabs`, `lru`,
//!    `lru_crawler`, `watch`, `cache_memlimit`, `extstore`) answer `ERROR`.
//! 9. **HTTP probes**: an unknown command whose last token starts with `HTTP/` closes the
//!    connection without a reply, as memcached does.
//! 10. **Meta `k` with `b`**: the key is re-encoded from the decoded bytes (as memcached does);
//!     whether a key is binary is taken from the request's `b` flag, not remembered per item.
//! 11. **Meta flags** are pre-parsed as memcached's `_meta_flag_preparse`: every command accepts
//!     the union of known flags (ignoring the ones it does not use), duplicates are an error,
//!     and `E<cas>` (explicit new CAS, memcached 1.6.21+) is accepted. `md x` is not supported.
//! 12. **`me`** prints `exp=` exactly as memcached computes it (`now - exptime`, so a live item
//!     shows a negative number), and `cls=` is whatever class the store reports.

pub mod base64;
pub mod codec;
pub mod connection;
pub mod dispatch;
pub mod meta;
pub mod numeric;
pub mod parsed;
pub mod request;
pub mod scan;
pub mod storage;
pub mod text;

#[cfg(test)]
mod model;
#[cfg(test)]
mod tests_conversation;
#[cfg(test)]
mod tests_meta;
#[cfg(test)]
mod tests_proptest;
#[cfg(test)]
mod tests_text;

pub use codec::{Frame, MemcacheCodec};
pub use dispatch::{dispatch, Flow};
pub use request::Request;
pub use storage::{Storage, Stored};

/// The size limits the codec enforces before any request reaches the store.
///
/// Defaults are memcached 1.6's: 250-byte keys, 1 MiB items, 2048-byte command lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProtocolLimits {
    /// Longest key, in bytes as sent on the wire (for meta `b` keys: the base64 text).
    pub max_key_len: usize,
    /// Longest value (data block, without its `\r\n`) a storage command may carry.
    pub max_item_size: usize,
    /// Longest command line (without its `\n`); longer lines close the connection.
    pub max_line_len: usize,
    /// Longest `get`/`gets` line: multi-key gets may exceed `max_line_len` up to this.
    pub max_multiget_line_len: usize,
}

impl Default for ProtocolLimits {
    fn default() -> Self {
        ProtocolLimits {
            max_key_len: 250,
            max_item_size: 1024 * 1024,
            max_line_len: 2048,
            max_multiget_line_len: 256 * 1024,
        }
    }
}

impl ProtocolLimits {
    /// The most bytes the decoder ever holds: one command line plus one data block and its
    /// `\r\n`. Anything beyond is either decoded into a request or the connection closes.
    pub fn max_buffered(&self) -> usize {
        self.max_line_len.max(self.max_multiget_line_len) + 1 + self.max_item_size + 2
    }
}

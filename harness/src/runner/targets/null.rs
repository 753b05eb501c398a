//! The `null` target: every command hits at once. Runs against it measure the runner's own
//! cost per operation (generation, timing, counting).

use super::{Outcome, Session, Target};
use podkv_traces::Command;

/// A target that does nothing.
pub struct NullTarget;

/// A session of [`NullTarget`].
pub struct NullSession;

impl Target for NullTarget {
    type Session<'t> = NullSession;

    fn session(&self, _worker: usize) -> anyhow::Result<NullSession> {
        Ok(NullSession)
    }
}

impl Session for NullSession {
    #[inline]
    fn execute(&mut self, _c: Command, key: &[u8], value: &[u8]) -> anyhow::Result<Outcome> {
        std::hint::black_box((key, value));
        Ok(Outcome::Hit)
    }
}

//! Any [`KvMap`] as a target — the `dashmap` baseline ([`podkv_store::DashBaseline`]).
//!
//! `KvMap` offers get, set, delete and incr; the other commands are built from them:
//! add/replace/append/prepend/decr read, then write. That is exact when one worker owns
//! each key, as in a trace replay (keys are partitioned by hash); `gets` returns no token,
//! so a replayed `cas` misses; TTLs are ignored.

use super::{read_value, Outcome, Session, Target};
use podkv_store::{KvHandle, KvMap, StoreError};
use podkv_traces::Command;

/// A target over a `KvMap`.
pub struct KvTarget<M: KvMap>(pub M);

/// A worker's `KvMap` handle and a scratch buffer.
pub struct KvSession<H: KvHandle> {
    handle: H,
    scratch: Vec<u8>,
}

impl<M: KvMap> Target for KvTarget<M> {
    type Session<'t>
        = KvSession<M::Handle>
    where
        M: 't;

    fn session(&self, _worker: usize) -> anyhow::Result<KvSession<M::Handle>> {
        Ok(KvSession {
            handle: self.0.handle()?,
            scratch: Vec::new(),
        })
    }
}

impl<H: KvHandle> KvSession<H> {
    fn present(&mut self, key: &[u8]) -> Result<bool, StoreError> {
        self.handle.get_with(key, &mut |_| {})
    }

    /// A get: the value found is read ([`read_value`]).
    fn fetch(&mut self, key: &[u8]) -> Result<bool, StoreError> {
        self.handle.get_with(key, &mut |v| read_value(v))
    }

    /// Reads, and if present writes `f(old)`.
    fn rewrite(
        &mut self,
        key: &[u8],
        f: impl FnOnce(&[u8]) -> Option<Vec<u8>>,
    ) -> Result<bool, StoreError> {
        let mut old = std::mem::take(&mut self.scratch);
        let hit = self.handle.get_into(key, &mut old)?;
        let new = if hit { f(&old) } else { None };
        self.scratch = old;
        match new {
            Some(v) => self.handle.set(key, &v).map(|()| true),
            None => Ok(false),
        }
    }

    fn run(&mut self, command: Command, key: &[u8], value: &[u8]) -> Result<bool, StoreError> {
        match command {
            Command::Get | Command::Gets => self.fetch(key),
            Command::Set { .. } => self.handle.set(key, value).map(|()| true),
            Command::Add { .. } => match self.present(key)? {
                true => Ok(false),
                false => self.handle.set(key, value).map(|()| true),
            },
            Command::Replace { .. } => self.rewrite(key, |_| Some(value.to_vec())),
            Command::Append { .. } => self.rewrite(key, |old| Some([old, value].concat())),
            Command::Prepend { .. } => self.rewrite(key, |old| Some([value, old].concat())),
            Command::Cas { .. } => Ok(false),
            Command::Delete => self.handle.delete(key),
            Command::Incr { delta } => Ok(self.handle.incr(key, delta)?.is_some()),
            Command::Decr { delta } => self.rewrite(key, |old| {
                let n = podkv_store::parse_counter(old)?;
                Some(n.saturating_sub(delta).to_string().into_bytes())
            }),
        }
    }
}

impl<H: KvHandle> Session for KvSession<H> {
    #[inline]
    fn execute(&mut self, command: Command, key: &[u8], value: &[u8]) -> anyhow::Result<Outcome> {
        match self.run(command, key, value) {
            Ok(hit) => Ok(Outcome::from_bool(hit)),
            Err(StoreError::NonNumeric) => Ok(Outcome::Miss),
            Err(e) => Err(anyhow::anyhow!("{} on the map: {e}", command.op())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_built_from_kvmap() {
        let t = KvTarget(podkv_store::DashBaseline::new());
        let mut s = t.session(0).unwrap();
        let mut run = |c, k: &[u8], v: &[u8]| s.execute(c, k, v).unwrap() == Outcome::Hit;
        assert!(!run(Command::Replace { ttl: 0 }, b"k", b"1"));
        assert!(run(Command::Add { ttl: 0 }, b"k", b"1"));
        assert!(!run(Command::Add { ttl: 0 }, b"k", b"2"));
        assert!(run(Command::Incr { delta: 4 }, b"k", b""));
        assert!(run(Command::Append { ttl: 0 }, b"k", b"0"));
        assert!(run(Command::Decr { delta: 60 }, b"k", b""));
        assert!(run(Command::Prepend { ttl: 0 }, b"k", b"1"));
        let mut out = Vec::new();
        let handle = &mut t.0.handle().unwrap();
        assert!(handle.get_into(b"k", &mut out).unwrap());
        assert_eq!(out, b"10");
        assert!(!run(Command::Cas { ttl: 0 }, b"k", b"x"));
        assert!(run(Command::Delete, b"k", b""));
        assert!(!run(Command::Get, b"k", b""));
    }
}

//! The podkv store as a target: `embedded` ([`podkv_store::Store`] in a pod heap file,
//! shared by every process that opens it) and `mimalloc` ([`podkv_store::LocalStore`], the
//! same index over process-local memory). Both run every command with the store's own
//! memcached semantics (TTLs, CAS tokens, append/prepend, incr/decr).

use super::{read_value, Outcome, Session, Target};
use podkv_store::{Arena, Handle, LocalArena, Map, Mode, PodArena, StoreConfig, StoreError};
use podkv_traces::Command;
use std::collections::HashMap;
use std::path::Path;

/// A store target over arena `A`.
pub struct StoreTarget<A: Arena> {
    map: Map<A>,
    /// The pod heap, for targets that have one: its HWcc bytes are read when the run ends.
    heap: Option<podkv_alloc::Heap>,
}

impl StoreTarget<PodArena> {
    /// Opens (creating with `config` if needed) the store in the heap file at `path`.
    pub fn open(path: &Path, config: &StoreConfig) -> anyhow::Result<Self> {
        let map = podkv_store::Store::open(path, config.clone())
            .map_err(|e| anyhow::anyhow!("cannot open the store in {}: {e}", path.display()))?;
        let heap = Some(map.heap().clone());
        Ok(Self { map, heap })
    }
}

impl StoreTarget<LocalArena> {
    /// A fresh index in process memory, made with `config`.
    pub fn local(config: &StoreConfig) -> anyhow::Result<Self> {
        Ok(Self {
            map: podkv_store::LocalStore::new_local(config)?,
            heap: None,
        })
    }
}

impl StoreTarget<super::boost::BoostArena> {
    /// The index in the boost.interprocess segment `name` (created with `bytes` and `config`
    /// by the first process that opens it).
    pub fn boost(name: &str, bytes: u64, config: &StoreConfig) -> anyhow::Result<Self> {
        let arena = super::boost::BoostArena::open(name, bytes)?;
        Ok(Self {
            map: podkv_store::Map::open_in(arena, config)?,
            heap: None,
        })
    }
}

/// A worker's handle, remembering its `gets` tokens for `cas`.
pub struct StoreSession<A: Arena> {
    handle: Handle<A>,
    tokens: HashMap<Box<[u8]>, u64>,
}

impl<A: Arena> Target for StoreTarget<A> {
    type Session<'t> = StoreSession<A>;

    fn session(&self, _worker: usize) -> anyhow::Result<StoreSession<A>> {
        Ok(StoreSession {
            handle: self.map.handle()?,
            tokens: HashMap::new(),
        })
    }

    fn hwcc_bytes(&self) -> Option<u64> {
        self.heap.as_ref().map(podkv_alloc::Heap::hwcc_bytes)
    }

    fn mcas_ops(&self) -> Option<u64> {
        self.heap.as_ref().map(podkv_alloc::Heap::mcas_ops)
    }
}

impl<A: Arena> StoreSession<A> {
    fn store(
        &mut self,
        mode: Mode,
        key: &[u8],
        value: &[u8],
        ttl: u32,
    ) -> Result<bool, StoreError> {
        let outcome = self.handle.store(mode, key, value, 0, i64::from(ttl))?;
        Ok(outcome == podkv_store::Outcome::Stored)
    }

    fn run(&mut self, command: Command, key: &[u8], value: &[u8]) -> Result<bool, StoreError> {
        match command {
            Command::Get => Ok(self
                .handle
                .get(key)?
                .inspect(|g| read_value(g.value()))
                .is_some()),
            Command::Gets => {
                let token = self.handle.get(key)?.map(|g| {
                    read_value(g.value());
                    g.cas()
                });
                if let Some(t) = token {
                    self.tokens.insert(key.into(), t);
                }
                Ok(token.is_some())
            }
            Command::Set { ttl } => self.store(Mode::Set, key, value, ttl),
            Command::Add { ttl } => self.store(Mode::Add, key, value, ttl),
            Command::Replace { ttl } => self.store(Mode::Replace, key, value, ttl),
            Command::Append { ttl } => self.store(Mode::Append, key, value, ttl),
            Command::Prepend { ttl } => self.store(Mode::Prepend, key, value, ttl),
            Command::Cas { ttl } => match self.tokens.remove(key) {
                Some(token) => self.store(Mode::Cas(token), key, value, ttl),
                None => Ok(false),
            },
            Command::Delete => Ok(self.handle.delete(key)? == podkv_store::Outcome::Deleted),
            Command::Incr { delta } => Ok(self.handle.incr(key, delta)?.is_some()),
            Command::Decr { delta } => Ok(self.handle.decr(key, delta)?.is_some()),
        }
    }
}

impl<A: Arena> Session for StoreSession<A> {
    #[inline]
    fn execute(&mut self, command: Command, key: &[u8], value: &[u8]) -> anyhow::Result<Outcome> {
        match self.run(command, key, value) {
            Ok(hit) => Ok(Outcome::from_bool(hit)),
            Err(StoreError::NonNumeric) => Ok(Outcome::Miss),
            Err(e) => Err(anyhow::anyhow!("{} on the store: {e}", command.op())),
        }
    }

    /// Makes the table whole: a load whose last inserts doubled it leaves most of the newer
    /// half unmade (its splits are owed to inserts that never come), which a server's
    /// maintenance thread makes within a poll (`Map::spawn_maintainer`). Made here, off the
    /// clock, a run phase measures the store as it serves, not the end of its load.
    fn settle(&mut self) -> anyhow::Result<()> {
        match self.handle.make_whole() {
            (_, Some(_)) => Ok(()),
            (made, None) => anyhow::bail!(
                "the store's table could not be made whole ({made} buckets made): the heap is \
                 full"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_store_speaks_memcached() {
        let t = StoreTarget::local(&StoreConfig::default()).unwrap();
        let mut s = t.session(0).unwrap();
        let mut run = |c, k: &[u8], v: &[u8]| s.execute(c, k, v).unwrap() == Outcome::Hit;
        assert!(!run(Command::Get, b"k", b""));
        assert!(run(Command::Add { ttl: 0 }, b"k", b"1"));
        assert!(!run(Command::Add { ttl: 0 }, b"k", b"2"));
        assert!(run(Command::Incr { delta: 4 }, b"k", b""));
        assert!(
            !run(Command::Cas { ttl: 0 }, b"k", b"x"),
            "no gets, no token"
        );
        assert!(run(Command::Gets, b"k", b""));
        assert!(run(Command::Cas { ttl: 0 }, b"k", b"7"));
        assert!(run(Command::Append { ttl: 0 }, b"k", b"x"));
        assert!(
            !run(Command::Incr { delta: 1 }, b"k", b""),
            "7x is not a number"
        );
        assert!(run(Command::Delete, b"k", b""));
        assert!(!run(Command::Delete, b"k", b""));
    }

    /// Two mappings of one segment (at two addresses, as two processes have it) share one
    /// index: what one stores, the other reads.
    #[cfg(podkv_boost)]
    #[test]
    fn boost_index_is_shared_by_every_mapping() {
        let name = super::super::boost::fresh_segment_name();
        let a = StoreTarget::boost(&name, 64 << 20, &StoreConfig::default()).unwrap();
        let b = StoreTarget::boost(&name, 64 << 20, &StoreConfig::default()).unwrap();
        crate::bench::boost::Segment::remove(&name);
        let (mut sa, mut sb) = (a.session(0).unwrap(), b.session(1).unwrap());
        let value = vec![7u8; 5000];
        for i in 0..200u32 {
            let key = i.to_le_bytes();
            let hit = sa.execute(Command::Set { ttl: 0 }, &key, &value).unwrap();
            assert_eq!(hit, Outcome::Hit);
        }
        for i in 0..200u32 {
            let hit = sb.execute(Command::Get, &i.to_le_bytes(), b"").unwrap();
            assert_eq!(hit, Outcome::Hit, "key {i}");
        }
        let gone = sb
            .execute(Command::Delete, &7u32.to_le_bytes(), b"")
            .unwrap();
        assert_eq!(gone, Outcome::Hit);
        let miss = sa.execute(Command::Get, &7u32.to_le_bytes(), b"").unwrap();
        assert_eq!(miss, Outcome::Miss);
    }
}

//! The `dashmap` baseline behind [`KvMap`] (feature `baselines`; evaluation only).

use crate::kvmap::{KvHandle, KvMap};
use crate::StoreError;
use dashmap::DashMap;
use std::sync::Arc;

/// The shared map of the baseline.
type Shared = Arc<DashMap<Box<[u8]>, Box<[u8]>>>;

/// A `dashmap` of owned keys and values behind [`KvMap`] (evaluation only).
#[derive(Clone, Debug, Default)]
pub struct DashBaseline {
    map: Shared,
}

impl DashBaseline {
    /// An empty map.
    pub fn new() -> DashBaseline {
        DashBaseline::default()
    }
}

/// A thread's handle on a [`DashBaseline`].
#[derive(Debug)]
pub struct DashHandle {
    map: Shared,
}

impl KvMap for DashBaseline {
    type Handle = DashHandle;

    fn name(&self) -> &'static str {
        "dashmap"
    }

    fn handle(&self) -> Result<DashHandle, StoreError> {
        Ok(DashHandle {
            map: self.map.clone(),
        })
    }
}

impl KvHandle for DashHandle {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StoreError> {
        out.clear();
        let hit = self.map.get(key);
        if let Some(v) = &hit {
            out.extend_from_slice(v);
        }
        Ok(hit.is_some())
    }

    fn get_with(&mut self, key: &[u8], visit: &mut dyn FnMut(&[u8])) -> Result<bool, StoreError> {
        let hit = self.map.get(key);
        if let Some(v) = &hit {
            visit(v);
        }
        Ok(hit.is_some())
    }

    fn set(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.map.insert(key.into(), value.into());
        Ok(())
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool, StoreError> {
        Ok(self.map.remove(key).is_some())
    }

    fn incr(&mut self, key: &[u8], delta: u64) -> Result<Option<u64>, StoreError> {
        let Some(mut v) = self.map.get_mut(key) else {
            return Ok(None);
        };
        let n = crate::memcached::parse_counter(&v).ok_or(StoreError::NonNumeric)?;
        let n = n.wrapping_add(delta);
        *v = n.to_string().into_bytes().into();
        Ok(Some(n))
    }
}

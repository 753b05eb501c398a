//! The store behind the drivers' [`KvMap`] interface: [`Map`] over any arena.

use crate::arena::Arena;
use crate::kvmap::{KvHandle, KvMap, Recycling};
use crate::map::{Handle, Map};
use crate::StoreError;

impl<A: Arena> KvMap for Map<A> {
    type Handle = Handle<A>;

    fn name(&self) -> &'static str {
        A::NAME
    }

    fn handle(&self) -> Result<Handle<A>, StoreError> {
        Map::handle(self)
    }
}

impl<A: Arena> KvHandle for Handle<A> {
    #[inline]
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StoreError> {
        out.clear();
        let guard = self.get(key)?;
        if let Some(g) = &guard {
            out.extend_from_slice(g.value());
        }
        Ok(guard.is_some())
    }

    #[inline]
    fn get_with(&mut self, key: &[u8], visit: &mut dyn FnMut(&[u8])) -> Result<bool, StoreError> {
        let guard = self.get(key)?;
        if let Some(g) = &guard {
            visit(g.value());
        }
        Ok(guard.is_some())
    }

    #[inline]
    fn set(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        Handle::set(self, key, value, 0, 0)
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool, StoreError> {
        Ok(Handle::delete(self, key)? == crate::Outcome::Deleted)
    }

    fn lost_races(&self) -> Option<u64> {
        Some(Handle::lost_races(self))
    }

    fn recycling(&self) -> Option<Recycling> {
        Some(Handle::recycling(self))
    }

    fn incr(&mut self, key: &[u8], delta: u64) -> Result<Option<u64>, StoreError> {
        Handle::incr(self, key, delta)
    }
}

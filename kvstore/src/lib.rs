//! podkv-store: a lock-free hash index with epoch reclamation across processes, in the pod heap.
//!
//! (Work in progress: the driver interface [`KvMap`] comes first so drivers can code against it.)

pub mod error;
pub mod kvmap;

pub use error::StoreError;
pub use kvmap::{KvHandle, KvMap};

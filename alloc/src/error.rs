//! The allocator's errors: typed, one line each, never a panic or a signal.

use std::io;
use std::path::PathBuf;

/// Why a heap could not be opened or used.
#[derive(Debug, thiserror::Error)]
pub enum HeapError {
    /// The file could not be opened.
    #[error("cannot open heap {}: {source}", path.display())]
    Open {
        /// The heap file.
        path: PathBuf,
        /// The system's reason.
        source: io::Error,
    },
    /// The file cannot be written.
    #[error("heap {} is read-only: a heap must be writable by every process that opens it", path.display())]
    ReadOnly {
        /// The heap file.
        path: PathBuf,
    },
    /// The file is not a podkv heap.
    #[error("{} is not a podkv heap (its header has magic {magic:#08x}, podkv's is {expected:#08x})", path.display())]
    Foreign {
        /// The heap file.
        path: PathBuf,
        /// What the header held.
        magic: u64,
        /// podkv's magic.
        expected: u64,
    },
    /// A podkv heap of another format version. A store's items cross formats by dump and
    /// load, which the message names.
    #[error("heap {} has format version {found}; this podkv reads version {expected}: move a store's items with `podkv store dump` (run by the podkv that wrote the heap) and `podkv store load` into a heap made by this one", path.display())]
    Version {
        /// The heap file.
        path: PathBuf,
        /// The file's version.
        found: u64,
        /// This build's version.
        expected: u64,
    },
    /// The file is shorter than its own header says it must be.
    #[error("heap {} is truncated: {len} bytes, but its slabs reach {needed} bytes", path.display())]
    Truncated {
        /// The heap file.
        path: PathBuf,
        /// Its length.
        len: u64,
        /// The length its metadata requires.
        needed: u64,
    },
    /// The header or metadata holds values no valid heap has.
    #[error("heap {} is corrupt: {what}", path.display())]
    Corrupt {
        /// The heap file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// The heap, its file or its file system is full.
    #[error("out of memory: {what}")]
    OutOfMemory {
        /// What could not be had.
        what: String,
    },
    /// Every thread slot is claimed.
    #[error("no free thread slot: all {count} slots of the heap are claimed")]
    NoSlot {
        /// Slots in the heap.
        count: u64,
    },
    /// The heap could not be mapped.
    #[error("cannot map heap: {source}")]
    Map {
        /// The system's reason.
        source: io::Error,
    },
    /// A system call on the heap file failed.
    #[error("{what} on heap {} failed: {source}", path.display())]
    Io {
        /// The heap file.
        path: PathBuf,
        /// The call.
        what: &'static str,
        /// The system's reason.
        source: io::Error,
    },
    /// Every hazard record is claimed by a live process.
    #[error("no free hazard record: {count} processes already map this heap's huge heap")]
    NoHazardRecord {
        /// Records in the heap.
        count: u64,
    },
    /// Every process line of an `nmp` heap's mCAS region is held by a live process.
    #[error("no free mCAS process line: {count} processes already have this heap open")]
    NoProcessLine {
        /// Process lines in the region.
        count: u64,
    },
    /// This process already has as many heaps open as the SIGSEGV handler's registry holds.
    #[error(
        "too many heaps open in this process: the huge heap's fault handler serves at most {count}"
    )]
    TooManyHeaps {
        /// Heaps one process may have open with a huge heap.
        count: usize,
    },
    /// The heap's placement names a node that is not online here, or the kernel refused it.
    #[error("cannot place heap {}: {source}", path.display())]
    Placement {
        /// The heap file.
        path: PathBuf,
        /// Why the placement was refused.
        source: podkv_hw::topology::PlacementError,
    },
    /// A placement other than the default asked of a DAX device, whose pages are the device's.
    #[error("heap {} is a DAX device: its memory is the device's, so it takes no placement (drop `{placement}`)", path.display())]
    DaxPlacement {
        /// The device.
        path: PathBuf,
        /// The placement refused.
        placement: podkv_hw::topology::Placement,
    },
    /// This machine's NUMA nodes could not be read.
    #[error("cannot read the NUMA topology: {0}")]
    Topology(#[from] podkv_hw::topology::TopologyError),
    /// A configuration no heap can have.
    #[error("invalid heap configuration: {0}")]
    Config(String),
}

/// An offset (range) that [`crate::Heap::resolve_checked`] refused: it lies in no grown slab
/// and no live huge allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("offset {offset:#x} (+{len} bytes) lies in no live allocation range of the heap")]
pub struct ResolveError {
    /// The refused offset.
    pub offset: u64,
    /// Bytes asked for from it.
    pub len: u64,
}

/// Why an allocation failed: small and `Copy`, for the allocation path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// The heap (or its backing file system) has no room for another slab.
    #[error("out of memory: the heap cannot grow")]
    OutOfMemory,
    /// A size or alignment this heap does not serve.
    #[error("unsupported allocation: {size} bytes aligned to {align}")]
    Unsupported {
        /// Requested bytes.
        size: usize,
        /// Requested alignment.
        align: usize,
    },
}

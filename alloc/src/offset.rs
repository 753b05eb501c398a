//! Offsets, never addresses (constitution rule 1).
//!
//! Everything stored in the pod heap names other heap bytes by their [`Offset`] from the start
//! of the heap, which is the same in every process; [`crate::Heap::resolve`] turns one into this
//! process's address. [`PodPtr<T>`] is a typed offset.

use std::fmt;
use std::marker::PhantomData;

/// A byte offset from the start of a heap. Zero is the header, so no allocation is at zero and
/// [`Offset::NULL`] can mean "none" in heap structures.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[repr(transparent)]
pub struct Offset(pub u64);

impl Offset {
    /// "No allocation".
    pub const NULL: Offset = Offset(0);

    /// Whether this is [`Offset::NULL`].
    pub const fn is_null(self) -> bool {
        self.0 == 0
    }

    /// The offset `bytes` further on.
    pub const fn add(self, bytes: u64) -> Offset {
        Offset(self.0 + bytes)
    }
}

impl fmt::Debug for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Offset({:#x})", self.0)
    }
}

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// A typed offset: a `T` somewhere in the heap.
#[repr(transparent)]
pub struct PodPtr<T> {
    offset: Offset,
    _type: PhantomData<*const T>,
}

impl<T> PodPtr<T> {
    /// A typed view of `offset`.
    pub const fn new(offset: Offset) -> PodPtr<T> {
        PodPtr {
            offset,
            _type: PhantomData,
        }
    }

    /// The untyped offset.
    pub const fn offset(self) -> Offset {
        self.offset
    }

    /// Whether this points nowhere.
    pub const fn is_null(self) -> bool {
        self.offset.is_null()
    }
}

impl<T> Clone for PodPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for PodPtr<T> {}
impl<T> PartialEq for PodPtr<T> {
    fn eq(&self, other: &Self) -> bool {
        self.offset == other.offset
    }
}
impl<T> Eq for PodPtr<T> {}
impl<T> fmt::Debug for PodPtr<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PodPtr<{}>({})", std::any::type_name::<T>(), self.offset)
    }
}
// SAFETY: a PodPtr is an integer; dereferencing it needs a heap and `unsafe` anyway.
unsafe impl<T> Send for PodPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for PodPtr<T> {}

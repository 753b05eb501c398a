//! `role!`: a thread handle seen in one role (the owner of its slabs, their morpher, the
//! owner giving sparse slabs up, the adopter of a dead slot), a copyable wrapper that derefs to
//! the handle, so each role's methods live in its own file and read as the handle's.

/// Declares `$name`, a wrapper of `&ThreadHandle` that derefs to it, with the doc given.
macro_rules! role {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy)]
        pub(super) struct $name<'a>(pub(super) &'a $crate::thread::ThreadHandle);

        impl std::ops::Deref for $name<'_> {
            type Target = $crate::thread::ThreadHandle;

            #[inline]
            fn deref(&self) -> &$crate::thread::ThreadHandle {
                self.0
            }
        }
    };
}

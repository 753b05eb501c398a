use podkv_store::{Mode, Outcome, Store, StoreConfig};

fn main() -> Result<(), podkv_store::StoreError> {
    // Creates the heap file if it is missing; any number of processes may open it at once.
    let store = Store::open("/dev/shm/podkv-example", StoreConfig::default())?;
    let h = store.handle()?; // one per thread: it holds one thread slot of the heap
    h.set(b"greeting", b"hello", 0, 0)?; // key, value, flags, exptime (0: never)
    assert_eq!(h.get(b"greeting")?.unwrap().value(), b"hello"); // zero-copy guard
    assert_eq!(
        h.store(Mode::Add, b"greeting", b"again", 0, 0)?,
        Outcome::NotStored
    );
    h.set(b"visits", b"41", 0, 0)?;
    assert_eq!(h.incr(b"visits", 1)?, Some(42));
    Ok(())
}

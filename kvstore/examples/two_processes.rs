//! Two processes sharing one store: the parent writes, re-executes itself as the child, the
//! child reads the parent's value zero-copy through a guard and answers; the parent reads the
//! answer.
//!
//! ```text
//! cargo run -p podkv-store --example two_processes [HEAP_PATH]
//! ```

use podkv_store::{Store, StoreConfig, StoreError};

fn config() -> StoreConfig {
    let heap = podkv_alloc::Config {
        small_bytes: 1 << 30,
        large_bytes: 1 << 30,
        slots: 64,
        ..podkv_alloc::Config::default()
    };
    StoreConfig {
        heap,
        ..StoreConfig::default()
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if let Ok(path) = std::env::var("PODKV_EXAMPLE_CHILD") {
        return child(&path).map_err(Into::into);
    }
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| format!("/dev/shm/podkv-example-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let store = Store::open(&path, config())?;
    let h = store.handle()?;
    h.set(b"greeting", b"hello from the parent", 0, 0)?;
    h.set(b"visits", b"0", 0, 0)?;
    let status = std::process::Command::new(std::env::current_exe()?)
        .env("PODKV_EXAMPLE_CHILD", &path)
        .status()?;
    assert!(status.success());
    let reply = h.get(b"reply")?.expect("the child answered");
    println!("parent read: {}", String::from_utf8_lossy(reply.value()));
    drop(reply);
    println!("visits: {:?}", h.incr(b"visits", 0)?);
    drop(h);
    let report = store.check();
    println!(
        "check: {} items, valid = {}",
        report.store.items,
        report.is_valid()
    );
    std::fs::remove_file(&path)?;
    Ok(())
}

fn child(path: &str) -> Result<(), StoreError> {
    let store = Store::open(path, config())?;
    let h = store.handle()?;
    {
        let greeting = h.get(b"greeting")?.expect("the parent wrote it");
        // `greeting.value()` points into the shared heap: no copy was made.
        println!("child read:  {}", String::from_utf8_lossy(greeting.value()));
    }
    h.incr(b"visits", 1)?;
    h.set(
        b"reply",
        format!("hello from pid {}", std::process::id()).as_bytes(),
        0,
        0,
    )
}

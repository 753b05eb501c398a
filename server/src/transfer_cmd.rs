//! `podkv store dump|load PATH`: carry a store's items across a format change. The stream
//! (its format and guarantees) is `podkv_store::transfer`'s; this file opens the heap and
//! connects the stream to standard output or input.

use podkv_store::transfer;
use podkv_store::{Store, StoreConfig};
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};

/// `podkv store dump PATH > items`.
#[derive(clap::Args, Debug)]
pub struct DumpArgs {
    /// Heap file holding the store. It may be in use: the dump reads it as one more process,
    /// through the store's epoch-pinned read path, and never stops or blocks its servers.
    pub path: PathBuf,
}

/// `podkv store load PATH < items`.
#[derive(clap::Args, Debug)]
pub struct LoadArgs {
    /// Heap file to load into: an existing heap (e.g. made by `podkv heap create` with any
    /// geometry) or a new file, created with the default geometry. Keys already in the store
    /// are replaced. The whole stream is read into memory and checked before the first write.
    pub path: PathBuf,
}

/// Writes every visible item of the store at `args.path` to standard output.
pub fn dump(args: &DumpArgs) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    anyhow::ensure!(
        !stdout.is_terminal(),
        "the dump is binary: redirect it, e.g. `podkv store dump {} > items`",
        args.path.display()
    );
    let store = open_existing(&args.path)?;
    let h = store.handle()?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
    let report = transfer::dump(&h, &mut out)?;
    out.flush()?;
    // Standard output carries the stream: the summary goes to standard error.
    eprintln!(
        "{}: dumped {} items ({} bytes, format version {})",
        args.path.display(),
        report.items,
        report.bytes,
        transfer::VERSION
    );
    Ok(())
}

/// Reads a whole stream from standard input, checks it, and stores its items in the store at
/// `args.path`.
pub fn load(args: &LoadArgs) -> anyhow::Result<()> {
    let mut bytes = Vec::new();
    std::io::stdin().lock().read_to_end(&mut bytes)?;
    // Check the stream before opening (perhaps creating) the heap: a bad one changes nothing.
    transfer::stream::decode(&bytes).map_err(|e| anyhow::anyhow!("standard input: {e}"))?;
    let store = Store::open(&args.path, StoreConfig::default())?;
    let h = store.handle()?;
    let report = transfer::load(&h, &bytes)?;
    println!(
        "{}: loaded {} items ({} expired in transit, {} with a fresh CAS token)",
        args.path.display(),
        report.loaded,
        report.expired,
        report.fresh_cas
    );
    Ok(())
}

/// Opens the store in an existing heap, refusing a missing file or a heap without a store.
fn open_existing(path: &Path) -> anyhow::Result<Store> {
    podkv_store::open_existing(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

//! The clobber check (`PODKV_MODEL_CLOBBER=1`, or `=trace` for a backtrace each): a debugging
//! aid for a failure under the model that two processes sharing a line may explain. A write-back
//! reports each word of the line that another process changed in memory since this one loaded
//! it: *stale* if this process never changed it (writing the line back puts the old value
//! back), *conflicting* if both did; each report lists the words this process changed, which
//! tell whose data the line holds (a block's fill, a link, a descriptor word).
//!
//! A report is not always a bug. A word this process wrote with the very value it had loaded
//! shows as unchanged (a block rewritten with equal bytes), and so do the bytes of a process's
//! own block that it leaves unwritten (padding, a field written later). Read each report with
//! that in mind; the first [`COUNT_REPORTS`] of a process are printed.

use crate::sync::mapped::{AtomicU64, AtomicUsize, Ordering};

/// Reports a process prints at most.
const COUNT_REPORTS: usize = 50;
static REPORTS: AtomicUsize = AtomicUsize::new(0);

/// Whether write-backs report the words they clobber.
pub(super) fn on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var_os("PODKV_MODEL_CLOBBER").is_some_and(|v| v == "1" || v == "trace")
    })
}

/// Whether reports carry a backtrace (slow: a busy test may time out).
fn traces() -> bool {
    std::env::var_os("PODKV_MODEL_CLOBBER").is_some_and(|v| v == "trace")
}

/// Reports the words of the line at heap offset `line` that the write-back of `copy` clobbers:
/// changed in `mem`ory since this process's `snap`shot.
#[cold]
pub(super) fn report(line: usize, copy: &[u64], snap: &[AtomicU64], mem: &[AtomicU64]) {
    for w in 0..copy.len() {
        let (old, now) = (
            snap[w].load(Ordering::Relaxed),
            mem[w].load(Ordering::Relaxed),
        );
        if now == old || REPORTS.fetch_add(1, Ordering::Relaxed) >= COUNT_REPORTS {
            continue;
        }
        // Stale: this process never changed the word, and puts back what it loaded.
        // Conflicting: both changed it, with no write-back and reload between.
        let what = if copy[w] == old {
            "stale"
        } else {
            "conflicting"
        };
        let trace = match traces() {
            true => std::backtrace::Backtrace::force_capture().to_string(),
            false => String::new(),
        };
        let changed: Vec<String> = (0..copy.len())
            .filter(|&v| copy[v] != snap[v].load(Ordering::Relaxed))
            .map(|v| format!("{v}:{:#x}->{:#x}", snap[v].load(Ordering::Relaxed), copy[v]))
            .collect();
        eprintln!(
            "podkv coherence model: pid {} writes back a {what} word at heap offset {:#x} \
             (memory {now:#x}, loaded {old:#x}, here {:#x}; this process changed {}){trace}",
            std::process::id(),
            line + 8 * w,
            copy[w],
            changed.join(" "),
        );
    }
}

//! Which page size each map got: the machine's transparent-huge-page settings, and the bytes
//! of this process mapped with 2 MiB pages, read before and after each map's preload.

/// The kernel's THP settings and mimalloc's switch, as one line.
pub fn settings() -> String {
    let read = |name: &str| {
        std::fs::read_to_string(format!("/sys/kernel/mm/transparent_hugepage/{name}"))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into())
    };
    let mimalloc = std::env::var("MIMALLOC_ALLOW_THP").unwrap_or_else(|_| "unset (1)".into());
    format!(
        "THP enabled: {}; shmem_enabled: {}; MIMALLOC_ALLOW_THP: {mimalloc}",
        read("enabled"),
        read("shmem_enabled")
    )
}

/// Bytes of this process on 2 MiB pages: (anonymous, shared memory or file).
pub fn huge_bytes() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
    let field = |name: &str| -> u64 {
        text.lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum::<u64>()
            * 1024
    };
    (
        field("AnonHugePages:"),
        field("ShmemPmdMapped:") + field("FilePmdMapped:"),
    )
}

/// The 2 MiB-page bytes `f` added (anonymous plus shared), and what `f` returned.
pub fn huge_added_by<T>(f: impl FnOnce() -> T) -> (u64, T) {
    let (a0, s0) = huge_bytes();
    let out = f();
    let (a1, s1) = huge_bytes();
    (a1.saturating_sub(a0) + s1.saturating_sub(s0), out)
}

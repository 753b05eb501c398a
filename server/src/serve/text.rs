//! Giving back the pages of start-up code once the server serves.
//!
//! The executable's code is mapped from its file, and a page fault maps the pages around the
//! one it touched (the kernel's fault-around, 64 KiB) when they are in the page cache. Start-up
//! (parsing a command line that knows every subcommand, opening the heap and the store,
//! building the runtimes) runs code spread over the whole text of a binary that also holds the
//! benchmarks and trace tools, so a server that had only started held megabytes of text it
//! would never run again, most of its resident memory while idle. Once ready, the server pages
//! its text and read-only data out (`MADV_PAGEOUT`): the pages stay in the page cache, and the
//! serving loop faults back only the code it runs; `MADV_RANDOM` then stops each such fault
//! from mapping the 64 KiB around it (after a size-shift replay: 1.7 MiB of text resident
//! without it, 0.9 MiB with it). Pages another process also maps (several servers per host) are
//! left alone by the kernel. `PODKV_KEEP_TEXT=1` in the environment skips it (tests compare).

/// The executable's read-only mappings in this process (code, read-only data, relocated
/// data made read-only): (start, length) of each mapping of the file `/proc/self/exe` names
/// that is not writable.
fn text_mappings() -> std::io::Result<Vec<(usize, usize)>> {
    let exe = std::fs::read_link("/proc/self/exe")?;
    let exe = exe.to_string_lossy();
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    Ok(maps
        .lines()
        .filter_map(|line| {
            // `start-end perms offset dev inode path`
            let mut fields = line.split_whitespace();
            let range = fields.next()?;
            let perms = fields.next()?;
            let path = fields.nth(3)?;
            if perms.contains('w') || path != exe {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            let start = usize::from_str_radix(start, 16).ok()?;
            let end = usize::from_str_radix(end, 16).ok()?;
            Some((start, end - start))
        })
        .collect())
}

/// Pages this process's executable code out of its resident set, unless `PODKV_KEEP_TEXT`
/// is set (best effort: a kernel before 5.4 has no `MADV_PAGEOUT`, and then nothing changes).
pub fn page_out() {
    if std::env::var_os("PODKV_KEEP_TEXT").is_some() {
        return;
    }
    let mappings = match text_mappings() {
        Ok(mappings) => mappings,
        Err(e) => {
            tracing::debug!(error = %e, "text page-out: no mappings read");
            return;
        }
    };
    for (start, len) in mappings {
        // SAFETY: `MADV_PAGEOUT` only drops this process's page-table entries of a clean file
        // mapping (and may reclaim pages nobody else maps); the code stays mapped and faults
        // back in when run, so no memory the program uses changes.
        let rc = unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_PAGEOUT) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            tracing::debug!(error = %e, start, len, "text page-out refused");
        }
        // SAFETY: `MADV_RANDOM` only sets how faults on this mapping of the executable read
        // ahead and map around; no memory or mapping the program uses changes.
        let rc = unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_RANDOM) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            tracing::debug!(error = %e, start, len, "text MADV_RANDOM refused");
        }
    }
}

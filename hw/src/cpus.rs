//! Which CPUs a thread may run on: the CPUs a process may use, pinning a thread to one of
//! them, and undoing the pin a thread inherited from its spawner. A leaf fact for the runner
//! (which pins its workers) and for threads a worker starts that must not share its CPU (the
//! `nmp` processor, [`crate::mcas`]).

/// The CPUs thread `pid` may run on (0: the calling thread; a process's pid: its main
/// thread); empty if the kernel does not say.
pub fn allowed(pid: i32) -> Vec<usize> {
    // SAFETY: `cpu_set_t` is plain data; sched_getaffinity fills it or fails.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid out pointer of the size passed.
    let rc = unsafe { libc::sched_getaffinity(pid, std::mem::size_of_val(&set), &mut set) };
    if rc != 0 {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` is below CPU_SETSIZE.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect()
}

/// The CPUs this process may run on (its main thread's).
pub fn allowed_to_process() -> Vec<usize> {
    allowed(std::process::id() as i32)
}

/// Pins the calling thread to `cpu` (best effort: a refusal leaves it as it was).
pub fn pin_to(cpu: usize) {
    set_calling_thread(&[cpu]);
}

/// Lets the calling thread run on every CPU the process's main thread may run on. A thread
/// inherits its spawner's CPUs: one started by a worker pinned to one CPU would otherwise
/// share that CPU with it (the `nmp` processor, whose spinning scans and the pinned worker
/// then took turns on it, a scheduler quantum per request, while the other CPUs idled).
pub fn run_where_the_process_may() {
    let cpus = allowed_to_process();
    if !cpus.is_empty() {
        set_calling_thread(&cpus);
    }
}

/// Sets the calling thread's CPUs (best effort).
fn set_calling_thread(cpus: &[usize]) {
    // SAFETY: `cpu_set_t` is plain data.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus.iter().filter(|&&cpu| cpu < libc::CPU_SETSIZE as usize) {
        // SAFETY: `cpu` is below CPU_SETSIZE (filtered above).
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: pid 0 is the calling thread; `set` is a valid cpu set of the size passed.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_may_run_somewhere() {
        assert!(!allowed_to_process().is_empty());
        assert!(!allowed(0).is_empty());
    }

    /// A thread started by a thread pinned to one CPU, once it runs where the process may,
    /// may run on all the process's CPUs, not only on its starter's.
    #[test]
    fn a_thread_started_by_a_pinned_one_is_unpinned_by_run_where_the_process_may() {
        let process = allowed_to_process();
        let first = process[0];
        let (inherited, widened) = std::thread::spawn(move || {
            pin_to(first);
            assert_eq!(allowed(0), vec![first], "pinned");
            std::thread::spawn(|| {
                let inherited = allowed(0);
                run_where_the_process_may();
                (inherited, allowed(0))
            })
            .join()
            .unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(inherited, vec![first], "a spawned thread inherits the pin");
        assert_eq!(widened, process);
    }
}

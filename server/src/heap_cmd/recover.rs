//! `podkv heap recover`: finish and release the slots of dead owners; in a lease heap, watch
//! for a lease first, list the fenced slots, and recover a host known down (`--host-down`).

use super::open_existing;
use podkv_alloc::Heap;
use std::path::PathBuf;

pub(super) fn recover(path: &PathBuf, host_down: Option<u16>) -> anyhow::Result<()> {
    let heap = open_existing(path)?;
    if heap.geometry().liveness == podkv_alloc::Liveness::Lease {
        watch_leases(&heap, host_down);
    } else if host_down.is_some() {
        anyhow::bail!("--host-down applies to lease heaps only; this heap judges owners by pid");
    }
    let mut recovered = heap.recover_dead();
    if let Some(host) = host_down {
        recovered.extend(heap.recover_host(host));
    }
    if recovered.is_empty() {
        println!("no dead slot: nothing to recover");
    }
    for r in &recovered {
        let block = match r.in_flight {
            podkv_alloc::InFlight::None => String::new(),
            podkv_alloc::InFlight::Alloc(off) => {
                format!("; block {off} was taken for an allocation the application may not hold")
            }
            podkv_alloc::InFlight::Free(off) => format!("; the free of block {off} is complete"),
        };
        println!(
            "slot {}: finished {} in {:.1} µs ({:.1} µs of CPU time){block}; slabs given back, slot released",
            r.slot,
            r.step,
            r.took.as_secs_f64() * 1e6,
            r.took_cpu.as_secs_f64() * 1e6
        );
    }
    Ok(())
}

/// Watches every slot of a lease heap for a lease (an owner is judged lapsed only after a
/// whole lease of watching, by this process's clock), then lists the fenced slots.
fn watch_leases(heap: &Heap, host_down: Option<u16>) {
    use podkv_alloc::process::SlotLife;
    let until = std::time::Instant::now()
        + podkv_alloc::process::LEASE
        + std::time::Duration::from_millis(200);
    let mut fenced = Vec::new();
    while std::time::Instant::now() < until {
        fenced = (0..heap.geometry().slots())
            .filter_map(|i| match heap.slot_life(i) {
                SlotLife::Fenced(word) => Some((i, podkv_alloc::slot::Owner::unpack(word)?)),
                _ => None,
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    for (i, owner) in fenced {
        let next = if host_down == Some(owner.host) {
            "recovering it (--host-down)".to_owned()
        } else {
            format!(
                "kept until its owner resumes, or `podkv heap recover --host-down {}` once that host is stopped",
                owner.host
            )
        };
        println!(
            "slot {i}: fenced (host {} pid {}: silent for a lease); {next}",
            owner.host, owner.pid
        );
    }
}

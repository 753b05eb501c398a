//! `podkv pod up`: check for an existing pod, choose the network mode, create or open the
//! heap, give each member an address, then run the monitor here or in a detached process.

use super::args::{PodArgs, UpArgs};
use super::error::PodError;
use super::member::Program;
use super::monitor::{Monitor, TIMEOUT_MONITOR};
use super::net::{self, Mode};
use super::signals;
use super::state::{now_ms, HeapMode, MemberState, Phase, PodState, Proc, StateDir};
use podkv_alloc::Liveness;
use podkv_hw::mcas::McasKind;
use podkv_hw::Coherence;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn program(serve_args: &[String]) -> Result<Program, PodError> {
    Ok(Program {
        exe: std::env::current_exe().map_err(PodError::io("finding the podkv binary"))?,
        serve_args: serve_args.to_vec(),
    })
}

/// The mode `pod up` asks of a heap it creates: `--coherence` (hardware if not given) and,
/// for `mcas` only, `--mcas-impl` (flush-cas if not given).
fn asked_mode(args: &UpArgs) -> Result<(Coherence, McasKind), PodError> {
    let coherence = args.coherence.unwrap_or_default();
    match args.mcas_impl {
        Some(kind) if coherence != Coherence::Mcas => {
            Err(PodError::McasImplWithoutMcas(kind.name().into()))
        }
        kind => Ok((coherence, kind.unwrap_or(McasKind::FlushCas))),
    }
}

/// The liveness mode `pod up` asks of a heap it creates: `--liveness`, else lease where the
/// members act as separate hosts (network namespaces) and process on loopback.
fn asked_liveness(args: &UpArgs, net: Mode) -> Liveness {
    args.liveness.unwrap_or(match net {
        Mode::Netns => Liveness::Lease,
        Mode::Loopback => Liveness::Process,
    })
}

/// Refuses a mode the store does not serve, with the store's own line.
fn refuse_unserved(mode: Coherence) -> Result<(), PodError> {
    if podkv_store::SERVED_COHERENCE.contains(&mode) {
        Ok(())
    } else {
        Err(PodError::Unserved(
            podkv_store::StoreError::UnservedCoherence { mode },
        ))
    }
}

/// Refuses, before anything is made, flags that do not name a mode and a heap to create in
/// a mode the store does not serve (its members would refuse it one by one).
fn refuse_mode_early(path: &Path, args: &UpArgs) -> Result<(), PodError> {
    let (coherence, _) = asked_mode(args)?;
    if !path.exists() {
        refuse_unserved(coherence)?;
    }
    Ok(())
}

/// Opens the pod heap, creating it in the asked mode if missing; returns whether it existed
/// and its mode. Refuses an existing heap whose mode the store does not serve, or is not
/// the one `--coherence` / `--mcas-impl` name.
fn open_heap(path: &Path, args: &UpArgs, net: Mode) -> Result<(bool, HeapMode), PodError> {
    let (coherence, mcas) = asked_mode(args)?;
    let liveness = asked_liveness(args, net);
    let existed = path.exists();
    let config = podkv_alloc::Config {
        coherence,
        mcas,
        liveness,
        ..podkv_alloc::Config::default()
    };
    let heap = podkv_alloc::Heap::open(path, &config)?;
    let found_liveness = heap.geometry().liveness;
    if args.liveness.is_some_and(|asked| asked != found_liveness) {
        return Err(PodError::LivenessMismatch {
            heap: path.to_path_buf(),
            found: found_liveness.name().into(),
            asked: liveness.name().into(),
        });
    }
    let mut found = HeapMode::of(heap.geometry().coherence, heap.mcas_kind());
    found.liveness = found_liveness.name().into();
    let asked = HeapMode::of(coherence, (coherence == Coherence::Mcas).then_some(mcas));
    let differs = found.coherence != asked.coherence
        || (args.mcas_impl.is_some() && found.mcas_impl != asked.mcas_impl);
    if args.coherence.is_some() && differs {
        return Err(PodError::CoherenceMismatch {
            heap: path.to_path_buf(),
            found: found.to_string(),
            asked: asked.to_string(),
        });
    }
    refuse_unserved(heap.geometry().coherence)?;
    Ok((existed, found))
}

pub(super) fn up(args: &UpArgs) -> anyhow::Result<()> {
    let name = &args.pod.name;
    let _pod = tracing::info_span!("pod", name = %name).entered();
    let dir = args.pod.dir()?;
    dir.refuse_existing(name)?;
    let heap = args
        .heap
        .clone()
        .unwrap_or_else(|| podkv_alloc::default_path(&format!("pod-{name}")));
    refuse_mode_early(&heap, args)?;
    let (mode, why) = net::choose(args.net)?;
    tracing::info!("each member gets {why}");
    let (existed, heap_mode) = open_heap(&heap, args, mode)?;
    tracing::info!(
        "heap {} ({}, coherence {heap_mode}, liveness {})",
        heap.display(),
        if existed { "opened" } else { "created" },
        heap_mode.liveness
    );
    dir.create()?;
    let program = program(&args.serve_args)?;
    let state = plan(args, mode, heap, heap_mode)?;
    if args.detach {
        return up_detached(&dir, &args.pod, state);
    }
    signals::install();
    let mut monitor = Monitor::new(dir.clone(), state, program);
    monitor.start_all()?;
    print_up(monitor.state());
    tracing::info!(
        "monitoring; Ctrl-C or `{}` stops the pod",
        dir.down_command(name)
    );
    monitor.run()?;
    tracing::info!("down");
    Ok(())
}

/// The pod about to start: each member's address (making the namespaces in netns mode).
fn plan(
    args: &UpArgs,
    mode: Mode,
    heap: PathBuf,
    heap_mode: HeapMode,
) -> Result<PodState, PodError> {
    let name = &args.pod.name;
    let hosts = usize::from(args.hosts);
    let (bridge, addrs) = match mode {
        Mode::Loopback => (None, loopback_addrs_free(args.base_port, hosts)?),
        Mode::Netns => {
            let (bridge, addrs) = net::setup(name, hosts, args.base_port)?;
            (Some(bridge), addrs)
        }
    };
    let lease = heap_mode.liveness == Liveness::Lease.name();
    let member = |(index, addr): (usize, std::net::SocketAddr)| MemberState {
        host_id: lease.then_some(index as u16 + 1),
        index,
        addr,
        netns: (mode == Mode::Netns).then(|| net::netns_name(name, index)),
        proc: Proc::default(),
        restarts: 0,
        started_ms: 0,
        last_exit: None,
        last_recovery: None,
        recovered_ms: None,
    };
    Ok(PodState {
        name: name.clone(),
        heap,
        heap_mode,
        mode,
        bridge,
        serve_args: args.serve_args.clone(),
        monitor: Proc::of(std::process::id()),
        phase: Phase::Starting,
        up_ms: now_ms(),
        members: addrs.into_iter().enumerate().map(member).collect(),
    })
}

/// Loopback addresses, refusing any already taken (a server there would look like a member).
fn loopback_addrs_free(
    base_port: u16,
    hosts: usize,
) -> Result<Vec<std::net::SocketAddr>, PodError> {
    if usize::from(base_port) + hosts > 65536 {
        return Err(PodError::Io {
            what: format!("ports {base_port}..{}", usize::from(base_port) + hosts),
            source: std::io::Error::other("beyond 65535"),
        });
    }
    let addrs = net::loopback_addrs(base_port, hosts);
    for addr in &addrs {
        std::net::TcpListener::bind(addr)
            .map_err(PodError::io(format!("member address {addr}")))?;
    }
    Ok(addrs)
}

fn print_up(state: &PodState) {
    println!(
        "pod {}: up, {} members ({}), heap {} (coherence {}, liveness {}), monitor pid {}",
        state.name,
        state.members.len(),
        state.mode.name(),
        state.heap.display(),
        state.heap_mode,
        state.heap_mode.liveness,
        state.monitor.pid
    );
    for m in &state.members {
        let host = m
            .host_id
            .map(|id| format!(" host {id}"))
            .unwrap_or_default();
        println!("  member {} {} pid {}{host}", m.index, m.addr, m.proc.pid);
    }
}

/// Hands the pod to a monitor in its own session and waits until every member listens.
fn up_detached(dir: &StateDir, pod: &PodArgs, state: PodState) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    dir.save(&state)?;
    let log_path = dir.monitor_log();
    let log = std::fs::File::create(&log_path)?;
    let mut command = std::process::Command::new(std::env::current_exe()?);
    command
        .args(["pod", "monitor", "--name", &pod.name])
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    if let Some(root) = &pod.state_dir {
        command.arg("--state-dir").arg(root);
    }
    // SAFETY: setsid is async-signal-safe and has no memory preconditions; it runs in the
    // child between fork and exec.
    unsafe {
        command.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = command.spawn()?;
    let deadline = Instant::now() + TIMEOUT_MONITOR;
    loop {
        if let Some(status) = child.try_wait()? {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            if state.mode == Mode::Netns {
                net::teardown(&state.name, state.members.len());
            }
            dir.remove_state();
            anyhow::bail!(
                "the pod monitor exited ({status}) while starting:\n{}",
                log.trim_end()
            );
        }
        if let Some(now) = dir.load()? {
            if now.phase == Phase::Up && now.monitor.pid == child.id() {
                print_up(&now);
                return Ok(());
            }
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the pod did not come up in {} s; see {}",
            TIMEOUT_MONITOR.as_secs(),
            log_path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub(super) fn monitor_detached(dir: &StateDir) -> anyhow::Result<()> {
    let Some(state) = dir.load()? else {
        anyhow::bail!("no pod state in {}", dir.dir.display());
    };
    let _pod = tracing::info_span!("pod", name = %state.name).entered();
    signals::install();
    let mut monitor = Monitor::new(dir.clone(), state.clone(), program(&state.serve_args)?);
    monitor.start_all()?;
    tracing::info!(pid = std::process::id(), "up; monitoring");
    monitor.run()?;
    tracing::info!("down");
    Ok(())
}

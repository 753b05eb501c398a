//! The `podkv pod` subcommands: parse, act through the other modules, print.

use super::error::PodError;
use super::member::Program;
use super::monitor::Monitor;
use super::net::{self, Mode, NetChoice};
use super::signals;
use super::state::{default_root, now_ms, MemberState, Phase, PodState, Proc, StateDir};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long `pod down` waits for the monitor, and `pod up --detach` for the pod.
const TIMEOUT_MONITOR: Duration = Duration::from_secs(60);

/// The `podkv pod` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum PodCommand {
    /// Start a pod: create or open the pod heap, start N `podkv serve` members (one per
    /// emulated host) and watch them, restarting any that dies.
    ///
    /// Each member gets its own network namespace and address (10.77.K.10+i) when run as root
    /// with a working `ip netns`, else its own loopback port (--base-port + i); the mode chosen
    /// is printed. Runs in the foreground until SIGTERM/Ctrl-C, or in the background with
    /// --detach. Arguments after `--` go to every `podkv serve`.
    Up(UpArgs),
    /// Show the pod's members: pids, addresses, alive, restarts, uptime.
    Status {
        #[command(flatten)]
        pod: PodArgs,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Stop the pod: SIGTERM its members, wait, remove namespaces and state; keep the heap
    /// unless --purge. Also cleans up after a monitor that died (stale state).
    Down {
        #[command(flatten)]
        pod: PodArgs,
        /// Remove the heap file too.
        #[arg(long)]
        purge: bool,
    },
    /// Shard keys over several pods with nutcracker (twemproxy): write its configuration
    /// (one server per pod) and, with --run, run it.
    ///
    /// Example: `podkv pod shard --pods a,b --listen 127.0.0.1:22121 --run`.
    Shard(super::shard::ShardArgs),
    /// The detached monitor (started by `podkv pod up --detach`).
    #[command(hide = true)]
    Monitor {
        #[command(flatten)]
        pod: PodArgs,
    },
}

/// Which pod.
#[derive(clap::Args, Debug, Clone)]
pub struct PodArgs {
    /// The pod's name (1–8 of a-z, 0-9); names its state, heap and namespaces.
    #[arg(long, default_value = "main")]
    pub name: String,
    /// State directory root [default: $XDG_RUNTIME_DIR/podkv, else /tmp/podkv-$UID].
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
}

impl PodArgs {
    fn dir(&self) -> Result<StateDir, PodError> {
        super::state::check_name(&self.name)?;
        let root = self.state_dir.clone().unwrap_or_else(default_root);
        Ok(StateDir::new(&root, &self.name))
    }
}

/// `podkv pod up` arguments.
#[derive(clap::Args, Debug)]
pub struct UpArgs {
    #[command(flatten)]
    pub pod: PodArgs,
    /// Member servers, one per emulated host.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub hosts: u16,
    /// The pod heap [default: /dev/shm/podkv-pod-NAME]; created (mode 0600) if missing.
    #[arg(long)]
    pub heap: Option<PathBuf>,
    /// Port of member 0 (loopback: member i listens on base-port + i; netns: every member
    /// listens on this port at its own address).
    #[arg(long, default_value_t = 11211)]
    pub base_port: u16,
    /// How members get their own addresses.
    #[arg(long, value_enum, default_value_t = NetChoice::Auto)]
    pub net: NetChoice,
    /// Run the monitor in the background; return once every member listens.
    #[arg(long)]
    pub detach: bool,
    /// Extra arguments for every `podkv serve` (after `--`).
    #[arg(last = true)]
    pub serve_args: Vec<String>,
}

/// Runs a `podkv pod` subcommand.
pub fn run(command: &PodCommand) -> anyhow::Result<()> {
    match command {
        PodCommand::Up(args) => up(args),
        PodCommand::Status { pod, json } => status(&pod.dir()?, &pod.name, *json),
        PodCommand::Down { pod, purge } => down(&pod.dir()?, &pod.name, *purge),
        PodCommand::Monitor { pod } => monitor_detached(&pod.dir()?),
        PodCommand::Shard(args) => {
            let root = args.state_dir.clone().unwrap_or_else(default_root);
            super::shard::run(args, &root)
        }
    }
}

fn program(serve_args: &[String]) -> Result<Program, PodError> {
    Ok(Program {
        exe: std::env::current_exe().map_err(PodError::io("finding the podkv binary"))?,
        serve_args: serve_args.to_vec(),
    })
}

/// Refuses to start over a pod that is up, or over stale state.
fn refuse_existing(dir: &StateDir, name: &str) -> Result<(), PodError> {
    match dir.load()? {
        None => Ok(()),
        Some(s) if s.monitor.is_alive() => Err(PodError::AlreadyUp {
            name: name.into(),
            pid: s.monitor.pid,
        }),
        Some(s) => Err(PodError::Stale {
            name: name.into(),
            down: down_command(dir, name),
            dir: dir.dir.clone(),
            pid: s.monitor.pid,
        }),
    }
}

/// The `podkv pod down` that cleans up pod `name` in `dir`.
fn down_command(dir: &StateDir, name: &str) -> String {
    match dir.dir.parent() {
        Some(root) if root != default_root() => {
            format!(
                "podkv pod down --name {name} --state-dir {}",
                root.display()
            )
        }
        _ => format!("podkv pod down --name {name}"),
    }
}

fn open_heap(path: &Path) -> Result<bool, PodError> {
    let existed = path.exists();
    podkv_alloc::Heap::open(path, &podkv_alloc::Config::default())?;
    Ok(existed)
}

fn up(args: &UpArgs) -> anyhow::Result<()> {
    let name = &args.pod.name;
    let dir = args.pod.dir()?;
    refuse_existing(&dir, name)?;
    let (mode, why) = net::choose(args.net)?;
    eprintln!("pod {name}: each member gets {why}");
    let heap = args
        .heap
        .clone()
        .unwrap_or_else(|| podkv_alloc::default_path(&format!("pod-{name}")));
    let existed = open_heap(&heap)?;
    eprintln!(
        "pod {name}: heap {} ({})",
        heap.display(),
        if existed { "opened" } else { "created" }
    );
    dir.create()?;
    let hosts = usize::from(args.hosts);
    let (bridge, addrs) = match mode {
        Mode::Loopback => (None, loopback_addrs_free(args.base_port, hosts)?),
        Mode::Netns => {
            let (bridge, addrs) = net::setup(name, hosts, args.base_port)?;
            (Some(bridge), addrs)
        }
    };
    let state = PodState {
        name: name.clone(),
        heap,
        mode,
        bridge,
        serve_args: args.serve_args.clone(),
        monitor: Proc::of(std::process::id()),
        phase: Phase::Starting,
        up_ms: now_ms(),
        members: addrs
            .into_iter()
            .enumerate()
            .map(|(index, addr)| MemberState {
                index,
                addr,
                netns: (mode == Mode::Netns).then(|| net::netns_name(name, index)),
                proc: Proc::default(),
                restarts: 0,
                started_ms: 0,
                last_exit: None,
                last_recovery: None,
            })
            .collect(),
    };
    if args.detach {
        return up_detached(&dir, &args.pod, state);
    }
    signals::install();
    let mut monitor = Monitor::new(dir.clone(), state, program(&args.serve_args)?);
    if let Err(e) = monitor.start_all() {
        return Err(e.into());
    }
    print_up(monitor.state());
    eprintln!("pod {name}: monitoring; Ctrl-C or `podkv pod down --name {name}` stops the pod");
    monitor.run()?;
    eprintln!("pod {name}: down");
    Ok(())
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
        "pod {}: up, {} members ({}), heap {}, monitor pid {}",
        state.name,
        state.members.len(),
        mode_name(state.mode),
        state.heap.display(),
        state.monitor.pid
    );
    for m in &state.members {
        println!("  member {} {} pid {}", m.index, m.addr, m.proc.pid);
    }
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Loopback => "loopback",
        Mode::Netns => "netns",
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

fn monitor_detached(dir: &StateDir) -> anyhow::Result<()> {
    let Some(state) = dir.load()? else {
        anyhow::bail!("no pod state in {}", dir.dir.display());
    };
    signals::install();
    let mut monitor = Monitor::new(dir.clone(), state.clone(), program(&state.serve_args)?);
    monitor.start_all()?;
    eprintln!("pod {}: up; monitor pid {}", state.name, std::process::id());
    monitor.run()?;
    eprintln!("pod {}: down", state.name);
    Ok(())
}

/// One member as `pod status` shows it.
#[derive(Serialize)]
struct MemberView<'a> {
    index: usize,
    addr: std::net::SocketAddr,
    netns: Option<&'a str>,
    pid: u32,
    alive: bool,
    restarts: u32,
    uptime_s: Option<u64>,
    last_exit: Option<&'a str>,
    last_recovery: Option<&'a str>,
}

/// The pod as `pod status --json` shows it.
#[derive(Serialize)]
struct StatusView<'a> {
    name: &'a str,
    mode: Mode,
    phase: Phase,
    heap: &'a Path,
    monitor_pid: u32,
    stale: bool,
    uptime_s: u64,
    members: Vec<MemberView<'a>>,
}

impl<'a> StatusView<'a> {
    fn of(pod: &'a PodState, now: u64) -> StatusView<'a> {
        StatusView {
            name: &pod.name,
            mode: pod.mode,
            phase: pod.phase,
            heap: &pod.heap,
            monitor_pid: pod.monitor.pid,
            stale: !pod.monitor.is_alive(),
            uptime_s: now.saturating_sub(pod.up_ms) / 1000,
            members: pod.members.iter().map(|m| MemberView::of(m, now)).collect(),
        }
    }
}

impl<'a> MemberView<'a> {
    fn of(m: &'a MemberState, now: u64) -> MemberView<'a> {
        let alive = m.proc.is_alive();
        MemberView {
            index: m.index,
            addr: m.addr,
            netns: m.netns.as_deref(),
            pid: m.proc.pid,
            alive,
            restarts: m.restarts,
            uptime_s: alive.then(|| now.saturating_sub(m.started_ms) / 1000),
            last_exit: m.last_exit.as_deref(),
            last_recovery: m.last_recovery.as_deref(),
        }
    }
}

fn status(dir: &StateDir, name: &str, json: bool) -> anyhow::Result<()> {
    let Some(state) = dir.load()? else {
        return Err(PodError::NotUp {
            name: name.into(),
            dir: dir.dir.clone(),
        }
        .into());
    };
    let view = StatusView::of(&state, now_ms());
    if json {
        println!("{}", serde_json::to_string_pretty(&view)?);
    } else {
        print_status(&view);
    }
    if view.stale {
        return Err(PodError::Stale {
            name: name.into(),
            down: down_command(dir, name),
            dir: dir.dir.clone(),
            pid: state.monitor.pid,
        }
        .into());
    }
    Ok(())
}

fn print_status(view: &StatusView<'_>) {
    println!(
        "pod {}: {} ({}), monitor pid {}{}, up {}, heap {}",
        view.name,
        if view.stale {
            "STALE"
        } else {
            phase_name(view.phase)
        },
        mode_name(view.mode),
        view.monitor_pid,
        if view.stale { " (gone)" } else { "" },
        duration(view.uptime_s),
        view.heap.display()
    );
    println!(
        "{:<7} {:<8} {:<22} {:<6} {:<9} uptime",
        "member", "pid", "address", "alive", "restarts"
    );
    for m in &view.members {
        println!(
            "{:<7} {:<8} {:<22} {:<6} {:<9} {}",
            m.index,
            m.pid,
            m.addr,
            if m.alive { "yes" } else { "NO" },
            m.restarts,
            m.uptime_s.map_or("-".into(), duration)
        );
    }
}

fn phase_name(phase: Phase) -> &'static str {
    match phase {
        Phase::Starting => "starting",
        Phase::Up => "up",
        Phase::Stopping => "stopping",
    }
}

/// `3h02m`, `4m05s`, `7s`.
fn duration(s: u64) -> String {
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s / 60 % 60),
    }
}

fn down(dir: &StateDir, name: &str, purge: bool) -> anyhow::Result<()> {
    let Some(state) = dir.load()? else {
        return Err(PodError::NotUp {
            name: name.into(),
            dir: dir.dir.clone(),
        }
        .into());
    };
    if state.monitor.is_alive() {
        signals::send(state.monitor.pid, libc::SIGTERM);
        let deadline = Instant::now() + TIMEOUT_MONITOR;
        while state.monitor.is_alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        anyhow::ensure!(
            !state.monitor.is_alive(),
            "the monitor (pid {}) did not stop in {} s",
            state.monitor.pid,
            TIMEOUT_MONITOR.as_secs()
        );
    } else {
        eprintln!(
            "pod {name}: monitor pid {} is gone (stale state); stopping members directly",
            state.monitor.pid
        );
    }
    if dir.load()?.is_some() {
        clean_stale(dir, &state);
    }
    if purge {
        std::fs::remove_file(&state.heap)
            .or_else(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Ok(()),
                _ => Err(e),
            })
            .map_err(PodError::io(format!("removing {}", state.heap.display())))?;
    }
    println!(
        "pod {name}: down; heap {} {}",
        state.heap.display(),
        if purge { "removed" } else { "kept" }
    );
    Ok(())
}

/// What a monitor that died left behind: members, namespaces, state.
fn clean_stale(dir: &StateDir, state: &PodState) {
    let alive: Vec<&MemberState> = state.members.iter().filter(|m| m.proc.is_alive()).collect();
    for m in &alive {
        signals::send(m.proc.pid, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive.iter().any(|m| m.proc.is_alive()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for m in alive.iter().filter(|m| m.proc.is_alive()) {
        eprintln!(
            "pod {}: member pid {} ignored SIGTERM; killing it",
            state.name, m.proc.pid
        );
        signals::send(m.proc.pid, libc::SIGKILL);
    }
    if state.mode == Mode::Netns {
        for left in net::teardown(&state.name, state.members.len()) {
            eprintln!("pod {}: {left}", state.name);
        }
    }
    dir.remove_state();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_at_a_glance() {
        assert_eq!(duration(7), "7s");
        assert_eq!(duration(245), "4m05s");
        assert_eq!(duration(3 * 3600 + 120), "3h02m");
    }

    #[test]
    fn names_that_cannot_name_interfaces_are_refused() {
        for bad in ["", "Main", "a-b", "toolongname"] {
            let args = PodArgs {
                name: bad.into(),
                state_dir: None,
            };
            assert!(args.dir().is_err(), "{bad}");
        }
    }
}

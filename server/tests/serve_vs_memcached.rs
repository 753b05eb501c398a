//! Seeded random command sequences sent to the real memcached (`-t 2`, started here on a free
//! port) and to `podkv serve` (one process, then two processes on one heap with requests
//! alternating between them); every reply must be identical.
//!
//! CAS values differ between servers, so replies are compared after renaming each CAS value
//! to the order in which that server first showed it: two replies match when the same
//! replies share a CAS. A `cas`/`C` argument names a CAS by that order, and each server gets
//! its own value for it.
//!
//! The generator covers the text commands and the meta commands with their flags, recache
//! tokens (`R N`, `W Z`), stale items (`md I`, `ms I`, `X`) and touches included; it leaves out
//! what `podkv::serve::backend` lists as different: access times (`l h`), `E`, which
//! memcached 1.6.18 refuses, an over-long opaque on a command that changes something, and a
//! vivify (`N`) whose TTL is negative. It also sends every `M` mode and every flag letter of
//! `mg ms md ma` in valid and invalid spellings, bare and with valid, invalid, wrapping and
//! overflowing numbers, every numeric argument of the text commands likewise, `noreply` and
//! command names misspelt (`spelling`); and it approaches each size limit from both sides
//! (`boundary`): keys of 249, 250 and 251 bytes on every command, base64 keys around it,
//! opaques of 31 to 33 bytes, meta commands of 18 to 21 tokens, `get` lines past 2048 bytes
//! and past 24 keys, values and appended values under and over the item size limit. Fixed meta
//! sequences are compared too. Set `PODKV_VS_STEPS` for longer runs; `PODKV_SOAK=1` plays
//! more seeds, each twenty times longer.

mod conv;
mod edges;

use conv::{heap_dir, Client, Server};
use edges::{boundary, spelling};
use std::collections::HashMap;
use std::net::SocketAddr;

/// Steps per seed by default.
const COUNT_STEPS: usize = 600;
/// Steps per seed with `PODKV_SOAK=1`.
const COUNT_STEPS_SOAK: usize = 20 * COUNT_STEPS;
const SEEDS: [u64; 3] = [1, 0xC0FFEE, 0x5EED_2026];
/// Seeds played with `PODKV_SOAK=1`, besides [`SEEDS`].
const SEEDS_SOAK: [u64; 5] = [2, 3, 0xBAD_5EED, 0xD1FF, 0x1_8000_0000];

/// xorshift64*: enough randomness for command generation, identical on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// A CAS argument: by the order a server first showed it, or a value no server hands out.
#[derive(Clone, Copy)]
enum CasArg {
    Seen(usize),
    Bogus,
}

/// One generated request: `before`, then the CAS value (per server) if any, then `after`.
struct Step {
    before: Vec<u8>,
    cas: Option<CasArg>,
    after: Vec<u8>,
}

impl Step {
    fn text(line: String) -> Step {
        Step {
            before: line.into_bytes(),
            cas: None,
            after: Vec::new(),
        }
    }
}

const KEYS: &[&str] = &["a", "b", "c", "num", "n2", "long_key_with_some_length", "z"];

fn value(rng: &mut Rng) -> Vec<u8> {
    if rng.chance(35) {
        return rng.below(1_000_000).to_string().into_bytes();
    }
    let alphabet = b"abcxyz0123456789 \r\n\x00\xff";
    let len = rng.below(40) as usize;
    let mut v: Vec<u8> = (0..len).map(|_| *rng.pick(alphabet)).collect();
    // memcached's `incr` on a value of only white space reads past the item's end (strtoull
    // skips the `\r\n` after the data too), so its answer is undefined: never make one.
    if !v.is_empty() && v.iter().all(|b| b" \r\n".contains(b)) {
        v.insert(0, b'x');
    }
    v
}

fn exptime(rng: &mut Rng) -> &'static str {
    const EXPTIMES: [&str; 5] = ["0", "0", "0", "1000", "-1"];
    EXPTIMES[rng.below(EXPTIMES.len() as u64) as usize]
}

fn noreply(rng: &mut Rng) -> &'static str {
    if rng.chance(10) {
        " noreply"
    } else {
        ""
    }
}

fn cas_arg(rng: &mut Rng, seen: usize) -> CasArg {
    if seen == 0 || rng.chance(15) {
        CasArg::Bogus
    } else {
        // Mostly recent ones, which are likelier to still be current.
        let back = (rng.below(4) as usize).min(seen - 1);
        CasArg::Seen(seen - 1 - back)
    }
}

/// What the generator remembers between steps.
struct Gen {
    /// Keys whose item may carry meta state (token sent, stale). memcached keeps that state
    /// through an `incr`/`decr`/`ma` only when it updates in place, which depends on whether
    /// its background threads hold a reference at that moment (see `unpadded`): counters on
    /// these keys are left out. So are counters on keys a counter may have taken to 2^63 or
    /// more ([`big_number`]). A `set`, `delete` or `flush_all` clears the mark.
    marked: std::collections::HashSet<String>,
    /// Whether `ms I` may be sent. "A CAS older than the item's" compares tokens; two podkv
    /// processes hand out tokens from their own blocks, so tokens of *different* keys are not
    /// in write order (each key's are), while the generator's CAS arguments come from any key.
    stale_stores: bool,
}

/// Whether a counter step may leave a value of 2^63 or more: memcached 1.6.18 then reads the
/// next `incr` of it past the item's end (its `safe_strtoull` looks for a `-` up to a NUL
/// byte), so the answer is undefined.
fn big_number(line: &str) -> bool {
    line.split([' ', '\r'])
        .map(|word| word.trim_start_matches(|c: char| c.is_ascii_alphabetic()))
        .any(|number| number.parse::<u128>().is_ok_and(|n| n >= 1 << 63))
}

impl Gen {
    fn new(stale_stores: bool) -> Gen {
        Gen {
            marked: Default::default(),
            stale_stores,
        }
    }

    /// Generates one step; `seen` is how many distinct CAS values have been shown so far.
    fn step(&mut self, rng: &mut Rng, seen: usize) -> Step {
        let step = step(rng, seen, self.stale_stores);
        let line = String::from_utf8_lossy(&step.before).into_owned();
        let mut words = line.split([' ', '\r']);
        let (cmd, key) = (
            words.next().unwrap_or(""),
            words.next().unwrap_or("").to_owned(),
        );
        let has = |flag: &str| line.contains(flag);
        match cmd {
            "incr" | "decr" | "ma" if self.marked.contains(&key) => {
                return Step::text(format!("get {key}\r\n"));
            }
            "incr" | "decr" | "ma" if big_number(&line) => drop(self.marked.insert(key)),
            "md" | "ms" if has(" I") => drop(self.marked.insert(key)),
            "mg" if has(" R") || has(" N") => drop(self.marked.insert(key)),
            "set" | "delete" => drop(self.marked.remove(&key)),
            "flush_all\r\n" => self.marked.clear(),
            _ => {}
        }
        step
    }
}

/// Generates one step; `seen` is how many distinct CAS values have been shown so far.
fn step(rng: &mut Rng, seen: usize, stale_stores: bool) -> Step {
    let key = *rng.pick(KEYS);
    let text = Step::text;
    match rng.below(28) {
        22..=24 => spelling(rng, key),
        25..=27 => boundary(rng),
        0..=3 => {
            let v = value(rng);
            let cmd = *rng.pick(&["set", "add", "replace", "append", "prepend"]);
            let head = format!(
                "{cmd} {key} {} {} {}{}\r\n",
                rng.below(1 << 20),
                exptime(rng),
                v.len(),
                noreply(rng)
            );
            Step {
                before: [head.into_bytes(), v, b"\r\n".to_vec()].concat(),
                cas: None,
                after: Vec::new(),
            }
        }
        4 => {
            let v = value(rng);
            let flags = rng.below(100);
            let exp = exptime(rng);
            let nr = noreply(rng);
            Step {
                before: format!("cas {key} {flags} {exp} {} ", v.len()).into_bytes(),
                cas: Some(cas_arg(rng, seen)),
                after: [format!("{nr}\r\n").into_bytes(), v, b"\r\n".to_vec()].concat(),
            }
        }
        5..=7 => {
            let cmd = *rng.pick(&["get", "gets"]);
            let n = 1 + rng.below(3);
            let keys: Vec<&str> = (0..n).map(|_| *rng.pick(KEYS)).collect();
            text(format!("{cmd} {}\r\n", keys.join(" ")))
        }
        8 => text(format!("delete {key}{}\r\n", noreply(rng))),
        9 => {
            let cmd = *rng.pick(&["incr", "decr"]);
            let delta = *rng.pick(&[0u64, 1, 7, 1000, u64::MAX]);
            text(format!("{cmd} {key} {delta}{}\r\n", noreply(rng)))
        }
        10 => text(format!("touch {key} {}{}\r\n", exptime(rng), noreply(rng))),
        11 => {
            let cmd = *rng.pick(&["gat", "gats"]);
            text(format!("{cmd} {} {key}\r\n", exptime(rng)))
        }
        12..=14 => {
            let mut flags = Vec::new();
            for f in ["v", "f", "k", "c", "q", "O77"] {
                if rng.chance(45) {
                    flags.push(f);
                }
            }
            // Recache tokens, vivify and touch, in either order (memcached applies them in
            // flag order); thresholds far from the TTLs used, so no second boundary matters.
            for f in ["R2000", "R10", "N1000", "T1000", "T-1"] {
                if rng.chance(12) {
                    flags.push(f);
                }
            }
            if flags.len() > 1 && rng.chance(50) {
                flags.reverse();
            }
            text(format!("mg {key} {}\r\n", flags.join(" ")))
        }
        15..=16 => {
            let v = value(rng);
            let mode = *rng.pick(&["", " MS", " ME", " MR", " MA", " MP"]);
            let mut flags = format!("{mode} F{} T{}", rng.below(1000), exptime(rng));
            for f in [" c", " k", " q", " O5"] {
                if rng.chance(30) {
                    flags.push_str(f);
                }
            }
            let with_cas = rng.chance(25);
            if with_cas && rng.chance(40) && stale_stores {
                flags.push_str(" I");
            }
            let c = if with_cas { " C" } else { "" };
            Step {
                before: format!("ms {key} {}{flags}{c}", v.len()).into_bytes(),
                cas: with_cas.then(|| cas_arg(rng, seen)),
                after: [b"\r\n".to_vec(), v, b"\r\n".to_vec()].concat(),
            }
        }
        17 => {
            let with_cas = rng.chance(30);
            let q = if rng.chance(30) { " q" } else { "" };
            let c = if with_cas { " C" } else { "" };
            let i = *rng.pick(&["", "", " I", " I T1000", " I T-1"]);
            Step {
                before: format!("md {key}{q}{i} k{c}").into_bytes(),
                cas: with_cas.then(|| cas_arg(rng, seen)),
                after: b"\r\n".to_vec(),
            }
        }
        18..=19 => {
            let mut flags = String::new();
            for f in [" v", " N0", " J42", " D3", " MD", " q", " c", " k"] {
                if rng.chance(35) {
                    flags.push_str(f);
                }
            }
            text(format!("ma {key}{flags}\r\n"))
        }
        // (`mn` needs no step of its own: every step ends with one, see `Client::call`.)
        20 => text(format!("gets {key} {key}\r\n")),
        _ => {
            if rng.chance(10) {
                text("flush_all\r\n".into())
            } else {
                text(format!("get {key}\r\n"))
            }
        }
    }
}

/// One server's side of a run: its connections and the CAS values it has shown.
struct Side {
    clients: Vec<Client>,
    cas_order: HashMap<u64, usize>,
    cas_values: Vec<u64>,
}

impl Side {
    fn new(addrs: &[SocketAddr]) -> Side {
        Side {
            clients: addrs.iter().map(|a| Client::connect(*a)).collect(),
            cas_order: HashMap::new(),
            cas_values: Vec::new(),
        }
    }

    /// Renders `step` with this server's CAS values, sends it, canonicalises the reply.
    fn run(&mut self, step: &Step, turn: usize) -> String {
        let cas = match step.cas {
            None => None,
            Some(CasArg::Bogus) => Some(999_999_999_999u64),
            Some(CasArg::Seen(i)) => Some(self.cas_values[i]),
        };
        let mut request = step.before.clone();
        if let Some(cas) = cas {
            request.extend_from_slice(cas.to_string().as_bytes());
        }
        request.extend_from_slice(&step.after);
        let n = self.clients.len();
        let reply = self.clients[turn % n].call(&request);
        self.canonical(&reply)
    }

    fn name(&mut self, cas: u64) -> String {
        let next = self.cas_values.len();
        let order = *self.cas_order.entry(cas).or_insert(next);
        if order == next {
            self.cas_values.push(cas);
        }
        format!("<cas#{order}>")
    }

    /// The reply with each CAS value replaced by its order, and counters unpadded (see
    /// [`unpadded`]); data blocks are otherwise copied as is.
    fn canonical(&mut self, reply: &[u8]) -> String {
        let mut out = String::new();
        let mut rest = reply;
        while !rest.is_empty() {
            let end = rest
                .windows(2)
                .position(|w| w == b"\r\n")
                .map_or(rest.len(), |p| p + 2);
            let line = String::from_utf8_lossy(&rest[..end]).into_owned();
            rest = &rest[end..];
            let mut words: Vec<String> = line.trim_end().split(' ').map(str::to_owned).collect();
            let size_at = match words[0].as_str() {
                "VALUE" => Some(3),
                "VA" => Some(1),
                _ => None,
            };
            let is_meta = matches!(words[0].as_str(), "VA" | "HD" | "EN" | "NF" | "NS" | "EX");
            for i in 1..words.len() {
                if words[0] == "VALUE" && i == 4 {
                    words[i] = self.name(words[i].parse().unwrap());
                } else if is_meta
                    && words[i].starts_with('c')
                    && words[i][1..].parse::<u64>().is_ok()
                {
                    words[i] = format!("c{}", self.name(words[i][1..].parse().unwrap()));
                }
            }
            let data = size_at.and_then(|i| words.get(i)?.parse::<usize>().ok());
            let block = data.map(|n| {
                let take = (n + 2).min(rest.len());
                let block = unpadded(&rest[..take]);
                rest = &rest[take..];
                block
            });
            if let (Some(i), Some(block)) = (size_at, &block) {
                words[i] = (block.len() - 2).to_string();
            }
            out.push_str(&words.join(" "));
            out.push('\n');
            if let Some(block) = block {
                out.push_str(&format!("{:?}\n", String::from_utf8_lossy(&block)));
            }
        }
        out
    }
}

/// A data block without the spaces that follow a digit. memcached pads a shorter
/// `incr`/`decr` result with spaces in place only when no other thread holds the item (its
/// LRU maintainer and crawler take references in the background), else it writes the bare
/// number; podkv always pads. Later appends and prepends keep whichever it was, so the
/// padding can end up anywhere in a value. The same normalisation applies to both servers.
fn unpadded(block: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(block.len());
    for &b in block {
        let after_digit = out
            .iter()
            .rev()
            .find(|&&c| c != b' ')
            .is_some_and(u8::is_ascii_digit);
        if b == b' ' && after_digit && out.last().is_some_and(|&c| c == b' ' || c.is_ascii_digit())
        {
            continue;
        }
        out.push(b);
    }
    out
}

/// Plays every seed against memcached and podkv (`podkv` gives the podkv addresses, one per
/// connection in turn).
fn compare(memcached: SocketAddr, podkv: &[SocketAddr]) {
    let soak = std::env::var_os("PODKV_SOAK").is_some();
    let steps = std::env::var("PODKV_VS_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if soak { COUNT_STEPS_SOAK } else { COUNT_STEPS });
    let soak_seeds = if soak { &SEEDS_SOAK[..] } else { &[] };
    for &seed in SEEDS.iter().chain(soak_seeds) {
        let mut rng = Rng(seed);
        let mut gen = Gen::new(podkv.len() == 1);
        let mut reference = Side::new(&vec![memcached; podkv.len()]);
        let mut ours = Side::new(podkv);
        for side in [&mut reference, &mut ours] {
            assert_eq!(side.clients[0].call(b"flush_all\r\n"), b"OK\r\n");
        }
        let mut log = Vec::new();
        for turn in 0..steps {
            let step = gen.step(
                &mut rng,
                reference.cas_values.len().min(ours.cas_values.len()),
            );
            let expected = reference.run(&step, turn);
            let got = ours.run(&step, turn);
            let request: Vec<u8> = [&step.before[..], b"<cas>", &step.after[..]].concat();
            log.push(format!("{:?}", String::from_utf8_lossy(&request)));
            if got != expected {
                let key = String::from_utf8_lossy(&step.before)
                    .split(' ')
                    .nth(1)
                    .unwrap_or("")
                    .trim_end()
                    .to_owned();
                let history: Vec<&String> = log
                    .iter()
                    .filter(|l| {
                        l.contains(&format!(" {key} ")) || l.contains(&format!(" {key}\\r"))
                    })
                    .collect();
                let now = |side: &mut Side| {
                    let reply = side.clients[0].call(format!("get {key}\r\n").as_bytes());
                    String::from_utf8_lossy(&reply).into_owned()
                };
                let step_text = format!(
                    "{} (cas arg: {:?}; podkv cas values {:?}; memcached's {:?})",
                    log.last().unwrap(),
                    step.cas.map(|c| match c {
                        CasArg::Seen(i) => i as i64,
                        CasArg::Bogus => -1,
                    }),
                    &ours.cas_values[ours.cas_values.len().saturating_sub(5)..],
                    &reference.cas_values[reference.cas_values.len().saturating_sub(5)..],
                );
                let (ours_now, reference_now) = (now(&mut ours), now(&mut reference));
                panic!(
                    "seed {seed:#x}, step {turn}: {step_text}\npodkv:     {got:?}\n\
                     memcached: {expected:?}\n{key:?} now: podkv {ours_now:?}, memcached \
                     {reference_now:?}\nsteps on {key:?}: {history:#?}"
                );
            }
        }
    }
}

#[test]
fn random_sequences_match_memcached_one_process() {
    let Some(memcached) = conv::memcached(&[]) else {
        return;
    };
    let dir = heap_dir();
    let server = Server::start(&dir.path().join("heap"), &["--threads", "2"]);
    compare(memcached.addr, &[server.addr]);
}

#[test]
fn random_sequences_match_memcached_two_processes() {
    let Some(memcached) = conv::memcached(&[]) else {
        return;
    };
    let dir = heap_dir();
    let heap = dir.path().join("heap");
    let a = Server::start(&heap, &["--threads", "1"]);
    let b = Server::start(&heap, &["--threads", "1"]);
    compare(memcached.addr, &[a.addr, b.addr]);
}

//! What a workload runs against: one [`Target`] per process, one [`Session`] per worker
//! thread, one [`Session::execute`] per memcached-style command.
//!
//! Every target speaks the replay op model of `podkv-traces` ([`Command`]: get, gets, set,
//! add, replace, cas, append, prepend, delete, incr, decr); YCSB operations map onto it
//! (see [`crate::runner::source`]). The worker loop is generic over the target, so the
//! timed loop has no dynamic dispatch.
//!
//! | `--target` | what | processes |
//! | --- | --- | --- |
//! | `null` | does nothing: measures the runner itself | any |
//! | `dashmap` | `podkv_store::DashBaseline` through `KvMap` ([`kv`]) | 1 |
//! | `mimalloc` | the podkv index in process-local mimalloc memory ([`store`]) | 1 |
//! | `embedded` | the podkv store in a pod heap file ([`store`]) | any |
//! | `boost` | the podkv index in a boost.interprocess segment ([`boost`]; feature `baselines` with boost's headers) | any |
//! | `memcached://H:P[,H:P…][?timeout_ms=MS]` | memcached text protocol over TCP, keys spread by hash; with a timeout, failures are counted per server instead of ending the run | any |
//!
//! `--ab-heap` and `--ab-target` pair the embedded store with a second target ([`paired`]):
//! every command runs on both, the window's side timed.

pub mod boost;
pub mod kv;
pub mod null;
pub mod paired;
pub mod store;

use podkv_traces::Command;
use std::path::PathBuf;

/// Reads every byte of the value a get found, as the client that asked for it would: YCSB's
/// read returns the record's fields, and a server sends them. Without it, a target that keeps
/// its values apart from its keys (dashmap's boxed values) answers a get without touching the
/// value's memory at all, while one that keeps them together (the store's items) pays for the
/// line its key shares with the value: two lookups, not two gets, would be compared.
#[inline]
pub(crate) fn read_value(value: &[u8]) {
    std::hint::black_box(value.iter().fold(0u8, |sum, &b| sum ^ b));
}

/// What a command found: a hit (found / stored / deleted) or a miss (absent / not stored).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The key was there (reads, delete, incr/decr) or the store happened.
    Hit,
    /// The key was absent, or the conditional store did not happen.
    Miss,
}

impl Outcome {
    /// `Hit` if `b`.
    pub fn from_bool(b: bool) -> Self {
        if b {
            Outcome::Hit
        } else {
            Outcome::Miss
        }
    }
}

/// What one server of a server target (a tolerant memcached target counts them) saw: requests sent to it, and how many
/// failed (timed out, connection lost or refused, error reply, or sent while it was down).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ServerTally {
    /// `HOST:PORT`.
    pub server: String,
    /// Requests for keys it holds.
    pub requests: u64,
    /// Of those, the failed.
    pub errors: u64,
}

/// One worker thread's connection to a target.
pub trait Session {
    /// Runs one command. `value` is the bytes a storage command writes (ignored otherwise).
    /// A `cas` uses the token of this session's last `gets` of the key (or misses).
    fn execute(&mut self, command: Command, key: &[u8], value: &[u8]) -> anyhow::Result<Outcome>;

    /// Finishes what earlier work left to background work, before the timed phase starts
    /// (the run's first worker calls it, once every worker is done with the untimed load, if
    /// any): a YCSB load and run are two invocations in YCSB itself, and a store's maintenance
    /// runs between them; a `--phase run` on a heap loaded earlier gets the same.
    fn settle(&mut self) -> anyhow::Result<()> {
        Ok(())
    }

    /// A paired target's session (`--ab-heap`, `--ab-target`, [`paired`]) sends the commands
    /// that follow to its target `store` alone (0: the run's, 1: the other), or to both with
    /// `None`, and returns true. Any other session has one target, ignores the call and
    /// returns false.
    #[inline(always)]
    fn direct(&mut self, _store: Option<usize>) -> bool {
        false
    }
}

/// A store that workers open sessions on.
pub trait Target: Sync {
    /// A worker thread's session.
    type Session<'t>: Session
    where
        Self: 't;

    /// Opens the session of worker `worker` (global index).
    fn session(&self, worker: usize) -> anyhow::Result<Self::Session<'_>>;

    /// Bytes of hardware-coherent metadata, for targets with a pod heap.
    fn hwcc_bytes(&self) -> Option<u64> {
        None
    }

    /// mCAS requests this process sent to the target's heap so far, for targets with a pod
    /// heap (zero but in an `mcas` heap); `None` for others.
    fn mcas_ops(&self) -> Option<u64> {
        None
    }

    /// Requests and failures per server, for targets that count them (a memcached target
    /// with a timeout).
    fn server_tallies(&self) -> Vec<ServerTally> {
        Vec::new()
    }

    /// What a server target answers to `version` (`1.6.21`, `1.6.0-podkv-0.1.0`), so a
    /// record says which server it measured.
    fn server_version(&self) -> Option<String> {
        None
    }
}

/// A parsed `--target`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum TargetSpec {
    /// No store at all.
    Null,
    /// A process-local `DashMap`.
    Dashmap,
    /// The podkv index in process-local mimalloc memory.
    Mimalloc,
    /// The podkv store in a pod heap file.
    Embedded {
        /// The heap file.
        heap: PathBuf,
    },
    /// The podkv index in a boost.interprocess `managed_shared_memory` segment.
    Boost {
        /// The segment's name (under /dev/shm), made up per run and removed after it.
        segment: String,
        /// The segment's size, from the job ([`boost::segment_bytes`]).
        bytes: u64,
    },
    /// memcached servers.
    Memcached {
        /// `HOST:PORT` of each server.
        servers: Vec<String>,
        /// `?timeout_ms=`: a request unanswered this long fails, counted against its server,
        /// and the run goes on (none: the first failure ends the run).
        #[serde(default)]
        timeout_ms: Option<u64>,
    },
}

impl TargetSpec {
    /// Parses `--target`; `heap` is `--heap` (embedded only).
    pub fn parse(text: &str, heap: Option<PathBuf>) -> anyhow::Result<Self> {
        Ok(match text {
            "null" => TargetSpec::Null,
            "dashmap" => TargetSpec::Dashmap,
            "mimalloc" => TargetSpec::Mimalloc,
            "embedded" => TargetSpec::Embedded {
                heap: heap.unwrap_or_else(fresh_heap_path),
            },
            "boost" => TargetSpec::Boost {
                segment: boost::fresh_segment_name(),
                bytes: 0,
            },
            _ => match text.strip_prefix("memcached://") {
                Some(rest) => {
                    let bad = || {
                        anyhow::anyhow!(
                            "bad target {text:?}: expected memcached://HOST:PORT[,HOST:PORT...][?timeout_ms=MS]"
                        )
                    };
                    let (list, query) = rest.split_once('?').unwrap_or((rest, ""));
                    let servers: Vec<String> = list.split(',').map(str::to_owned).collect();
                    anyhow::ensure!(
                        servers.iter().all(|s| s.rsplit_once(':').is_some_and(|(h, p)| {
                            !h.is_empty() && p.parse::<u16>().is_ok()
                        })),
                        bad()
                    );
                    let timeout_ms = match query {
                        "" => None,
                        q => Some(
                            q.strip_prefix("timeout_ms=")
                                .and_then(|ms| ms.parse::<u64>().ok())
                                .filter(|&ms| ms > 0)
                                .ok_or_else(bad)?,
                        ),
                    };
                    TargetSpec::Memcached {
                        servers,
                        timeout_ms,
                    }
                }
                None => anyhow::bail!(
                    "unknown target {text:?}: expected embedded, mimalloc, boost, dashmap, null or memcached://HOST:PORT[,...]"
                ),
            },
        })
    }

    /// The name written in results (`memcached://…` as given).
    pub fn name(&self) -> String {
        match self {
            TargetSpec::Null => "null".into(),
            TargetSpec::Dashmap => "dashmap".into(),
            TargetSpec::Mimalloc => "mimalloc".into(),
            TargetSpec::Embedded { .. } => "embedded".into(),
            TargetSpec::Boost { .. } => "boost".into(),
            TargetSpec::Memcached {
                servers,
                timeout_ms,
            } => {
                let query = timeout_ms.map_or(String::new(), |ms| format!("?timeout_ms={ms}"));
                format!("memcached://{}{query}", servers.join(","))
            }
        }
    }

    /// Whether several processes can share this target (process-local memory cannot).
    pub fn spans_processes(&self) -> bool {
        !matches!(self, TargetSpec::Dashmap | TargetSpec::Mimalloc)
    }
}

/// A fresh heap file name under `/dev/shm`.
fn fresh_heap_path() -> PathBuf {
    PathBuf::from(format!("/dev/shm/podkv-store-{}", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse() {
        assert_eq!(TargetSpec::parse("null", None).unwrap(), TargetSpec::Null);
        assert_eq!(
            TargetSpec::parse("memcached://a:1,b:2", None).unwrap(),
            TargetSpec::Memcached {
                servers: vec!["a:1".into(), "b:2".into()],
                timeout_ms: None,
            }
        );
        let tolerant = TargetSpec::parse("memcached://a:1,b:2?timeout_ms=500", None).unwrap();
        assert_eq!(
            tolerant,
            TargetSpec::Memcached {
                servers: vec!["a:1".into(), "b:2".into()],
                timeout_ms: Some(500),
            }
        );
        assert_eq!(tolerant.name(), "memcached://a:1,b:2?timeout_ms=500");
        assert!(TargetSpec::parse("memcached://a:1?timeout=5", None).is_err());
        assert!(TargetSpec::parse("memcached://a", None).is_err());
        assert!(TargetSpec::parse("redis", None).is_err());
        assert!(!TargetSpec::Dashmap.spans_processes());
    }
}

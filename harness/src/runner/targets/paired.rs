//! `--ab-heap`, `--ab-target`: two targets run as one, so that a single run compares them.
//! Untimed phases run every command on both. In the timed phase the worker loop sends each
//! window's commands to the target of the window's side, timed, and when the side changes the
//! other target runs them, untimed, before the new side's first timed one
//! ([`Session::direct`]; the worker loop's `Lag`, in `runner::ab`). So both see every command in the same order (one
//! worker's exactly; between workers, as concurrency allows), their contents, hit rates and
//! table sizes stay alike, and each timed command follows its own target's previous one,
//! whose leftovers (write-backs in flight) are its target's cost.

use super::{Outcome, Session, Target};
use podkv_traces::Command;

/// The run's target (`a`, target 0: the switch off) and the one it is compared with (`b`,
/// target 1: the switch on).
pub struct Paired<A, B> {
    /// Target 0.
    pub a: A,
    /// Target 1.
    pub b: B,
}

/// A worker's sessions on both targets, and where commands go now.
pub struct PairedSession<SA, SB> {
    a: SA,
    b: SB,
    to: Option<usize>,
}

impl<A: Target, B: Target> Target for Paired<A, B> {
    type Session<'t>
        = PairedSession<A::Session<'t>, B::Session<'t>>
    where
        A: 't,
        B: 't;

    fn session(&self, worker: usize) -> anyhow::Result<Self::Session<'_>> {
        Ok(PairedSession {
            a: self.a.session(worker)?,
            b: self.b.session(worker)?,
            to: None,
        })
    }

    /// The compared heap's HWcc bytes (target 1's: `--ab-heap`'s), so that a run comparing a
    /// `limited` heap with a `hardware` one reports what the `limited` store needs; the run's
    /// own heap's when target 1 has none.
    fn hwcc_bytes(&self) -> Option<u64> {
        self.b.hwcc_bytes().or_else(|| self.a.hwcc_bytes())
    }

    /// Both heaps' mCAS requests.
    fn mcas_ops(&self) -> Option<u64> {
        match (self.a.mcas_ops(), self.b.mcas_ops()) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
        }
    }
}

impl<SA: Session, SB: Session> Session for PairedSession<SA, SB> {
    /// On both targets (target 0's outcome; they agree, having seen the same commands), or
    /// on the one directed to.
    #[inline]
    fn execute(&mut self, command: Command, key: &[u8], value: &[u8]) -> anyhow::Result<Outcome> {
        match self.to {
            Some(0) => self.a.execute(command, key, value),
            Some(_) => self.b.execute(command, key, value),
            None => {
                let outcome = self.a.execute(command, key, value)?;
                self.b.execute(command, key, value)?;
                Ok(outcome)
            }
        }
    }

    fn settle(&mut self) -> anyhow::Result<()> {
        self.a.settle()?;
        self.b.settle()
    }

    #[inline]
    fn direct(&mut self, target: Option<usize>) -> bool {
        self.to = target;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::kv::KvTarget;
    use super::super::store::StoreTarget;
    use super::*;
    use podkv_store::StoreConfig;

    #[test]
    fn commands_go_to_both_targets_unless_directed() {
        let t = Paired {
            a: StoreTarget::local(&StoreConfig::default()).unwrap(),
            b: KvTarget(podkv_store::DashBaseline::new()),
        };
        let mut s = t.session(0).unwrap();
        let set = Command::Set { ttl: 0 };
        assert_eq!(s.execute(set, b"both", b"1").unwrap(), Outcome::Hit);
        assert!(s.direct(Some(1)));
        assert_eq!(s.execute(set, b"only-b", b"1").unwrap(), Outcome::Hit);
        assert_eq!(s.execute(Command::Get, b"both", b"").unwrap(), Outcome::Hit);
        s.direct(Some(0));
        assert_eq!(s.execute(Command::Get, b"both", b"").unwrap(), Outcome::Hit);
        assert_eq!(
            s.execute(Command::Get, b"only-b", b"").unwrap(),
            Outcome::Miss
        );
        s.direct(None);
        assert_eq!(
            s.execute(Command::Get, b"only-b", b"").unwrap(),
            Outcome::Miss,
            "both: target 0's outcome"
        );
        let mut alone = t.b.session(1).unwrap();
        assert!(!alone.direct(Some(0)), "a single target is not paired");
        assert_eq!(
            alone.execute(Command::Get, b"only-b", b"").unwrap(),
            Outcome::Hit
        );
    }
}

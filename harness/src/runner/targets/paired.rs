//! `--ab-heap`: two targets run as one, so that a single run compares them. Untimed phases
//! run every command on both. In the timed phase the worker loop sends each window's commands
//! to the store of the window's side, timed, and when the side changes the other store runs
//! them, untimed, before the new side's first timed one ([`Session::direct`]; the worker's
//! `Lag`). So both stores see every command in the same order (one worker's exactly; between
//! workers, as concurrency allows), their contents, hit rates and table sizes stay alike, and
//! each timed command follows its own store's previous one, whose leftovers (write-backs in
//! flight) are its store's cost.

use super::{Outcome, Session, Target};
use podkv_traces::Command;

/// The run's target (`a`, store 0: the switch off) and the one it is compared with (`b`,
/// store 1: the switch on).
pub struct Paired<T> {
    /// Store 0.
    pub a: T,
    /// Store 1.
    pub b: T,
}

/// A worker's sessions on both stores, and where commands go now.
pub struct PairedSession<S> {
    a: S,
    b: S,
    to: Option<usize>,
}

impl<T: Target> Target for Paired<T> {
    type Session<'t>
        = PairedSession<T::Session<'t>>
    where
        T: 't;

    fn session(&self, worker: usize) -> anyhow::Result<Self::Session<'_>> {
        Ok(PairedSession {
            a: self.a.session(worker)?,
            b: self.b.session(worker)?,
            to: None,
        })
    }

    /// The compared heap's HWcc bytes (store 1's: `--ab-heap`'s), so that a run comparing a
    /// `limited` heap with a `hardware` one reports what the `limited` store needs.
    fn hwcc_bytes(&self) -> Option<u64> {
        self.b.hwcc_bytes()
    }

    /// Both heaps' mCAS requests.
    fn mcas_ops(&self) -> Option<u64> {
        sum(self.a.mcas_ops(), self.b.mcas_ops())
    }
}

fn sum(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    }
}

impl<S: Session> Session for PairedSession<S> {
    /// On both stores (store 0's outcome; they agree, having seen the same commands), or on
    /// the one directed to.
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
    fn direct(&mut self, store: Option<usize>) -> bool {
        self.to = store;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::store::StoreTarget;
    use super::*;
    use podkv_store::StoreConfig;

    #[test]
    fn commands_go_to_both_stores_unless_directed() {
        let config = StoreConfig::default();
        let t = Paired {
            a: StoreTarget::local(&config).unwrap(),
            b: StoreTarget::local(&config).unwrap(),
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
            "both: store 0's outcome"
        );
        let mut alone = t.b.session(1).unwrap();
        assert!(!alone.direct(Some(0)), "a single store is not paired");
        assert_eq!(
            alone.execute(Command::Get, b"only-b", b"").unwrap(),
            Outcome::Hit
        );
    }
}

//! `--ab-windows`: the timed phase sets `podkv_hw::ab`'s switch on or off in windows of equal
//! length (each window's side drawn from its number), and each worker adds every operation's
//! time to the side (off, on) of the window it began in. The ratio of time per operation on
//! to off then measures what the switch changes, with the machine's slower noise cancelled
//! (see `podkv_hw::ab`).
//!
//! The windows are cut from the time-stamp counter, which every core of the machine shares,
//! at a length in ticks the launcher measures once and hands to every worker process: so all
//! workers of all processes agree on each window's side without talking (a run of several
//! processes has the switch on in all of them at once). Each worker sets its process's
//! switch when its own view of the side changes (a store or two per window, not per
//! operation).
//!
//! The worker's timed loop tells the sides apart through a `Side` (`NoSides` in a plain run,
//! `Windowed` here); with a paired target (`--ab-heap`, `--ab-target`) its `Lag` lets the
//! other target catch up at each change of side.

use super::metrics::ticks;
use super::source::{Source, Values};
use super::targets::Session;
use std::time::{Duration, Instant};

/// How long the clock is watched to learn its ticks per microsecond.
const CALIBRATION: Duration = Duration::from_millis(20);

/// The run's windows: how long each lasts, in ticks (window `n` covers ticks
/// `[n * length, (n + 1) * length)`).
#[derive(Clone, Copy, Debug)]
pub struct Windows {
    length: u64,
}

impl Windows {
    /// Windows of `length` ticks ([`window_ticks`], measured by the launcher).
    pub fn new(length: u64) -> Windows {
        Windows {
            length: length.max(1),
        }
    }

    /// The side of the window that tick `now` falls in (0: off, 1: on), with the switch set to
    /// it if this worker's last setting (`set`) differs. Sides are drawn per window from a
    /// hash of its number, not alternated: strict alternation would put every tick of a
    /// periodic interrupt whose period is a multiple of two windows on one side.
    #[inline]
    pub fn side(&self, now: u64, set: &mut usize) -> usize {
        let window = now / self.length;
        let side = (mix(window) >> 63) as usize;
        if side != *set {
            podkv_hw::ab::set(side == 1);
            *set = side;
        }
        side
    }
}

/// A bijective scramble of a window number (splitmix64's finaliser): its top bit is the side.
#[inline]
fn mix(x: u64) -> u64 {
    let x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The length in ticks of a window of `micros` microseconds, the clock watched for
/// [`CALIBRATION`].
pub fn window_ticks(micros: u64) -> u64 {
    ((ticks_per_micro() * micros as f64) as u64).max(1)
}

/// Ticks per microsecond, watched over [`CALIBRATION`].
fn ticks_per_micro() -> f64 {
    let (tick, at) = (ticks(), Instant::now());
    std::thread::sleep(CALIBRATION);
    let ticks = ticks().wrapping_sub(tick) as f64;
    ticks / (at.elapsed().as_nanos() as f64 / 1000.0).max(1.0)
}

/// What the worker's timed loop tells apart in each operation besides its kind: the side of the A/B
/// switch it ran on (`--ab-windows`), or nothing.
pub(super) trait Side {
    /// The side of an operation that starts at tick `start`, the switch set to it; `None`
    /// when nothing is told apart.
    fn side(&mut self, start: u64) -> Option<usize>;
}

/// A plain run: the loop keeps no side (the call inlines away).
pub(super) struct NoSides;

impl Side for NoSides {
    #[inline(always)]
    fn side(&mut self, _start: u64) -> Option<usize> {
        None
    }
}

/// `--ab-windows`: the window's side, and the side this worker last set the switch to.
pub(super) struct Windowed {
    windows: Windows,
    set: usize,
}

impl Windowed {
    /// Windows of `ticks`, the switch not yet set.
    pub(super) fn new(ticks: u64) -> Windowed {
        Windowed {
            windows: Windows::new(ticks),
            set: 0,
        }
    }
}

impl Side for Windowed {
    #[inline(always)]
    fn side(&mut self, start: u64) -> Option<usize> {
        Some(self.windows.side(start, &mut self.set))
    }
}

/// A paired target's catching up (`--ab-heap`, `--ab-target`: [`Paired`](super::targets::paired::Paired)): the operations this worker ran
/// on the store of the current side since the side last changed. When it changes, the store
/// of the new side runs them first, untimed, so both stores see every operation in order.
///
/// Whole windows, not alternate operations: an operation leaves work behind it (write-backs
/// in flight, evicted lines) that the next one on the core pays for. Timing each operation
/// right after the other store's would charge it with that store's leftovers; measured, a
/// `hardware` store's operation took 11–18% longer after a `limited` or `flush-cas` one.
pub(super) struct Lag<O> {
    /// The side whose store ran `ops`, once the session is known to be paired.
    side: Option<usize>,
    ops: Vec<O>,
}

impl<O: Clone> Lag<O> {
    pub(super) fn new() -> Self {
        Lag {
            side: None,
            ops: Vec::new(),
        }
    }

    /// Before an operation on `side`: if the side changed (or this is the first), and the
    /// session is paired, directs it to `side`'s store and has that store run what the other
    /// ran meanwhile. True if it ran anything (the clock must start again).
    #[inline(always)]
    pub(super) fn switch<S: Source<Op = O>, X: Session>(
        &mut self,
        side: usize,
        session: &mut X,
        values: &mut Values,
    ) -> anyhow::Result<bool> {
        if self.side == Some(side) || !session.direct(Some(side)) {
            return Ok(false);
        }
        self.side = Some(side);
        for op in self.ops.drain(..) {
            S::perform(&op, session, values)?;
        }
        Ok(true)
    }

    /// After an operation on the current side's store.
    #[inline(always)]
    pub(super) fn ran(&mut self, op: &O) {
        if self.side.is_some() {
            self.ops.push(op.clone());
        }
    }

    /// At the loop's end: the other store runs what is left, so both end alike.
    pub(super) fn finish<S: Source<Op = O>, X: Session>(
        mut self,
        session: &mut X,
        values: &mut Values,
    ) -> anyhow::Result<()> {
        if let Some(side) = self.side {
            self.switch::<S, X>(1 - side, session, values)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_take_their_side_from_the_clock() {
        let w = Windows::new(10);
        // The switch is process-wide and other tests' runs flip it too: only `set` is checked.
        let mut set = 0;
        let sides: Vec<usize> = (0..1000)
            .map(|i| w.side(1000 + 10 * i + 5, &mut set))
            .collect();
        assert_eq!(set, sides[999], "the worker's setting follows the side");
        assert!(
            sides.windows(2).any(|p| p[0] == p[1]),
            "sides are drawn, not alternated"
        );
        let on = sides.iter().sum::<usize>();
        assert!(
            (400..600).contains(&on),
            "about half the windows on: {on} of 1000"
        );
        assert_eq!(
            w.side(1003, &mut set),
            w.side(1007, &mut set),
            "one window, one side"
        );
        let again = Windows::new(10);
        assert_eq!(
            again.side(1005, &mut 0),
            sides[0],
            "the clock alone decides the side (several processes agree)"
        );
        podkv_hw::ab::set(false);
    }
}

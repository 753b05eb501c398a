//! YCSB's number generators, one file each, each a line-by-line port of the Java class
//! named in its heading, each taking the RNG as an argument.
//!
//! | file | YCSB class | draws |
//! | --- | --- | --- |
//! | [`constant`] | `ConstantIntegerGenerator` | one fixed value |
//! | [`counter`] | `CounterGenerator`, `AcknowledgedCounterGenerator` | shared sequence numbers |
//! | [`uniform`] | `UniformLongGenerator` | uniform in `[lb, ub]` |
//! | [`zipfian`] | `ZipfianGenerator` | Gray et al.'s zipfian, incremental zeta |
//! | [`power`] | (`Math.pow` in the zipfian) | `floor(n * x^alpha)` by table, libm's result |
//! | [`scrambled`] | `ScrambledZipfianGenerator` | zipfian over 10^10 items, FNV-scattered |
//! | [`latest`] | `SkewedLatestGenerator` | zipfian counted back from the newest item |
//! | [`hotspot`] | `HotspotIntegerGenerator` | x% of draws in the lowest y% of items |
//! | [`exponential`] | `ExponentialGenerator` | exponential, by mean or percentile/range |
//! | [`sequential`] | `SequentialGenerator` | a shared cursor wrapping over a range |
//! | [`discrete`] | `DiscreteGenerator` | the operation chooser |
//!
//! Counters are shared between workers (atomics behind an `Arc`); every other generator
//! is plain data that each worker clones, exactly as YCSB's generators are shared objects
//! whose only mutable state is the counters and the zipfian's cached zeta.

pub mod constant;
pub mod counter;
pub mod discrete;
pub mod exponential;
pub mod hotspot;
pub mod latest;
pub mod modulo;
pub mod power;
pub mod scrambled;
pub mod sequential;
pub mod uniform;
pub mod zipfian;

pub use constant::Constant;
pub use counter::{AcknowledgedCounter, Basis, Counter, Takers, WINDOW_SIZE};
pub use discrete::OperationChooser;
pub use exponential::Exponential;
pub use hotspot::Hotspot;
pub use latest::SkewedLatest;
pub use modulo::Modulus;
pub use power::Power;
pub use scrambled::ScrambledZipfian;
pub use sequential::Sequential;
pub use uniform::UniformLong;
pub use zipfian::Zipfian;

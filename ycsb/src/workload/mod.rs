//! CoreWorkload's properties, resolved and checked into a [`Workload`].
//!
//! # Properties read (YCSB 0.17 defaults)
//!
//! | property | default | meaning |
//! | --- | --- | --- |
//! | `recordcount` | 0 (= 2^31-1 for the key space, as YCSB) | records loaded |
//! | `operationcount` | 0 | run-phase operations |
//! | `readproportion` / `updateproportion` | 0.95 / 0.05 | operation mix |
//! | `insertproportion` / `scanproportion` / `readmodifywriteproportion` | 0 | |
//! | `deleteproportion` | 0 | podkv extension (CXLALLOC's YCSB-A) |
//! | `requestdistribution` | uniform | uniform, zipfian, latest, hotspot, exponential, sequential |
//! | `minscanlength` / `maxscanlength` | 1 / 1000 | scan length bounds |
//! | `scanlengthdistribution` | uniform | uniform, zipfian |
//! | `insertstart` / `insertcount` | 0 / recordcount - insertstart | this client's share of records |
//! | `zeropadding` | 1 | digits of a key number |
//! | `insertorder` | hashed | hashed, ordered |
//! | `fieldcount` / `fieldlength` / `minfieldlength` | 10 / 100 / 1 | value layout |
//! | `fieldlengthdistribution` | constant | constant, uniform, zipfian |
//! | `readallfields` / `writeallfields` | true / false | |
//! | `hotspotdatafraction` / `hotspotopnfraction` | 0.2 / 0.8 | |
//! | `exponential.percentile` / `exponential.frac` | 95 / 0.8571428571 | |
//! | `podkv.keybytes` | ycsb | `ycsb` names or `8`-byte keys (then fieldcount 1 × fieldlength 960 by default) |
//! | `podkv.seed` | 0 | the seed of every worker's RNG |
//!
//! Any other key is kept in [`Workload::ignored_keys`], as YCSB ignores what it does not
//! read (client settings such as `threadcount` or `db` land there).

pub(crate) mod named;
mod read;

pub use named::{named_text, NAMED};

use crate::error::YcsbError;
use crate::generator::exponential::{FRAC_DEFAULT, PERCENTILE_DEFAULT};
use crate::key::{KeyFormat, COUNT_8B_KEYS, ZERO_PADDING_MAX};
use crate::op::OpKind;
use crate::properties::Properties;
use crate::rng::SEED_DEFAULT;
use read::{boolean, choice, integer, number};

/// Every property this crate reads; anything else is ignored and reported.
const KEYS_KNOWN: &[&str] = &[
    "recordcount",
    "operationcount",
    "workload",
    "readproportion",
    "updateproportion",
    "insertproportion",
    "scanproportion",
    "readmodifywriteproportion",
    "deleteproportion",
    "requestdistribution",
    "minscanlength",
    "maxscanlength",
    "scanlengthdistribution",
    "insertstart",
    "insertcount",
    "zeropadding",
    "insertorder",
    "fieldcount",
    "fieldlength",
    "minfieldlength",
    "fieldlengthdistribution",
    "readallfields",
    "writeallfields",
    "hotspotdatafraction",
    "hotspotopnfraction",
    "exponential.percentile",
    "exponential.frac",
    "dataintegrity",
    "podkv.keybytes",
    "podkv.seed",
];

/// The field length used with 8-byte keys: the CXLALLOC paper's 960-byte values.
pub const FIELD_LENGTH_8B_KEYS: u64 = 960;

/// YCSB's stand-in for `recordcount=0` (`Integer.MAX_VALUE`).
const RECORD_COUNT_UNSET: u64 = i32::MAX as u64;

/// A checked CoreWorkload.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    /// Records in the store before the run phase (`recordcount`, 0 read as 2^31-1).
    pub record_count: u64,
    /// Run-phase operations (`operationcount`).
    pub operation_count: u64,
    /// Load-phase inserts: `insertcount` if set, else the `recordcount` property, as
    /// YCSB's client counts them.
    pub load_count: u64,
    /// First record number of this client (`insertstart`).
    pub insert_start: u64,
    /// Records of this client (`insertcount`, default `recordcount - insertstart`).
    pub insert_count: u64,
    /// The operation mix.
    pub mix: Mix,
    /// How run-phase keys are chosen.
    pub request: RequestDistribution,
    /// Scan lengths.
    pub scan_length: Lengths,
    /// Value layout.
    pub fields: Fields,
    /// How record numbers become keys.
    pub key_format: KeyFormat,
    /// The seed of every worker's RNG.
    pub seed: u64,
    /// Properties set but not read by CoreWorkload.
    pub ignored_keys: Vec<String>,
}

/// Operation proportions as given (YCSB normalizes them by their sum).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Mix {
    /// `readproportion`.
    pub read: f64,
    /// `updateproportion`.
    pub update: f64,
    /// `insertproportion`.
    pub insert: f64,
    /// `scanproportion`.
    pub scan: f64,
    /// `readmodifywriteproportion`.
    pub read_modify_write: f64,
    /// `deleteproportion` (podkv).
    pub delete: f64,
}

/// `requestdistribution` and its parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RequestDistribution {
    /// Uniform over this client's records.
    Uniform,
    /// Scrambled zipfian (theta 0.99) over this client's records plus expected inserts.
    Zipfian,
    /// Skewed toward the newest acknowledged insert.
    Latest,
    /// A hot set of records.
    Hotspot {
        /// `hotspotdatafraction`.
        data_fraction: f64,
        /// `hotspotopnfraction`.
        opn_fraction: f64,
    },
    /// Exponentially distributed distance back from the newest record.
    Exponential {
        /// `exponential.percentile`.
        percentile: f64,
        /// `exponential.frac`.
        frac: f64,
    },
    /// A shared cursor over this client's records.
    Sequential,
}

/// A distribution of lengths (field lengths, scan lengths).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LengthDistribution {
    /// Always the maximum.
    Constant,
    /// Uniform in `[min, max]`.
    Uniform,
    /// Zipfian over `[min, max]`, short lengths popular.
    Zipfian,
}

/// Lengths in `[min, max]` drawn from `distribution`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lengths {
    /// Smallest length.
    pub min: u64,
    /// Largest length (the constant, for [`LengthDistribution::Constant`]).
    pub max: u64,
    /// The distribution.
    pub distribution: LengthDistribution,
}

/// The value layout of a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fields {
    /// `fieldcount`.
    pub count: u64,
    /// `minfieldlength`, `fieldlength`, `fieldlengthdistribution`.
    pub length: Lengths,
    /// `readallfields`.
    pub read_all: bool,
    /// `writeallfields`.
    pub write_all: bool,
}

impl Workload {
    /// Shipped workload `name` with its own counts.
    pub fn named(name: &str) -> Result<Self, YcsbError> {
        Self::from_properties(&Properties::named(name)?)
    }

    /// Shipped workload `name`, with `recordcount` and `operationcount` replaced when
    /// given.
    pub fn named_with(
        name: &str,
        records: Option<u64>,
        ops: Option<u64>,
    ) -> Result<Self, YcsbError> {
        let mut props = Properties::named(name)?;
        if let Some(n) = records {
            props.records(n);
        }
        if let Some(n) = ops {
            props.ops(n);
        }
        Self::from_properties(&props)
    }

    /// Resolves and checks `props`.
    pub fn from_properties(props: &Properties) -> Result<Self, YcsbError> {
        check_unsupported(props)?;
        let record_count = integer(props, "recordcount", 0)?;
        let record_count = if record_count == 0 {
            RECORD_COUNT_UNSET
        } else {
            record_count
        };
        let insert_start = integer(props, "insertstart", 0)?;
        let insert_count = resolve_insert_count(props, record_count, insert_start)?;
        let key_format = key_format(props)?;
        let workload = Self {
            record_count,
            operation_count: integer(props, "operationcount", 0)?,
            load_count: load_count(props)?,
            insert_start,
            insert_count,
            mix: mix(props)?,
            request: request(props)?,
            scan_length: scan_length(props)?,
            fields: fields(props, key_format)?,
            key_format,
            seed: integer(props, "podkv.seed", SEED_DEFAULT)?,
            ignored_keys: ignored_keys(props),
        };
        workload.check()?;
        Ok(workload)
    }

    /// The `(proportion, kind)` pairs in YCSB's order, podkv's delete last.
    pub fn mix_pairs(&self) -> [(f64, OpKind); 6] {
        let m = &self.mix;
        [
            (m.read, OpKind::Read),
            (m.update, OpKind::Update),
            (m.insert, OpKind::Insert),
            (m.scan, OpKind::Scan),
            (m.read_modify_write, OpKind::ReadModifyWrite),
            (m.delete, OpKind::Delete),
        ]
    }

    /// Whether run-phase operations choose existing keys (anything but inserts).
    fn chooses_keys(&self) -> bool {
        let m = &self.mix;
        self.operation_count > 0
            && (m.read + m.update + m.scan + m.read_modify_write + m.delete) > 0.0
    }

    /// The checks that need more than one property.
    fn check(&self) -> Result<(), YcsbError> {
        if self.operation_count > 0 && self.mix_pairs().iter().all(|(w, _)| *w <= 0.0) {
            return Err(YcsbError::Inconsistent(
                "no operation has a positive proportion".into(),
            ));
        }
        if self.chooses_keys() && self.insert_count == 0 {
            return Err(YcsbError::Inconsistent(
                "insertcount is 0, so there is no record to choose".into(),
            ));
        }
        check_lengths("scan length", self.scan_length)?;
        check_lengths("field length", self.fields.length)?;
        self.check_key_space()
    }

    fn check_key_space(&self) -> Result<(), YcsbError> {
        if !matches!(self.key_format, KeyFormat::Fixed8 { .. }) {
            return Ok(());
        }
        let highest =
            self.insert_start + self.load_count.max(self.record_count) + self.operation_count;
        if highest >= COUNT_8B_KEYS {
            return Err(YcsbError::Inconsistent(format!(
                "8-byte keys name at most 2^48 records; this workload may need {highest}"
            )));
        }
        Ok(())
    }
}

fn check_unsupported(props: &Properties) -> Result<(), YcsbError> {
    if let Some(class) = props.get("workload") {
        if !class.ends_with(".CoreWorkload") && class != "CoreWorkload" {
            return Err(unsupported(
                "workload",
                class,
                "only CoreWorkload is ported",
            ));
        }
    }
    if boolean(props, "dataintegrity", false)? {
        return Err(unsupported(
            "dataintegrity",
            "true",
            "values are sized, not filled",
        ));
    }
    Ok(())
}

fn unsupported(key: &str, value: &str, reason: &'static str) -> YcsbError {
    YcsbError::Unsupported {
        key: key.into(),
        value: value.into(),
        reason,
    }
}

fn resolve_insert_count(props: &Properties, records: u64, start: u64) -> Result<u64, YcsbError> {
    let default = records.checked_sub(start).ok_or_else(|| {
        YcsbError::Inconsistent(format!(
            "insertstart {start} is beyond recordcount {records}"
        ))
    })?;
    let count = integer(props, "insertcount", default)?;
    if start + count > records {
        return Err(YcsbError::Inconsistent(format!(
            "recordcount ({records}) must be at least insertstart + insertcount ({start} + {count})"
        )));
    }
    Ok(count)
}

fn load_count(props: &Properties) -> Result<u64, YcsbError> {
    if props.contains("insertcount") {
        return integer(props, "insertcount", 0);
    }
    integer(props, "recordcount", 0)
}

fn mix(props: &Properties) -> Result<Mix, YcsbError> {
    Ok(Mix {
        read: number(props, "readproportion", 0.95)?,
        update: number(props, "updateproportion", 0.05)?,
        insert: number(props, "insertproportion", 0.0)?,
        scan: number(props, "scanproportion", 0.0)?,
        read_modify_write: number(props, "readmodifywriteproportion", 0.0)?,
        delete: number(props, "deleteproportion", 0.0)?,
    })
}

fn request(props: &Properties) -> Result<RequestDistribution, YcsbError> {
    let allowed = "uniform, zipfian, latest, hotspot, exponential, sequential";
    Ok(
        match choice(props, "requestdistribution", "uniform", allowed)? {
            "zipfian" => RequestDistribution::Zipfian,
            "latest" => RequestDistribution::Latest,
            "sequential" => RequestDistribution::Sequential,
            "hotspot" => RequestDistribution::Hotspot {
                data_fraction: number(props, "hotspotdatafraction", 0.2)?,
                opn_fraction: number(props, "hotspotopnfraction", 0.8)?,
            },
            "exponential" => RequestDistribution::Exponential {
                percentile: number(props, "exponential.percentile", PERCENTILE_DEFAULT)?,
                frac: number(props, "exponential.frac", FRAC_DEFAULT)?,
            },
            _ => RequestDistribution::Uniform,
        },
    )
}

fn scan_length(props: &Properties) -> Result<Lengths, YcsbError> {
    let distribution = match choice(
        props,
        "scanlengthdistribution",
        "uniform",
        "uniform, zipfian",
    )? {
        "zipfian" => LengthDistribution::Zipfian,
        _ => LengthDistribution::Uniform,
    };
    Ok(Lengths {
        min: integer(props, "minscanlength", 1)?,
        max: integer(props, "maxscanlength", 1000)?,
        distribution,
    })
}

fn fields(props: &Properties, key_format: KeyFormat) -> Result<Fields, YcsbError> {
    let fixed8 = matches!(key_format, KeyFormat::Fixed8 { .. });
    let allowed = "constant, uniform, zipfian";
    let distribution = match props.get("fieldlengthdistribution") {
        Some("histogram") => {
            return Err(unsupported(
                "fieldlengthdistribution",
                "histogram",
                "use constant, uniform or zipfian",
            ))
        }
        _ => match choice(props, "fieldlengthdistribution", "constant", allowed)? {
            "uniform" => LengthDistribution::Uniform,
            "zipfian" => LengthDistribution::Zipfian,
            _ => LengthDistribution::Constant,
        },
    };
    Ok(Fields {
        count: integer(props, "fieldcount", if fixed8 { 1 } else { 10 })?,
        length: Lengths {
            min: integer(props, "minfieldlength", 1)?,
            max: integer(
                props,
                "fieldlength",
                if fixed8 { FIELD_LENGTH_8B_KEYS } else { 100 },
            )?,
            distribution,
        },
        read_all: boolean(props, "readallfields", true)?,
        write_all: boolean(props, "writeallfields", false)?,
    })
}

fn key_format(props: &Properties) -> Result<KeyFormat, YcsbError> {
    let hashed = choice(props, "insertorder", "hashed", "hashed, ordered")? == "hashed";
    if choice(props, "podkv.keybytes", "ycsb", "ycsb, 8")? == "8" {
        return Ok(KeyFormat::Fixed8 { hashed });
    }
    let zero_padding = integer(props, "zeropadding", 1)?;
    if zero_padding > ZERO_PADDING_MAX as u64 {
        return Err(YcsbError::InvalidValue {
            key: "zeropadding".into(),
            value: zero_padding.to_string(),
            expected: "at most 60 (keys are at most 64 bytes)",
        });
    }
    Ok(KeyFormat::Ycsb {
        zero_padding: zero_padding as usize,
        hashed,
    })
}

fn check_lengths(what: &str, lengths: Lengths) -> Result<(), YcsbError> {
    let ranged = lengths.distribution != LengthDistribution::Constant;
    if ranged && lengths.min > lengths.max {
        return Err(YcsbError::Inconsistent(format!(
            "{what}: minimum {} is above maximum {}",
            lengths.min, lengths.max
        )));
    }
    Ok(())
}

fn ignored_keys(props: &Properties) -> Vec<String> {
    props
        .keys()
        .filter(|k| !KEYS_KNOWN.contains(k))
        .map(String::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(name: &str, extra: &str) -> Result<Workload, YcsbError> {
        let mut props = Properties::named(name)?;
        props.merge_text("extra", extra)?;
        Workload::from_properties(&props)
    }

    #[test]
    fn shipped_workloads_resolve() {
        for (name, _) in NAMED {
            let w = Workload::named(name).unwrap();
            assert!(w.ignored_keys.is_empty(), "{name}: {:?}", w.ignored_keys);
        }
        let a = Workload::named("a").unwrap();
        assert_eq!((a.record_count, a.operation_count), (1000, 1000));
        assert_eq!(a.request, RequestDistribution::Zipfian);
        assert_eq!(a.mix.read, 0.5);
        assert_eq!(
            a.key_format,
            KeyFormat::Ycsb {
                zero_padding: 1,
                hashed: true
            }
        );
        assert_eq!((a.fields.count, a.fields.length.max), (10, 100));
        let e = Workload::named("e").unwrap();
        assert_eq!(e.scan_length.max, 100);
        let d = Workload::named("cxlalloc-d").unwrap();
        assert_eq!(d.request, RequestDistribution::Latest);
        assert_eq!(d.record_count, 8_400_000);
        assert_eq!(d.key_format, KeyFormat::Fixed8 { hashed: true });
        assert_eq!((d.fields.count, d.fields.length.max), (1, 960));
        let ca = Workload::named("cxlalloc-a").unwrap();
        assert_eq!(
            (ca.mix.read, ca.mix.insert, ca.mix.delete),
            (0.5, 0.25, 0.25)
        );
        let load = Workload::named("load").unwrap();
        assert_eq!((load.load_count, load.operation_count), (8_400_000, 0));
    }

    #[test]
    fn shorthand_counts() {
        let w = Workload::named_with("cxlalloc-a", Some(100), Some(50)).unwrap();
        assert_eq!(
            (w.record_count, w.operation_count, w.load_count),
            (100, 50, 100)
        );
        assert_eq!(w.insert_count, 100);
    }

    #[test]
    fn explicit_fields_beat_the_8_byte_defaults() {
        let w = with("a", "podkv.keybytes=8\nfieldlength=64\n").unwrap();
        assert_eq!((w.fields.count, w.fields.length.max), (1, 64));
        let w = with("cxlalloc-a", "podkv.keybytes=ycsb\n").unwrap();
        assert_eq!((w.fields.count, w.fields.length.max), (10, 100));
    }

    #[test]
    fn defaults_are_ycsbs() {
        let w = Workload::from_properties(&Properties::new()).unwrap();
        assert_eq!(w.record_count, i32::MAX as u64);
        assert_eq!(w.load_count, 0);
        assert_eq!((w.mix.read, w.mix.update), (0.95, 0.05));
        assert_eq!(w.request, RequestDistribution::Uniform);
        assert_eq!(
            w.scan_length,
            Lengths {
                min: 1,
                max: 1000,
                distribution: LengthDistribution::Uniform
            }
        );
        assert!(w.fields.read_all && !w.fields.write_all);
        assert_eq!(w.seed, SEED_DEFAULT);
    }

    #[test]
    fn unknown_keys_are_reported_not_fatal() {
        let w = with("a", "threadcount=4\nreadproportoin=0.3\n").unwrap();
        assert_eq!(w.ignored_keys, ["readproportoin", "threadcount"]);
    }

    #[test]
    fn bad_values_are_refused() {
        let cases = [
            "requestdistribution=gaussian",
            "scanlengthdistribution=constant",
            "fieldlengthdistribution=histogram",
            "fieldlengthdistribution=normal",
            "insertorder=random",
            "readproportion=lots",
            "recordcount=-5",
            "readallfields=maybe",
            "zeropadding=61",
            "podkv.keybytes=16",
            "workload=site.ycsb.workloads.RestWorkload",
            "dataintegrity=true",
            "insertstart=900\ninsertcount=200",
            "readproportion=0\nupdateproportion=0",
            "minscanlength=10\nmaxscanlength=5",
            "fieldlengthdistribution=uniform\nminfieldlength=200",
            "podkv.keybytes=8\nrecordcount=281474976710656",
        ];
        for case in cases {
            assert!(with("a", case).is_err(), "{case} accepted");
        }
    }

    #[test]
    fn insert_range_follows_insertstart() {
        let w = with("a", "insertstart=400\n").unwrap();
        assert_eq!(
            (w.insert_start, w.insert_count, w.load_count),
            (400, 600, 1000)
        );
        let w = with("a", "insertstart=400\ninsertcount=100\n").unwrap();
        assert_eq!((w.insert_count, w.load_count), (100, 100));
    }
}

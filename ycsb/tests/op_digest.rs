//! Pins the operation stream of every shipped workload, so that work on the generators'
//! speed can never change a generated operation unnoticed.
//!
//! Each case hashes (FNV-1a 64) two things of one seeded run: the `--dump-ops` text
//! (kinds, keys, scan lengths, phase markers) and the `Debug` form of every operation,
//! which adds the key number and the value length. The pinned digests were taken from the
//! generators before any speed work (commit `daa4d96`); a case that fails prints the
//! digests it saw. A change that is *meant* to alter the streams must say so and re-pin.
//!
//! Besides the shipped workloads at a few seeds, the cases cover key numbers above 2^32
//! (`recordcount=10^12`), three interleaved workers, ordered zero-padded keys, and the
//! hotspot, exponential, uniform and zipfian length generators.

use podkv_ycsb::dump::{write_op, write_phase_marker};
use podkv_ycsb::{OpStream, Phase, Properties, Workload};

/// One pinned run: workload, extra properties, threads, and the two digests.
struct Case {
    workload: &'static str,
    seed: u64,
    extra: &'static str,
    threads: usize,
    dump: u64,
    ops: u64,
}

const SMALL: &str = "recordcount=2000\noperationcount=10000";
const BIG: &str = "recordcount=1000000000000\noperationcount=10000";
const ORDERED: &str =
    "recordcount=2000\noperationcount=10000\ninsertorder=ordered\nzeropadding=12\nrequestdistribution=hotspot\nfieldlengthdistribution=uniform";
const SKEWED: &str = "recordcount=2000\noperationcount=10000\nrequestdistribution=exponential\nfieldlengthdistribution=zipfian\nscanlengthdistribution=zipfian\nwriteallfields=true";

fn fnv1a(hash: &mut u64, bytes: &[u8]) {
    for &b in bytes {
        *hash ^= u64::from(b);
        *hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
}

fn workload(case: &Case) -> Workload {
    let mut props = Properties::named(case.workload).unwrap();
    props.merge_text("case", case.extra).unwrap();
    props.seed(case.seed);
    Workload::from_properties(&props).unwrap()
}

fn phases(w: &Workload) -> Vec<Phase> {
    if w.record_count > 1_000_000 {
        vec![Phase::Run]
    } else {
        vec![Phase::Load, Phase::Run]
    }
}

/// The digests of the dump text and of the operations' `Debug` forms, every phase, the
/// workers taken round-robin as `dump_phase` takes them (one pass: the dump text is written
/// with the dump's own `write_phase_marker` and `write_op`).
fn digests(w: &Workload, threads: usize) -> (u64, u64) {
    let (mut dump, mut ops) = (0xcbf2_9ce4_8422_2325, 0xcbf2_9ce4_8422_2325);
    let mut line = Vec::new();
    for phase in phases(w) {
        write_phase_marker(&mut line, phase).unwrap();
        let mut streams = OpStream::streams(w, phase, threads).unwrap();
        while !streams.is_empty() {
            let mut i = 0;
            while i < streams.len() {
                match streams[i].try_next().unwrap() {
                    Some(op) => {
                        write_op(&mut line, &op).unwrap();
                        fnv1a(&mut ops, format!("{op:?}\n").as_bytes());
                        i += 1;
                    }
                    None => streams.remove(i).finish().unwrap(),
                }
                fnv1a(&mut dump, &line);
                line.clear();
            }
        }
    }
    (dump, ops)
}

#[rustfmt::skip]
const CASES: &[Case] = &[
    Case { workload: "a", seed: 0, extra: SMALL, threads: 1, dump: 0xb824c16c171bfdef, ops: 0x921cab887ed8ec32 },
    Case { workload: "a", seed: 1, extra: SMALL, threads: 1, dump: 0x8abb02c1afa2bf84, ops: 0x572a7d5cda8bc853 },
    Case { workload: "a", seed: 7, extra: SMALL, threads: 1, dump: 0x904e55159383cf8e, ops: 0x27f710c1ebabdd47 },
    Case { workload: "b", seed: 0, extra: SMALL, threads: 1, dump: 0x68951827a08f40b9, ops: 0x3217dbe84190c696 },
    Case { workload: "b", seed: 1, extra: SMALL, threads: 1, dump: 0x4251327c6a78b754, ops: 0x5893e13cb1c4196f },
    Case { workload: "b", seed: 7, extra: SMALL, threads: 1, dump: 0x8b7e05010cd8b8d2, ops: 0x3bb7af0441a8e6b3 },
    Case { workload: "c", seed: 0, extra: SMALL, threads: 1, dump: 0xa5b8d514e4e28d33, ops: 0x3c5081d3d7873718 },
    Case { workload: "c", seed: 1, extra: SMALL, threads: 1, dump: 0x28d1327d1ecbb2ac, ops: 0x37a9974f26d45c75 },
    Case { workload: "c", seed: 7, extra: SMALL, threads: 1, dump: 0xf33e7c08c4e2b64f, ops: 0x60b86773482af768 },
    Case { workload: "d", seed: 0, extra: SMALL, threads: 1, dump: 0xbaba84f89df932c4, ops: 0xc110335a48a000ca },
    Case { workload: "d", seed: 1, extra: SMALL, threads: 1, dump: 0xae985f07f72b3616, ops: 0x44e4647955adfc19 },
    Case { workload: "d", seed: 7, extra: SMALL, threads: 1, dump: 0x1280531229d56866, ops: 0xfa1d4824332d4a68 },
    Case { workload: "e", seed: 0, extra: SMALL, threads: 1, dump: 0x364efedff46b4e47, ops: 0x45672bbeaaa1c314 },
    Case { workload: "e", seed: 1, extra: SMALL, threads: 1, dump: 0x9c2a8ceca761fbb8, ops: 0xed33f31ca0814160 },
    Case { workload: "e", seed: 7, extra: SMALL, threads: 1, dump: 0x3caaf6f30ee35336, ops: 0xdd15c8ec8c8c95ff },
    Case { workload: "f", seed: 0, extra: SMALL, threads: 1, dump: 0xe1e6bfb0f104cd6c, ops: 0x37cdced5e2fad932 },
    Case { workload: "f", seed: 1, extra: SMALL, threads: 1, dump: 0xbceb92f425687806, ops: 0x85f8dfaebc8a194d },
    Case { workload: "f", seed: 7, extra: SMALL, threads: 1, dump: 0x679fed76267d04f5, ops: 0xea07225809a54915 },
    Case { workload: "load", seed: 0, extra: SMALL, threads: 1, dump: 0x89ab72337e2cc000, ops: 0x629e815c2aaebebb },
    Case { workload: "load", seed: 1, extra: SMALL, threads: 1, dump: 0x89ab72337e2cc000, ops: 0x629e815c2aaebebb },
    Case { workload: "load", seed: 7, extra: SMALL, threads: 1, dump: 0x89ab72337e2cc000, ops: 0x629e815c2aaebebb },
    Case { workload: "cxlalloc-a", seed: 0, extra: SMALL, threads: 1, dump: 0xa5669521dec00210, ops: 0x2a6efe8a0ec4ed3c },
    Case { workload: "cxlalloc-a", seed: 1, extra: SMALL, threads: 1, dump: 0x7faae4c4ce584e63, ops: 0x881664bd756a625d },
    Case { workload: "cxlalloc-a", seed: 7, extra: SMALL, threads: 1, dump: 0xbf31a6e7f13a7593, ops: 0xb50f3da96ad077cc },
    Case { workload: "cxlalloc-d", seed: 0, extra: SMALL, threads: 1, dump: 0xd0fcc6b6205c02c9, ops: 0x5ab22aeaa461549f },
    Case { workload: "cxlalloc-d", seed: 1, extra: SMALL, threads: 1, dump: 0xa61c71f9b9fcf787, ops: 0xf881bf59a904dbb8 },
    Case { workload: "cxlalloc-d", seed: 7, extra: SMALL, threads: 1, dump: 0x507819e6274123a6, ops: 0x57f76824f2ff8676 },
    Case { workload: "a", seed: 3, extra: BIG, threads: 1, dump: 0x5a644d0b5669d253, ops: 0x135ccb3d825b35fb },
    Case { workload: "c", seed: 3, extra: BIG, threads: 1, dump: 0x08302fd4fd1437f2, ops: 0x3cd7d9adff0a80c2 },
    Case { workload: "e", seed: 3, extra: BIG, threads: 1, dump: 0x6d556be668bf5326, ops: 0x3ca3c1dd5ac8c1ff },
    Case { workload: "cxlalloc-a", seed: 3, extra: BIG, threads: 1, dump: 0xf7b5b93b46be0388, ops: 0x6b85380ecf2643b9 },
    Case { workload: "a", seed: 5, extra: SMALL, threads: 3, dump: 0x57b053f8eb2d0874, ops: 0xd86bc6219e329800 },
    Case { workload: "d", seed: 5, extra: SMALL, threads: 3, dump: 0x68c9c0a1d9801377, ops: 0x268ca1e24593dddc },
    Case { workload: "cxlalloc-a", seed: 5, extra: SMALL, threads: 3, dump: 0xfb00b0a10e0605e4, ops: 0xb1ccd39277d18584 },
    Case { workload: "a", seed: 2, extra: ORDERED, threads: 1, dump: 0xdd1a336fc728228f, ops: 0x648cb9627f6d32b0 },
    Case { workload: "e", seed: 2, extra: ORDERED, threads: 1, dump: 0x02be60b7751a6b0f, ops: 0xc2c1eaa6724e3712 },
    Case { workload: "f", seed: 2, extra: SKEWED, threads: 1, dump: 0x6e83675d68e68fe0, ops: 0xf22a61facdc723f4 },
    Case { workload: "e", seed: 2, extra: SKEWED, threads: 1, dump: 0x62950a526aac609b, ops: 0x310a61fad1544934 },
];

#[test]
fn every_shipped_workload_generates_the_pinned_operations() {
    let mut wrong = Vec::new();
    for case in CASES {
        let w = workload(case);
        let (dump, ops) = digests(&w, case.threads);
        if (dump, ops) != (case.dump, case.ops) {
            wrong.push(format!(
                "Case {{ workload: {:?}, seed: {}, threads: {}, dump: {dump:#018x}, ops: {ops:#018x} }},",
                case.workload, case.seed, case.threads
            ));
        }
    }
    assert!(wrong.is_empty(), "streams changed:\n{}", wrong.join("\n"));
}

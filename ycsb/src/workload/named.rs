//! The shipped workload files, embedded so that `Workload::named("a")` works from any
//! directory. The files themselves live in `ycsb/workloads/`.

/// `(name, file text)` for every shipped workload; `workloada` is also known as `a`.
pub const NAMED: [(&str, &str); 9] = [
    ("a", include_str!("../../workloads/workloada")),
    ("b", include_str!("../../workloads/workloadb")),
    ("c", include_str!("../../workloads/workloadc")),
    ("d", include_str!("../../workloads/workloadd")),
    ("e", include_str!("../../workloads/workloade")),
    ("f", include_str!("../../workloads/workloadf")),
    ("load", include_str!("../../workloads/load")),
    ("cxlalloc-a", include_str!("../../workloads/cxlalloc-a")),
    ("cxlalloc-d", include_str!("../../workloads/cxlalloc-d")),
];

/// The text of shipped workload `name` (`a`…`f` may also be spelled `workloada`…).
pub fn named_text(name: &str) -> Option<&'static str> {
    let short = name
        .strip_prefix("workload")
        .filter(|s| s.len() == 1)
        .unwrap_or(name);
    NAMED
        .iter()
        .find(|(n, _)| *n == short)
        .map(|(_, text)| *text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_resolves() {
        for (name, _) in NAMED {
            assert!(named_text(name).is_some());
        }
        assert_eq!(named_text("workloadb"), named_text("b"));
        assert!(named_text("g").is_none());
        assert!(named_text("workload").is_none());
    }
}

//! Links the `podkv` binary with packed relative relocations (`-z pack-relative-relocs`,
//! DT_RELR) where the linker and the C library both take them.
//!
//! `podkv` is a position-independent executable of some 15 MB of code. Its relative
//! relocations (`.rela.dyn`, about 0.9 MB as RELA records) are read in full by the loader at
//! every start, so their pages count in each server's proportional set size for as long as
//! it runs; packed, they take about 9 KB. An idle `podkv serve` goes from 8.0 to 7.1 MiB PSS
//! (medians of three, docs/history/2026-11-26-size-shift.md).
//!
//! A linker that does not know the option would only warn, but a C library older than 2.36
//! refuses a binary that needs it, so the option is used only when a probe linked with it
//! runs here. A cross build (target ≠ host) cannot run the probe and links as before.

use std::env;
use std::path::PathBuf;
use std::process::Command;

const FLAG: &str = "-Wl,-z,pack-relative-relocs";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CC");
    let target = env::var("TARGET").unwrap_or_default();
    let host = env::var("HOST").unwrap_or_default();
    if target != host || !target.contains("-linux-gnu") {
        return;
    }
    if probe() {
        println!("cargo:rustc-link-arg-bins={FLAG}");
    }
}

/// Whether a C program linked with [`FLAG`] builds and runs on this machine.
fn probe() -> bool {
    let Some(out) = env::var_os("OUT_DIR").map(PathBuf::from) else {
        return false;
    };
    let source = out.join("relr_probe.c");
    let binary = out.join("relr_probe");
    // A pointer in initialised data gives the link one relative relocation to pack.
    let program = "static const char *p = \"ok\";\nint main(void) { return p[0] != 'o'; }\n";
    if std::fs::write(&source, program).is_err() {
        return false;
    }
    let cc = env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let linked = Command::new(cc)
        .args(["-pie", "-fPIE", FLAG, "-o"])
        .arg(&binary)
        .arg(&source)
        .output()
        .is_ok_and(|o| o.status.success() && o.stderr.is_empty());
    linked && Command::new(&binary).status().is_ok_and(|s| s.success())
}

//! Records the git commit the harness is built from, for benchmark records; with the
//! `baselines` feature, builds the boost.interprocess shim (`shim/boost_interprocess.cpp`)
//! when boost's headers are installed (Debian `libboost-dev`, scripts/setup), and says so
//! with `cfg(podkv_boost)`; without them the boost baseline is refused with that reason.
fn main() {
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    if let Some(commit) = commit {
        println!("cargo:rustc-env=PODKV_GIT_COMMIT={commit}");
    }
    println!("cargo:rerun-if-changed=../.git/HEAD");
    println!("cargo:rerun-if-changed=../.git/refs/heads");
    println!("cargo:rustc-check-cfg=cfg(podkv_boost)");
    #[cfg(feature = "baselines")]
    boost();
}

/// Builds the boost.interprocess shim if boost's headers are there.
#[cfg(feature = "baselines")]
fn boost() {
    const HEADER: &str = "boost/interprocess/managed_shared_memory.hpp";
    println!("cargo:rerun-if-changed=shim/boost_interprocess.cpp");
    let found = ["/usr/include", "/usr/local/include"]
        .iter()
        .any(|dir| std::path::Path::new(dir).join(HEADER).is_file());
    if !found {
        println!(
            "cargo:warning=no {HEADER}: the boost baseline is left out (apt-get install libboost-dev)"
        );
        return;
    }
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .opt_level(2)
        .warnings(false)
        .file("shim/boost_interprocess.cpp")
        .compile("podkv_boost_interprocess");
    println!("cargo:rustc-link-lib=rt");
    println!("cargo:rustc-link-lib=pthread");
    println!("cargo:rustc-cfg=podkv_boost");
}

//! Records the git commit the harness is built from, for benchmark records; with the
//! `baselines` feature, builds the boost.interprocess shim (`shim/boost_interprocess.cpp`)
//! when boost's headers are installed (Debian `libboost-dev`, scripts/setup), and says so
//! with `cfg(podkv_boost)`; without them the boost baseline is refused with that reason.
fn main() {
    if let Some(commit) = git(&["rev-parse", "--short=12", "HEAD"]) {
        println!("cargo:rustc-env=PODKV_GIT_COMMIT={commit}");
    }
    // Rebuilt when the commit moves. HEAD is in the checkout's own git directory and branch
    // refs in the common one (the same directory except in a `git worktree`); only paths that
    // exist are named, since cargo reruns the script on every build for a missing one.
    for (which, file) in [
        ("--git-dir", "HEAD"),
        ("--git-common-dir", "refs/heads"),
        ("--git-common-dir", "packed-refs"),
    ] {
        if let Some(dir) = git(&["rev-parse", "--path-format=absolute", which]) {
            let path = std::path::Path::new(&dir).join(file);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    println!("cargo:rustc-check-cfg=cfg(podkv_boost)");
    #[cfg(feature = "baselines")]
    boost();
}

/// `git ARGS`'s output, trimmed, if git ran and succeeded.
fn git(args: &[&str]) -> Option<String> {
    std::process::Command::new("git")
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
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

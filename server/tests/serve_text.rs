//! `podkv serve` gives back the pages of its start-up code once it serves (`serve::text`):
//! ready, it holds much less of its executable's code than the same server told to keep it
//! (`PODKV_KEEP_TEXT=1`).

mod conv;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// KiB of `exe`'s code mappings resident in process `pid` (`Rss` of its `r-x` mappings).
fn text_resident_kib(pid: u32, exe: &Path) -> u64 {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let exe = exe.to_string_lossy();
    let mut ours = false;
    let mut kib = 0;
    for line in smaps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields
            .first()
            .is_some_and(|f| f.contains('-') && !f.ends_with(':'))
        {
            ours = fields.len() >= 6 && fields[1].contains('x') && fields[5] == exe;
        } else if ours && fields.first() == Some(&"Rss:") {
            kib += fields[1].parse::<u64>().unwrap();
        }
    }
    kib
}

/// Starts `exe serve` on a fresh heap in `dir` and waits for its ready line.
fn serve(exe: &Path, dir: &Path, keep_text: bool) -> Child {
    let mut command = Command::new(exe);
    command
        .arg("serve")
        .arg("--heap")
        .arg(dir.join(if keep_text { "kept" } else { "dropped" }))
        .args(["--listen", "127.0.0.1:0", "--threads", "1"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if keep_text {
        command.env("PODKV_KEEP_TEXT", "1");
    }
    let mut child = command.spawn().expect("podkv serve starts");
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.starts_with("podkv serve: listening on ") {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "podkv serve exited before it was ready"
        );
    }
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    child
}

#[test]
fn a_ready_server_holds_little_of_its_start_up_code() {
    // A copy of the binary, mapped by no other test's processes (the kernel pages out only
    // pages no other process maps), on disk: a file in tmpfs has no backing store to page to.
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("podkv");
    std::fs::copy(conv::podkv(), &exe).unwrap();
    let resident = |keep_text: bool| {
        let mut server = serve(&exe, dir.path(), keep_text);
        std::thread::sleep(Duration::from_millis(500));
        let kib = text_resident_kib(server.id(), &exe);
        server.kill().unwrap();
        server.wait().unwrap();
        kib
    };
    let kept = resident(true);
    let dropped = resident(false);
    assert!(
        dropped * 2 < kept,
        "resident code of a ready server: {dropped} KiB, kept: {kept} KiB"
    );
}

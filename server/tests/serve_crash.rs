//! Crash test: two `podkv serve` processes on one heap under write and read load; one is
//! killed with SIGKILL mid-load. The survivor must keep answering with no error, and every
//! set either process acknowledged must stay readable from the survivor with its value.
//!
//! Then `podkv store recover` recovers the dead process's thread slots, and `podkv store
//! check` must find the store and heap sound with no leak.

mod conv;

use conv::{heap_dir, Client, Server};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Writer connections per server.
const COUNT_WRITERS: usize = 3;

/// Acknowledged sets: (key, value).
type Acked = Arc<Mutex<Vec<(String, String)>>>;

/// Sets unique keys until `stop`; records each acknowledged one. Returns the first error seen
/// (a connection to the killed server is expected to fail).
fn writer(addr: SocketAddr, name: String, acked: Acked, stop: Arc<AtomicBool>) -> Option<String> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let key = format!("{name}-{n}");
        let value = format!("value-of-{key}-{}", "x".repeat((n % 200) as usize));
        let request = format!("set {key} 0 0 {}\r\n{value}\r\n", value.len());
        if let Err(e) = s.write_all(request.as_bytes()) {
            return Some(format!("write: {e}"));
        }
        let mut reply = [0u8; 8];
        if let Err(e) = s.read_exact(&mut reply) {
            return Some(format!("read: {e}"));
        }
        if &reply != b"STORED\r\n" {
            return Some(format!("reply {:?}", String::from_utf8_lossy(&reply)));
        }
        acked.lock().unwrap().push((key, value));
        n += 1;
    }
    None
}

/// Reads back acknowledged keys from `addr` until `stop`; every one must be found.
fn reader(
    addr: SocketAddr,
    acked: Acked,
    stop: Arc<AtomicBool>,
    reads: Arc<AtomicU64>,
) -> Option<String> {
    let mut c = Client::connect(addr);
    let mut i = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let pick = {
            let all = acked.lock().unwrap();
            if all.is_empty() {
                None
            } else {
                i = i.wrapping_mul(31).wrapping_add(7);
                Some(all[i % all.len()].clone())
            }
        };
        let Some((key, value)) = pick else {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        };
        let expected = format!("VALUE {key} 0 {}\r\n{value}\r\nEND\r\n", value.len());
        // Read to the `MN` after the reply (no key or value here holds it), so a miss or a
        // wrong value is reported with its key at once, not as a read that times out.
        let got = c.call(format!("get {key}\r\n").as_bytes());
        if got != expected.as_bytes() {
            return Some(format!("get {key}: {:?}", String::from_utf8_lossy(&got)));
        }
        reads.fetch_add(1, Ordering::Relaxed);
    }
    None
}

#[test]
fn survivor_keeps_every_acknowledged_set_after_a_sigkill() {
    let dir = heap_dir();
    let heap = dir.path().join("heap");
    let victim = Server::start(&heap, &["--threads", "2"]);
    let survivor = Server::start(&heap, &["--threads", "2"]);
    let acked: Acked = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let mut victim_writers = Vec::new();
    let mut survivor_threads = Vec::new();
    for w in 0..COUNT_WRITERS {
        for (addr, side, list) in [
            (victim.addr, "victim", &mut victim_writers),
            (survivor.addr, "survivor", &mut survivor_threads),
        ] {
            let (acked, stop) = (acked.clone(), stop.clone());
            let name = format!("{side}{w}");
            list.push(std::thread::spawn(move || writer(addr, name, acked, stop)));
        }
    }
    {
        let (acked, stop, reads) = (acked.clone(), stop.clone(), reads.clone());
        let addr = survivor.addr;
        survivor_threads.push(std::thread::spawn(move || reader(addr, acked, stop, reads)));
    }
    std::thread::sleep(Duration::from_millis(600));
    let acked_before_kill = acked.lock().unwrap().len();
    let status = victim.signal(libc::SIGKILL);
    assert!(!status.success());
    std::thread::sleep(Duration::from_millis(600));
    stop.store(true, Ordering::Relaxed);
    for t in survivor_threads {
        assert_eq!(
            t.join().unwrap(),
            None,
            "the survivor answered with an error"
        );
    }
    let victim_errors = victim_writers
        .into_iter()
        .filter_map(|t| t.join().unwrap())
        .count();
    assert_eq!(
        victim_errors, COUNT_WRITERS,
        "every victim connection broke"
    );
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked_before_kill > 100,
        "load ran: {acked_before_kill} sets before the kill"
    );
    assert!(reads.load(Ordering::Relaxed) > 100, "reads ran");
    // Every acknowledged set, from either process, read back from the survivor.
    let mut c = survivor.client();
    for chunk in acked.chunks(100) {
        let keys: Vec<&str> = chunk.iter().map(|(k, _)| k.as_str()).collect();
        let mut expected = String::new();
        for (k, v) in chunk {
            expected.push_str(&format!("VALUE {k} 0 {}\r\n{v}\r\n", v.len()));
        }
        expected.push_str("END\r\n");
        let got = c.call(format!("get {}\r\n", keys.join(" ")).as_bytes());
        let got = String::from_utf8_lossy(&got);
        let missing: Vec<&str> = keys
            .iter()
            .copied()
            .filter(|k| !got.contains(&format!("VALUE {k} ")))
            .collect();
        assert_eq!(got, expected, "missing from the survivor: {missing:?}");
    }
    eprintln!(
        "{} acknowledged sets ({acked_before_kill} before the kill) all readable from the survivor",
        acked.len()
    );
    assert!(survivor.stop().success());
    let out = std::process::Command::new(conv::podkv())
        .args(["store", "recover"])
        .arg(&heap)
        .output()
        .unwrap();
    eprintln!(
        "podkv store recover:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = std::process::Command::new(conv::podkv())
        .args(["store", "check"])
        .arg(&heap)
        .output()
        .unwrap();
    let report =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    eprintln!("podkv store check after the kill and recovery:\n{report}");
    assert!(
        out.status.success(),
        "after a kill and recovery the store accounts for every block:\n{report}"
    );
}

// A Rust target for test_compare.py: a named thread spins in
// rustcase::burner::leaf <- rustcase::burner::mid, functions whose symbols
// are mangled (legacy `_ZN…17h<hash>E`, or v0 `_R…` with
// -C symbol-mangling-version=v0) and read as `rustcase::burner::leaf` only
// when demangled.  Prints "pid P", "tid T", "ready" like stackcases and
// exits after 60 s.
use std::hint::black_box;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

static TID: AtomicU64 = AtomicU64::new(0);

mod burner {
    use super::*;

    #[inline(never)]
    pub fn leaf(mut x: u64) -> u64 {
        // /proc/thread-self is "PID/task/TID": the thread's own id
        // without a libc call.
        let me = std::fs::read_link("/proc/thread-self").unwrap();
        let tid = me.file_name().unwrap().to_str().unwrap().parse().unwrap();
        TID.store(tid, Ordering::SeqCst);
        loop {
            x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407));
        }
    }

    #[inline(never)]
    pub fn mid(x: u64) -> u64 {
        let r = leaf(black_box(x + 1));
        black_box(r ^ 7)
    }
}

fn main() {
    std::thread::Builder::new()
        .name("rust-hot".into())
        .spawn(|| burner::mid(42))
        .unwrap();
    while TID.load(Ordering::SeqCst) == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut out = std::io::stdout();
    write!(out, "pid {}\ntid {}\nready\n", std::process::id(), TID.load(Ordering::SeqCst)).unwrap();
    out.flush().unwrap();
    std::thread::sleep(Duration::from_secs(60));
}

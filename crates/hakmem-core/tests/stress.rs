//! Multi-threaded stress: threads allocate random sizes (1 B to several MiB),
//! fill them with a pattern, hand part of them to other threads, which verify
//! the pattern and free them. Runs a fixed number of rounds.

use hakmem_core::Hakmem;
use std::sync::{Arc, Barrier, Mutex};

#[global_allocator]
static GLOBAL: Hakmem = Hakmem;

const THREADS: usize = 4;
const ROUNDS: usize = 40;
const PER_ROUND: usize = 2_000;

mod common;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        common::xorshift(&mut self.0)
    }
    /// Mostly small, some medium, occasionally large or huge.
    fn size(&mut self) -> usize {
        let r = self.next();
        match r % 1000 {
            0..=899 => 1 + (r >> 16) as usize % 1024,
            900..=989 => 1 + (r >> 16) as usize % (64 << 10),
            990..=997 => 1 + (r >> 16) as usize % (2 << 20),
            _ => 1 + (r >> 16) as usize % (6 << 20),
        }
    }
}

#[derive(Clone, Copy)]
struct Obj {
    addr: usize,
    size: usize,
}

fn pattern(addr: usize, i: usize) -> u8 {
    (addr >> 4).wrapping_add(i * 31) as u8
}

fn make(size: usize) -> Obj {
    let p = hakmem_core::malloc(size);
    assert!(!p.is_null());
    let addr = p as usize;
    // Fill the ends and a stride through the middle: enough to catch overlap.
    for i in (0..size).step_by(61).chain([size - 1]) {
        // SAFETY: p is a live block of `size` bytes.
        unsafe { *p.add(i) = pattern(addr, i) };
    }
    Obj { addr, size }
}

fn verify_and_free(o: Obj) {
    let p = o.addr as *mut u8;
    for i in (0..o.size).step_by(61).chain([o.size - 1]) {
        // SAFETY: p is a live block of `o.size` bytes, owned by the caller.
        let got = unsafe { *p.add(i) };
        assert_eq!(
            got,
            pattern(o.addr, i),
            "block {:#x} size {} byte {}",
            o.addr,
            o.size,
            i
        );
    }
    // SAFETY: p is a live block owned by the caller.
    unsafe { hakmem_core::free(p) };
}

#[test]
fn threads_exchange_and_verify_blocks() {
    let mailboxes: Arc<Vec<Mutex<Vec<Obj>>>> = Arc::new((0..THREADS).map(|_| Mutex::new(Vec::new())).collect());
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let mailboxes = Arc::clone(&mailboxes);
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                let mut rng = Rng(0x1234_5678 + t as u64 * 7919);
                let mut mine: Vec<Obj> = Vec::new();
                for _ in 0..ROUNDS {
                    for _ in 0..PER_ROUND {
                        let r = rng.next();
                        if !mine.is_empty() && r.is_multiple_of(3) {
                            let i = (r >> 8) as usize % mine.len();
                            verify_and_free(mine.swap_remove(i));
                        } else {
                            mine.push(make(rng.size()));
                        }
                    }
                    // Hand a third of what we hold to the next thread.
                    let give: Vec<Obj> = mine.drain(..mine.len() / 3).collect();
                    mailboxes[(t + 1) % THREADS].lock().unwrap().extend(give);
                    barrier.wait();
                    let received: Vec<Obj> = std::mem::take(&mut *mailboxes[t].lock().unwrap());
                    for (i, o) in received.into_iter().enumerate() {
                        if i % 2 == 0 {
                            verify_and_free(o);
                        } else {
                            mine.push(o); // keep some: freed later by this thread
                        }
                    }
                    barrier.wait();
                }
                for o in mine {
                    verify_and_free(o);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn blocks_outlive_the_thread_that_allocated_them() {
    for round in 0..50 {
        let objs: Vec<Obj> = std::thread::spawn(move || {
            let mut rng = Rng(round + 1);
            (0..500).map(|_| make(rng.size().min(100_000))).collect()
        })
        .join()
        .unwrap();
        // The allocating thread is gone: these frees hit abandoned segments.
        for o in objs {
            verify_and_free(o);
        }
    }
    // Its segments were reclaimed or cached, not stranded.
    assert!(
        hakmem_core::abandoned_count() <= 16,
        "abandoned {}",
        hakmem_core::abandoned_count()
    );
}

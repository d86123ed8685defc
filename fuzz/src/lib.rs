//! An op interpreter for hakmem, shared by the cargo-fuzz target
//! (`fuzz_targets/ops.rs`) and the seeded test in the normal suite
//! (`crates/hakmem-core/tests/fuzz_ops.rs` includes this file).
//!
//! The input bytes are a program: allocate (size and alignment drawn from
//! the bytes, occasionally huge), allocate zeroed, free, realloc, query the
//! usable size, or hand a block to a second thread, which checks and frees
//! it. A shadow model checks every block: its alignment, that it overlaps
//! no other live block, that zeroed memory is zero, and that its contents
//! survive until it is freed (or, across realloc, up to the smaller size).
//! Any violation panics. Plain Rust and hakmem-core only, so the seeded test
//! can include it; hakmem is called explicitly, never as the global
//! allocator (libFuzzer and the test harness allocate themselves).

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

/// A live block in the shadow model.
#[derive(Clone, Copy, Debug)]
struct Obj {
    addr: usize,
    size: usize,
    align: usize,
    seed: u8,
}

/// Live ranges of both threads: address -> size.
type Shadow = Arc<Mutex<BTreeMap<usize, usize>>>;

fn byte_at(o: &Obj, i: usize) -> u8 {
    o.seed ^ (i as u8).wrapping_mul(31)
}

/// The offsets a block's pattern covers: both ends and a stride between.
fn offsets(size: usize) -> impl Iterator<Item = usize> {
    let stride = (size / 64).max(1);
    (0..size.min(64))
        .chain((64..size).step_by(stride))
        .chain(size.saturating_sub(64).max(64)..size)
}

fn fill(o: &Obj) {
    for i in offsets(o.size) {
        // SAFETY: o is a live block of o.size bytes owned by the caller.
        unsafe { *((o.addr + i) as *mut u8) = byte_at(o, i) };
    }
}

/// Checks the pattern `o` was filled with, at the offsets it was filled,
/// below `upto` (after a realloc, `o` carries the new address and the old
/// size).
fn verify(o: &Obj, upto: usize) {
    for i in offsets(o.size).filter(|&i| i < upto) {
        // SAFETY: o is a live block of at least `upto` bytes owned by the caller.
        let got = unsafe { *((o.addr + i) as *const u8) };
        assert_eq!(
            got,
            byte_at(o, i),
            "block {:#x} (size {}) byte {} corrupted",
            o.addr,
            o.size,
            i
        );
    }
}

fn insert(shadow: &Shadow, o: &Obj) {
    assert_eq!(o.addr % o.align, 0, "block {:#x} not aligned to {}", o.addr, o.align);
    let mut live = shadow.lock().unwrap();
    if let Some((&a, &s)) = live.range(..=o.addr).next_back() {
        assert!(
            a + s <= o.addr,
            "block {:#x}+{} overlaps live {:#x}+{}",
            o.addr,
            o.size,
            a,
            s
        );
    }
    if let Some((&a, _)) = live.range(o.addr..).next() {
        assert!(
            o.addr + o.size.max(1) <= a,
            "block {:#x}+{} overlaps live {:#x}",
            o.addr,
            o.size,
            a
        );
    }
    live.insert(o.addr, o.size.max(1));
}

fn remove(shadow: &Shadow, o: &Obj) {
    assert!(
        shadow.lock().unwrap().remove(&o.addr).is_some(),
        "block {:#x} not live",
        o.addr
    );
}

fn release(shadow: &Shadow, o: Obj) {
    verify(&o, o.size);
    remove(shadow, &o);
    // SAFETY: o is a live hakmem block freed exactly once, here.
    unsafe { hakmem_core::free(o.addr as *mut u8) };
}

/// Reads the program.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    fn size(&mut self) -> Option<usize> {
        let kind = self.byte()?;
        let lo = self.byte()? as usize | (self.byte()? as usize) << 8;
        Some(match kind % 16 {
            0..=9 => lo % 1025,                     // small
            10..=13 => lo % (64 << 10),             // medium
            14 => (lo << 5) % (2 << 20),            // large
            _ => (3 << 20) + (lo << 6) % (6 << 20), // huge
        })
    }

    fn align(&mut self) -> Option<usize> {
        let b = self.byte()?;
        Some(if b < 192 { 8 } else { 1 << (b % 21) })
    }
}

/// Runs one program. Panics on any violation of the allocator's contract.
pub fn run(data: &[u8]) {
    let shadow: Shadow = Arc::new(Mutex::new(BTreeMap::new()));
    let (tx, rx) = mpsc::channel::<Obj>();
    let other = {
        let shadow = shadow.clone();
        std::thread::spawn(move || {
            for o in rx {
                release(&shadow, o);
            }
        })
    };
    let mut slots: Vec<Obj> = Vec::new();
    let mut input = Input(data);
    let mut seed = 0u8;
    while let Some(op) = input.byte() {
        seed = seed.wrapping_add(1);
        let pick = |slots: &Vec<Obj>, b: u8| (b as usize) % slots.len();
        match op % 8 {
            0..=2 => {
                let (Some(size), Some(align)) = (input.size(), input.align()) else {
                    break;
                };
                let zeroed = op % 8 == 2;
                let p = if zeroed {
                    hakmem_core::alloc_zeroed(size, align)
                } else {
                    hakmem_core::alloc(size, align)
                };
                assert!(!p.is_null(), "allocation of {size} aligned {align} failed");
                let o = Obj {
                    addr: p as usize,
                    size,
                    align,
                    seed,
                };
                if zeroed {
                    for i in offsets(size) {
                        // SAFETY: p is a live block of `size` bytes.
                        assert_eq!(unsafe { *p.add(i) }, 0, "zeroed block {p:?} byte {i}");
                    }
                }
                // SAFETY: p is a live block of at least `size` bytes.
                assert!(unsafe { hakmem_core::usable_size(p) } >= size);
                insert(&shadow, &o);
                fill(&o);
                slots.push(o);
            }
            3 | 4 if !slots.is_empty() => {
                let Some(b) = input.byte() else { break };
                let o = slots.swap_remove(pick(&slots, b));
                release(&shadow, o);
            }
            5 if !slots.is_empty() => {
                let (Some(b), Some(new_size)) = (input.byte(), input.size()) else {
                    break;
                };
                let i = pick(&slots, b);
                let o = slots[i];
                verify(&o, o.size);
                remove(&shadow, &o);
                // SAFETY: o is a live block allocated with o.align; realloc
                // leaves it untouched when it returns null.
                let q = unsafe { hakmem_core::realloc(o.addr as *mut u8, new_size, o.align) };
                assert!(!q.is_null(), "realloc to {new_size} failed");
                verify(&Obj { addr: q as usize, ..o }, new_size);
                let fresh = Obj {
                    addr: q as usize,
                    size: new_size,
                    seed,
                    ..o
                };
                insert(&shadow, &fresh);
                fill(&fresh);
                slots[i] = fresh;
            }
            6 if !slots.is_empty() => {
                let Some(b) = input.byte() else { break };
                let o = slots.swap_remove(pick(&slots, b));
                tx.send(o).unwrap();
            }
            7 if !slots.is_empty() => {
                let Some(b) = input.byte() else { break };
                let o = slots[pick(&slots, b)];
                verify(&o, o.size);
            }
            _ => {}
        }
    }
    drop(tx);
    other.join().expect("the freeing thread found a violation");
    for o in slots {
        release(&shadow, o);
    }
    assert!(shadow.lock().unwrap().is_empty());
}

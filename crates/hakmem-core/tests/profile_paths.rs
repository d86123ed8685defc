//! The heap profiler's paths a block can take, at the smallest rate (one
//! sample per 4 KiB: most blocks of a few KiB are samples): `realloc` of
//! sampled blocks (moved, contents kept, records following), sampled
//! `calloc` blocks zeroed, sampled huge blocks, sampled blocks freed by
//! other threads and through a local heap's thread, and dumps racing with
//! threads that allocate and free. Every live record goes away with its
//! block: the live count returns to its start. Not in the hardened build,
//! which never samples.
#![cfg(not(feature = "secure"))]

use hakmem_core::Hakmem;
use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[global_allocator]
static GLOBAL: Hakmem = Hakmem;

fn live() -> usize {
    hakmem_core::profile::profile_stats().live_samples
}

/// One test in this binary: sampling is process-wide.
#[test]
fn every_path_of_a_sampled_block_keeps_the_records_right() {
    hakmem_core::profile::start(hakmem_core::profile::MIN_RATE);
    // What std sets up once and keeps (the main thread's handle, the
    // spawn machinery), set up now: the live count must come back to
    // `start` exactly after each part below, whose allocations all end
    // with it.
    std::thread::spawn(|| std::sync::mpsc::sync_channel::<u8>(1))
        .join()
        .unwrap();
    let mut blocks: Vec<(*mut u8, usize)> = Vec::with_capacity(2000);
    let start = live();

    // realloc: grow and shrink sampled blocks through every size range;
    // the contents follow.
    for i in 0..2000usize {
        let size = 1000 + (i * 37) % 3000;
        let p = hakmem_core::malloc(size);
        assert!(!p.is_null());
        // SAFETY: p is a live block of `size` bytes.
        unsafe { p.write_bytes(i as u8, size) };
        blocks.push((p, size));
    }
    assert!(
        live() > start + 200,
        "most blocks of a few KiB are samples at 4 KiB: {}",
        live() - start
    );
    for (i, (p, size)) in blocks.iter_mut().enumerate() {
        for new_size in [*size + 1, 40_000, 3_000_000, 700, *size] {
            // SAFETY: p is a live block of this allocator (alignment 16).
            let q = unsafe { hakmem_core::realloc(*p, new_size, 16) };
            assert!(!q.is_null());
            let kept = (*size).min(new_size);
            // SAFETY: q holds at least `kept` bytes copied from p.
            let bytes = unsafe { std::slice::from_raw_parts(q, kept) };
            assert!(
                bytes.iter().all(|&b| b == i as u8),
                "block {i} changed in realloc to {new_size}"
            );
            // SAFETY: q is live with new_size bytes.
            unsafe { q.write_bytes(i as u8, new_size) };
            *p = q;
            *size = new_size;
        }
    }
    for (p, _) in blocks.drain(..) {
        // SAFETY: each block is live and freed once.
        unsafe { hakmem_core::free(p) };
    }
    assert_eq!(live(), start, "every record left with its block");

    // calloc of reused memory: sampled blocks are zeroed too.
    for round in 0..200usize {
        let layout = Layout::from_size_align(2048 + round, 16).unwrap();
        // SAFETY: nonzero size; freed below with its layout.
        unsafe {
            let dirty = GLOBAL.alloc(layout);
            dirty.write_bytes(0xAB, layout.size());
            GLOBAL.dealloc(dirty, layout);
            let p = GLOBAL.alloc_zeroed(layout);
            assert!(std::slice::from_raw_parts(p, layout.size()).iter().all(|&b| b == 0));
            GLOBAL.dealloc(p, layout);
        }
    }

    // Huge blocks (above the large range) are sampled, and go.
    let huge: Vec<Vec<u8>> = (0..16).map(|i| vec![i as u8; 8 << 20]).collect();
    assert!(live() >= start + 16, "8 MiB blocks are always sampled at 4 KiB");
    drop(huge);
    assert_eq!(live(), start);

    // Freed by other threads, while the main thread dumps again and again.
    {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Vec<u8>>>(4);
        let producer = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let batch: Vec<Vec<u8>> = (0..64).map(|i| vec![i as u8; 512 + i * 64]).collect();
                    if tx.send(batch).is_err() {
                        break;
                    }
                }
            })
        };
        let consumer = std::thread::spawn(move || {
            let mut n = 0usize;
            for batch in rx {
                for (i, b) in batch.iter().enumerate() {
                    assert!(b.iter().all(|&x| x == i as u8));
                }
                n += batch.len();
            }
            n
        });
        let dir = std::env::temp_dir().join(format!("hakmem-profile-paths-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for k in 0..20 {
            let path = dir.join(format!("race-{k}.pb.gz"));
            hakmem_core::profile::dump(path.to_str().unwrap().as_bytes()).expect("dump");
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!(&bytes[..3], &[0x1f, 0x8b, 8], "a gzip member");
        }
        stop.store(true, Ordering::Relaxed);
        producer.join().unwrap();
        assert!(consumer.join().unwrap() > 0);
        std::fs::remove_dir_all(&dir).ok();
    }
    assert_eq!(live(), start, "every block another thread freed left the profile");

    // A thread with a local heap frees thread-heap samples, and the local
    // heap's own blocks (never sampled) are destroyed at once.
    let heap = hakmem_core::LocalHeap::new();
    let samples: Vec<Vec<u8>> = (0..100).map(|i| vec![i as u8; 3000]).collect();
    let mut local = Vec::new();
    for _ in 0..1000 {
        let p = heap.alloc(3000, 16);
        assert!(!p.is_null());
        local.push(p);
    }
    drop(samples);
    // SAFETY: no block of the heap is used after this.
    unsafe { heap.destroy() };
    drop(local);
    drop(blocks);
    // `blocks`, allocated before `start`, may have been a sample itself.
    assert!(live() <= start, "records of freed blocks remain");
    hakmem_core::profile::stop();
}

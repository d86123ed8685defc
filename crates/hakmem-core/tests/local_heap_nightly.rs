//! `LocalHeap` as a `core::alloc::Allocator` (the `nightly` feature): std's
//! own collections in a local heap. Built only with a nightly compiler and
//! `--features nightly` (scripts/test runs it where nightly is installed);
//! empty otherwise.
#![cfg(feature = "nightly")]
#![feature(allocator_api)]

use hakmem_core::LocalHeap;
use std::collections::VecDeque;

#[test]
fn std_collections_live_in_a_local_heap() {
    let before = hakmem_core::stats().pages_in_use;
    let heap = LocalHeap::new();
    let mut v: Vec<u64, &LocalHeap> = Vec::new_in(&heap);
    let mut boxes: Vec<Box<[u8; 100], &LocalHeap>, &LocalHeap> = Vec::new_in(&heap);
    let mut q: VecDeque<String, &LocalHeap> = VecDeque::new_in(&heap);
    for i in 0..100_000u64 {
        v.push(i);
        if i % 10 == 0 {
            boxes.push(Box::new_in([i as u8; 100], &heap));
            q.push_back(i.to_string());
        }
    }
    assert!(hakmem_core::stats().pages_in_use > before);
    assert_eq!(v.iter().sum::<u64>(), 100_000 * 99_999 / 2);
    assert!(boxes.iter().enumerate().all(|(i, b)| b[99] == (i * 10) as u8));
    assert_eq!(q.len(), 10_000);
    // Every block is in the heap (the Strings' bytes come from the global
    // heap): destroying it frees them without their destructors.
    for b in &boxes {
        assert!(hakmem_core::is_hakmem_segment(b.as_ptr()));
    }
    std::mem::forget((v, boxes));
    drop(q);
    // SAFETY: the collections above are forgotten or dropped.
    unsafe { heap.destroy() };
}

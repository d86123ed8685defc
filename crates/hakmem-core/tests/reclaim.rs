//! A thread that needs a segment reclaims abandoned segments only up to
//! the first with room for its request; the others wait for the next
//! thread (`thread::abandon::segment_acquire`). Taking them all would make
//! one thread of a burst the owner of everything its predecessors left,
//! while the others map fresh segments (docs/BENCHMARKS.md, "Threads that
//! come and go").
//!
//! A few of the segments it looks at past that one are tidied instead
//! (what was freed into them after their thread exited goes back, and the
//! emptied ones leave the list); the purge pass those late frees make due
//! tidies the rest.
//!
//! A thread that already owns many segments frees a block of an abandoned
//! segment without taking the segment over (`free::take_over_abandoned`):
//! the room the block leaves stays on the abandoned list, where threads
//! that need room look, and the purge pass gives it back when none does.
//!
//! One test, the parts in order, alone in its binary: the abandoned list
//! is global, no other thread may take from it while a part counts, and
//! the first part's new thread must not find a retired heap with room
//! (the second part leaves some).

use hakmem_core::Hakmem;
use std::sync::atomic::{AtomicUsize, Ordering};

#[global_allocator]
static GLOBAL: Hakmem = Hakmem;

#[test]
#[cfg_attr(
    feature = "secure",
    ignore = "secure builds: blocks this large are huge mappings, not segments"
)]
fn abandoned_segments_are_reclaimed_one_at_a_time_and_tidied() {
    reclaims_one_abandoned_segment_with_room_not_all();
    blocks_freed_into_abandoned_segments_after_the_exit_go_back();
    a_thread_with_many_segments_frees_into_abandoned_ones_without_taking_them();
    a_batch_pushed_into_an_abandoned_segment_makes_a_purge_pass_due();
}

/// Segments the exiting thread leaves, each holding one live block.
const LEFT: usize = 8;

/// A thread exits leaving a live block in each of `LEFT` segments; a new
/// thread's request takes one of them, not all.
fn reclaims_one_abandoned_segment_with_room_not_all() {
    // 1 MiB blocks: 16 of a segment's 31 units, so one per segment, and
    // each segment keeps 15 units free.
    let size = 1 << 20;
    let before = hakmem_core::abandoned_count();
    assert_eq!(before, 0, "abandoned segments before the test");
    let left: Vec<usize> = std::thread::spawn(move || {
        (0..LEFT)
            .map(|_| {
                let p = hakmem_core::malloc(size);
                assert!(!p.is_null());
                p as usize
            })
            .collect()
    })
    .join()
    .unwrap();
    // More than a retired heap may own: the exited heap was abandoned,
    // its segments published one by one.
    let abandoned = hakmem_core::abandoned_count();
    assert!(
        abandoned >= before + LEFT,
        "{abandoned} abandoned after the exit, {before} before"
    );
    // A new thread asks for 512 KiB (8 units): the first abandoned segment
    // it looks at has room.
    let (p, during) = std::thread::spawn(move || {
        let p = hakmem_core::malloc(512 << 10) as usize;
        (p, hakmem_core::abandoned_count())
    })
    .join()
    .unwrap();
    assert!(p != 0);
    assert_eq!(
        during,
        abandoned - 1,
        "the new thread reclaimed {} abandoned segments for one request",
        abandoned - during
    );
    // The block went into the segment it reclaimed, not a fresh one: it
    // shares a segment with one of the blocks left behind.
    let segment = |a: usize| a & !(hakmem_core::SEGMENT_SIZE - 1);
    assert!(
        left.iter().any(|&q| segment(q) == segment(p)),
        "the request was served from a segment other than the reclaimed one"
    );
    // SAFETY: blocks of this allocator, each freed once.
    unsafe {
        hakmem_core::free(p as *mut u8);
        for q in left {
            hakmem_core::free(q as *mut u8);
        }
    }
}

/// Segments the exiting thread of the second part fills.
const STRANDED: usize = 20;
/// The second part's small blocks, from the owner to the freer.
static SMALL: [AtomicUsize; STRANDED] = [const { AtomicUsize::new(0) }; STRANDED];
/// The second part's step: 1 allocated, 2 freed into batches, 3 the owner
/// may exit, 4 the freer may exit.
static STAGE: AtomicUsize = AtomicUsize::new(0);

/// Waits until `counter` reaches `value` (a minute at most: a thread that
/// panicked never gets there, and the test must fail, not hang). Acquire:
/// pairs with the Release stores of the parts' step counters, making the
/// blocks they hand over and the blocks' state visible.
fn wait_until(counter: &AtomicUsize, value: usize) {
    let start = std::time::Instant::now();
    while counter.load(Ordering::Acquire) < value {
        assert!(start.elapsed().as_secs() < 60, "step {value} never came");
        std::thread::yield_now();
    }
}

fn wait_for(stage: usize) {
    wait_until(&STAGE, stage);
}

/// Blocks freed into a dead thread's segments after its exit (from another
/// thread's batches) empty them; the next acquisition gives some back at
/// once, the purge pass the rest.
fn blocks_freed_into_abandoned_segments_after_the_exit_go_back() {
    let before = hakmem_core::abandoned_count();
    assert_eq!(before, 0, "abandoned segments before the test");
    // The owner: blocks of 29 of a segment's 31 units, each followed by a
    // small block of a class of its own, whose page takes one of the units
    // the large blocks leave: at most two such pages share a segment, and
    // the segments span more than a retired heap may own. It frees the large
    // blocks itself and exits when told: its segments then hold only the
    // small blocks, which another thread has freed into its batches
    // (blocks under 4 KiB wait there), so they reach the pages' remote
    // stacks only after the owner is gone, when no owner collects them.
    // The threads step through `STAGE` and hand the blocks over in
    // `SMALL`, so that neither allocates anything of its own (a channel
    // would leave a block of the owner's alive in one of its segments).
    let owner = std::thread::spawn(|| {
        let mut large = [0usize; STRANDED];
        for (i, l) in large.iter_mut().enumerate() {
            let p = hakmem_core::malloc(29 * hakmem_core::PAGE_SIZE);
            let q = hakmem_core::malloc(16 * (i + 1));
            assert!(!p.is_null() && !q.is_null());
            *l = p as usize;
            SMALL[i].store(q as usize, Ordering::Relaxed);
        }
        STAGE.store(1, Ordering::Release);
        wait_for(3);
        for p in large {
            // SAFETY: blocks of this allocator, each freed once.
            unsafe { hakmem_core::free(p as *mut u8) };
        }
    });
    let freer = std::thread::spawn(|| {
        // A heap of its own first: a thread without one pushes at once.
        let own = hakmem_core::malloc(64);
        assert!(!own.is_null());
        wait_for(1);
        for q in &SMALL {
            // SAFETY: blocks of this allocator, each freed once.
            unsafe { hakmem_core::free(q.load(Ordering::Relaxed) as *mut u8) };
        }
        STAGE.store(2, Ordering::Release);
        // Exits (flushing its batches) only after the owner has.
        wait_for(4);
        // SAFETY: its own block, freed once.
        unsafe { hakmem_core::free(own) };
    });
    wait_for(2);
    STAGE.store(3, Ordering::Release);
    owner.join().unwrap();
    let abandoned = hakmem_core::abandoned_count();
    STAGE.store(4, Ordering::Release);
    freer.join().unwrap();
    // Some of the small blocks may have been pushed while the owner lived
    // (two pages sharing a batch slot): most of its segments were
    // abandoned holding one.
    assert!(abandoned >= 4, "only {abandoned} segments abandoned");
    // The freer's exit takes none over; a purge pass due meanwhile (the
    // purge delay after the owner's frees) may have given back some
    // already, which is the same work done earlier.
    let abandoned = hakmem_core::abandoned_count();
    // A new thread asks for the largest blocks a segment holds until one
    // of them needs a segment its heap does not have (a retired heap it
    // may take over has at most 4): that one acquisition reclaims the
    // first abandoned segment and tidies a few of the others, all empty
    // now.
    let during = std::thread::spawn(move || {
        let mut blocks = Vec::new();
        while hakmem_core::abandoned_count() == abandoned && blocks.len() < 8 {
            let p = hakmem_core::malloc(hakmem_core::LARGE_SIZE_MAX);
            assert!(!p.is_null());
            blocks.push(p as usize);
        }
        let during = hakmem_core::abandoned_count();
        for p in blocks {
            // SAFETY: blocks of this allocator, each freed once.
            unsafe { hakmem_core::free(p as *mut u8) };
        }
        during
    })
    .join()
    .unwrap();
    // Unless a pass came between the two exits and took them all (then
    // there was nothing to tidy).
    if abandoned >= 2 {
        assert!(
            during + 2 <= abandoned,
            "the acquisition reclaimed one of {abandoned} abandoned segments, all emptied, and tidied none ({during} left)"
        );
    }
    // The rest go back at the purge pass (the owner's frees and the late
    // ones made it due).
    let left = wait_for_abandoned(0);
    assert_eq!(
        left, 0,
        "{left} of {abandoned} abandoned segments, emptied by frees after their thread exited, were not given back"
    );
}

/// Runs the purge pass when due (`collect(false)`) until `target`
/// abandoned segments are left, for 10 s at most; returns how many are.
fn wait_for_abandoned(target: usize) -> usize {
    let start = std::time::Instant::now();
    while hakmem_core::abandoned_count() > target && start.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(20));
        hakmem_core::collect(false);
    }
    hakmem_core::abandoned_count()
}

/// Blocks the third part's owner leaves: 13 blocks of 16 or 14 units, two
/// to a segment (the first may share one of a retired heap's), in 7
/// segments or so: more than a retired heap may own, so they are abandoned.
/// And one small block, which the freer would otherwise hold in a batch.
const LEFT_BEHIND: usize = 14;
/// Segments the third part's freer owns: more than a heap takes over
/// abandoned segments beside (`TAKE_OVER_SEGMENTS_MAX`, 8).
const FREER_SEGMENTS: usize = 9;
/// The third part's blocks, from the owner to the freer.
static BEHIND: [AtomicUsize; LEFT_BEHIND] = [const { AtomicUsize::new(0) }; LEFT_BEHIND];
/// The third part's step: 1 the freer has its segments, 2 the owner has
/// exited, 3 the freer has freed its blocks and counted, 4 the freer may
/// free its own blocks.
static STEP: AtomicUsize = AtomicUsize::new(0);
/// The freer's counts of abandoned segments before and after its frees.
static SEEN: [AtomicUsize; 2] = [const { AtomicUsize::new(0) }; 2];

fn wait_step(step: usize) {
    wait_until(&STEP, step);
}

/// A thread that owns more than 8 segments frees every block a dead
/// thread left: it takes none of their segments over (the blocks wait on
/// their pages' remote stacks, the segments on the abandoned list), and
/// the next purge pass takes the blocks in and gives the emptied segments
/// back, though no thread asks for room meanwhile.
fn a_thread_with_many_segments_frees_into_abandoned_ones_without_taking_them() {
    assert_eq!(hakmem_core::abandoned_count(), 0, "abandoned segments before the test");
    let unit = hakmem_core::PAGE_SIZE;
    let freer = std::thread::spawn(move || {
        // 17 units each: one per segment. Taken while nothing is abandoned,
        // and nothing but these blocks: the freer's own allocations must not
        // reclaim the owner's segments later.
        let mut own = [0usize; FREER_SEGMENTS];
        for p in own.iter_mut() {
            *p = hakmem_core::malloc(16 * unit + 1) as usize;
            assert!(*p != 0);
        }
        STEP.store(1, Ordering::Release);
        wait_step(2);
        let abandoned = hakmem_core::abandoned_count();
        for b in &BEHIND {
            // SAFETY: blocks of this allocator, each freed once.
            unsafe { hakmem_core::free(b.load(Ordering::Relaxed) as *mut u8) };
        }
        SEEN[0].store(abandoned, Ordering::Relaxed);
        SEEN[1].store(hakmem_core::abandoned_count(), Ordering::Relaxed);
        STEP.store(3, Ordering::Release);
        // Its own blocks stay until the test has looked: their segments,
        // freed, would make a purge pass due of their own accord.
        wait_step(4);
        for p in own {
            // SAFETY: blocks of this allocator, each freed once.
            unsafe { hakmem_core::free(p as *mut u8) };
        }
    });
    wait_step(1);
    // 16 + 14 of a segment's 31 units: each pair fills a segment.
    std::thread::spawn(move || {
        for (i, b) in BEHIND.iter().enumerate() {
            let size = match i {
                0 => 200,
                i if i % 2 == 1 => 16 * unit,
                _ => 14 * unit,
            };
            let p = hakmem_core::malloc(size);
            assert!(!p.is_null());
            b.store(p as usize, Ordering::Relaxed);
        }
    })
    .join()
    .unwrap();
    STEP.store(2, Ordering::Release);
    wait_step(3);
    let (abandoned, after) = (SEEN[0].load(Ordering::Relaxed), SEEN[1].load(Ordering::Relaxed));
    assert!(
        abandoned >= LEFT_BEHIND / 2,
        "{abandoned} segments abandoned by the owner's exit"
    );
    assert_eq!(
        after, abandoned,
        "a thread with {FREER_SEGMENTS} segments took abandoned ones over"
    );
    // No thread asks for a segment: the purge pass (due within the purge
    // delay) takes in the freed blocks and gives the segments back.
    let left = wait_for_abandoned(0);
    STEP.store(4, Ordering::Release);
    freer.join().unwrap();
    assert_eq!(
        left, 0,
        "abandoned segments whose blocks were all freed are still on the list after 10 s"
    );
}

/// The fourth part's block, from the owner to the freer.
static LATE: AtomicUsize = AtomicUsize::new(0);
/// The fourth part's step: 1 the owner has allocated, 2 the freer has the
/// block in a batch, 3 the owner may exit, 4 it has and the watcher has
/// counted the pages in use, 5 the freer has pushed the batch, 6 the freer
/// may exit.
static LATE_STEP: AtomicUsize = AtomicUsize::new(0);

/// A block a thread freed into its batch while the owner lived, pushed
/// only after the owner's exit (`thread::remote::flush_batch`), makes a
/// purge pass due, which takes it in and gives back the page it emptied:
/// nothing else would, with no thread looking for room and no other
/// deadline pending.
fn a_batch_pushed_into_an_abandoned_segment_makes_a_purge_pass_due() {
    // Nothing due from the earlier parts (retired heaps abandoned, free
    // pages purged): a pass must come of this part's push alone.
    hakmem_core::collect(true);
    let before = hakmem_core::abandoned_count();
    // The owner: one block of a class of its own (batched when freed by
    // another thread: under 4 KiB), then blocks of a whole segment each,
    // kept: more segments than a retired heap may own, so its exit
    // abandons them. It frees nothing: no page of it goes back, no
    // deadline is set.
    let owner = std::thread::spawn(|| {
        let p = hakmem_core::malloc(3500);
        assert!(!p.is_null());
        LATE.store(p as usize, Ordering::Relaxed);
        let large: Vec<usize> = (0..5)
            .map(|_| {
                let p = hakmem_core::malloc(hakmem_core::LARGE_SIZE_MAX);
                assert!(!p.is_null());
                p as usize
            })
            .collect();
        LATE_STEP.store(1, Ordering::Release);
        wait_until(&LATE_STEP, 3);
        large
    });
    let freer = std::thread::spawn(|| {
        // A heap of its own first: a thread without one pushes at once.
        let own = hakmem_core::malloc(64);
        assert!(!own.is_null());
        wait_until(&LATE_STEP, 1);
        // SAFETY: a block of this allocator, freed once.
        unsafe { hakmem_core::free(LATE.load(Ordering::Relaxed) as *mut u8) };
        LATE_STEP.store(2, Ordering::Release);
        wait_until(&LATE_STEP, 4);
        // Pushes the batch into the abandoned page (and runs no pass: none
        // is due yet).
        hakmem_core::collect(false);
        LATE_STEP.store(5, Ordering::Release);
        // Stays until the test has looked: its exit would retire its heap,
        // which makes a pass due of its own accord.
        wait_until(&LATE_STEP, 6);
        // SAFETY: its own block, freed once.
        unsafe { hakmem_core::free(own) };
    });
    wait_until(&LATE_STEP, 2);
    LATE_STEP.store(3, Ordering::Release);
    let large = owner.join().unwrap();
    // What is due now, a pass run at once: the look a second after each
    // new thread's heap (`thread::live`: is it still alive?) and the pass
    // the owner's exit made due for pushes racing it (`abandon_segments`).
    // The pass finds the block still in the freer's batch; only the late
    // push can make the next one due.
    hakmem_core::collect(true);
    let abandoned = hakmem_core::abandoned_count();
    assert!(
        abandoned >= before + 5,
        "{abandoned} segments abandoned after the owner's exit, {before} before"
    );
    // A thread without a heap watches and runs the pass when due: its
    // `collect` gives back nothing of its own, so the only page that can
    // go is the owner's. It counts the pages in use once started (its
    // start may have taken a page for the main thread), then lets the
    // freer push.
    let watcher = std::thread::spawn(move || {
        let pages = hakmem_core::stats().pages_in_use;
        LATE_STEP.store(4, Ordering::Release);
        wait_until(&LATE_STEP, 5);
        let start = std::time::Instant::now();
        while hakmem_core::stats().pages_in_use >= pages && start.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(20));
            hakmem_core::collect(false);
        }
        hakmem_core::stats().pages_in_use < pages
    });
    let released = watcher.join().unwrap();
    LATE_STEP.store(6, Ordering::Release);
    freer.join().unwrap();
    assert!(
        released,
        "the page a late batch emptied in an abandoned segment was not given back within 10 s"
    );
    for p in large {
        // SAFETY: blocks of this allocator, each freed once.
        unsafe { hakmem_core::free(p as *mut u8) };
    }
}

//! A page's atomic remote stack and its parking bits (the protocol the
//! module doc of `page` describes): other threads push chains of freed
//! blocks with one CAS, the owner takes them all with one RMW, and the two
//! low bits tell the first pusher after a parking to notify the owner.

use super::{Block, Page, FULL_NOTIFY, NOTIFYING, REMOTE_COUNT_SHIFT, REMOTE_HEAD_MASK};
use crate::sync::{fence, Ordering};

impl Page {
    /// Takes every remotely freed block into `free` (prepending). Leaves
    /// `FULL_NOTIFY` alone when no remote block was waiting, and `NOTIFYING`
    /// always (its pusher clears it). Walks the taken blocks only when
    /// `free` is not empty (to link their tail).
    pub(crate) fn collect_remote(&mut self) {
        // Relaxed: a hint only; a push it misses is taken next time.
        if self.remote_free.load(Ordering::Relaxed) & REMOTE_HEAD_MASK == 0 {
            return;
        }
        // Acquire: pairs with the Release CAS in `push_remote`, making the
        // pushers' link writes (and the user's last writes) visible. An RMW
        // that keeps NOTIFYING: a swap to 0 would drop it, and with it the
        // owner's knowledge that a pusher is still at work.
        let word = self.remote_free.fetch_and(NOTIFYING, Ordering::Acquire);
        let head = (word & REMOTE_HEAD_MASK) as *mut Block;
        if head.is_null() {
            return;
        }
        let count = (word >> REMOTE_COUNT_SHIFT) as u32;
        if !self.free.is_null() {
            let mut tail = head;
            // SAFETY: the RMW gave this thread the whole stack, blocks of
            // this page linked by `push_remote`.
            unsafe {
                loop {
                    let next = self.next_of(tail);
                    if next.is_null() {
                        break;
                    }
                    tail = next;
                }
                crate::check::valgrind::header_access(tail);
                (*tail).next = self.encode(self.free);
                crate::check::valgrind::header_done(tail);
            }
        }
        self.free = head;
        debug_assert!(count >= 1 && count <= self.used);
        self.used -= count;
    }

    /// Blocks waiting on the remote stack: a hint to a thread that does
    /// not own the page (a push it misses is not counted yet).
    pub(crate) fn remote_waiting(&self) -> u32 {
        // Relaxed: a count, read as a hint; no block is touched on it.
        (self.remote_free.load(Ordering::Relaxed) >> REMOTE_COUNT_SHIFT) as u32
    }

    /// Pushes the chain `head ..= tail` of `count` blocks of this page onto
    /// the remote stack (any thread): one CAS for the whole chain. The
    /// chain's links, but for `tail`'s, are already written (encoded); a
    /// single block is the chain `block ..= block` of 1.
    ///
    /// Returns true when the owner had parked the page as full: the caller
    /// must then tell the owner (`Segment::notify`) and call `end_notify`,
    /// touching nothing of the page's segment after that. Until then the
    /// page stays `NOTIFYING`, which keeps it from being released.
    pub(crate) fn push_remote(&self, head: *mut Block, tail: *mut Block, count: u32) -> bool {
        debug_assert!(head as usize & !REMOTE_HEAD_MASK == 0);
        // Relaxed: the CAS below checks the value.
        let mut old = self.remote_free.load(Ordering::Relaxed);
        loop {
            // SAFETY: the chain's blocks are blocks of this page being freed
            // by the caller, who owns them until the CAS publishes them.
            unsafe {
                crate::check::valgrind::header_access(tail);
                (*tail).next = self.encode((old & REMOTE_HEAD_MASK) as *mut Block);
                crate::check::valgrind::header_done(tail);
            }
            let parked = old & FULL_NOTIFY != 0;
            let total = (old >> REMOTE_COUNT_SHIFT) + count as usize;
            let new =
                head as usize | total << REMOTE_COUNT_SHIFT | (old & NOTIFYING) | if parked { NOTIFYING } else { 0 };
            // Release: publishes the link writes (and the user's writes to
            // the blocks) to the owner's Acquire RMW in `collect_remote`.
            match self
                .remote_free
                .compare_exchange_weak(old, new, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => {
                    if parked {
                        // Acquire: pairs with the Release RMW that parked
                        // the page (`try_set_full_notify`), which this CAS
                        // read: what the parking owner wrote before it —
                        // its heap in `Segment::heap` — is visible to the
                        // notification that follows.
                        fence(Ordering::Acquire);
                    }
                    return parked;
                }
                Err(current) => old = current,
            }
        }
    }

    /// Ends the notification `push_remote` asked for: the pusher's last
    /// access to the page's segment.
    pub(crate) fn end_notify(&self) {
        // Release: pairs with the Acquire load in `wait_notifier`: the
        // notification's accesses to the segment happen before the release
        // of the page that the waiting owner goes on to.
        self.remote_free.fetch_and(!NOTIFYING, Ordering::Release);
    }

    /// Waits until no pusher is telling the owner about this page (owner,
    /// before releasing it). The wait is the notifier's few instructions,
    /// unless its thread was descheduled inside them.
    pub(crate) fn wait_notifier(&self) {
        let mut spins = 0u32;
        // Acquire: pairs with the Release RMW in `end_notify`.
        while self.remote_free.load(Ordering::Acquire) & NOTIFYING != 0 {
            spins += 1;
            if spins < 64 {
                crate::sync::spin_hint();
            } else {
                crate::os::yield_now();
            }
        }
    }

    /// Whether a pusher is telling the owner about this page right now.
    pub(crate) fn is_notifying(&self) -> bool {
        // Relaxed: a hint; `wait_notifier` is what orders.
        self.remote_free.load(Ordering::Relaxed) & NOTIFYING != 0
    }

    /// Whether the page is parked and waiting to hear of a remote free.
    pub(crate) fn wants_notify(&self) -> bool {
        // Relaxed: a hint for the owner, which alone sets the bit.
        self.remote_free.load(Ordering::Relaxed) & FULL_NOTIFY != 0
    }

    /// Asks to be told of the next remote free (owner, parking the page):
    /// sets `FULL_NOTIFY`, or sets it again when it is set already. Fails
    /// (returns false) when remote blocks are waiting — the caller should
    /// collect them — or a notifier is at work (`is_notifying`).
    pub(crate) fn try_set_full_notify(&self) -> bool {
        // Relaxed: the CAS checks the value.
        let current = self.remote_free.load(Ordering::Relaxed);
        if current & !FULL_NOTIFY != 0 {
            return false;
        }
        // Release, also when the bit is set already (a reclaiming heap sets
        // it again): pairs with the pusher's Acquire fence after the CAS
        // that reads it, so the notifier sees this owner in
        // `Segment::heap`. The CAS is a read-modify-write, so later pushes
        // read from this release sequence.
        self.remote_free
            .compare_exchange(current, FULL_NOTIFY, Ordering::Release, Ordering::Relaxed)
            .is_ok()
    }

    /// Withdraws a `FULL_NOTIFY` request (the owner found the page useful
    /// again by itself). A pusher racing with this may still notify; the
    /// notification handler tolerates pages that are no longer parked.
    pub(crate) fn clear_full_notify(&self) {
        // Relaxed: publishes nothing; a racing pusher either sees the bit
        // (and notifies, harmlessly) or not.
        self.remote_free.fetch_and(!FULL_NOTIFY, Ordering::Relaxed);
    }
}

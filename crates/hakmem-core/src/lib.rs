//! TEMPORARY placeholder while the real allocator is written (replaced in the next commit).
#![no_std]
use core::alloc::{GlobalAlloc, Layout};
pub struct Hakmem;
unsafe impl GlobalAlloc for Hakmem {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let mut p = core::ptr::null_mut();
        // SAFETY: placeholder
        unsafe { libc::posix_memalign(&mut p, l.align().max(16), l.size()) };
        p as *mut u8
    }
    unsafe fn dealloc(&self, p: *mut u8, _l: Layout) {
        // SAFETY: placeholder
        unsafe { libc::free(p as *mut _) }
    }
}

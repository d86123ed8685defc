//! The profiler's own stack walk on x86-64: the DWARF call-frame
//! information (`.eh_frame`) every object carries, read once per return
//! address and kept as a rule in a small cache, so that a sample's walk
//! costs a few loads per frame instead of libgcc's re-reading of the unwind
//! tables at every frame (about 1 500 instructions a frame, 90 % of a
//! sample's cost before this walk).
//!
//! **The rule** of a frame is what the walk needs to go to its caller:
//! the canonical frame address (CFA) as `rsp` or `rbp` plus an offset, the
//! return address's slot relative to the CFA, and `rbp`'s slot when the
//! frame saved it. That covers every frame compilers emit at call sites
//! (with or without frame pointers). Anything else — a CFA given by an
//! expression or another register (a stack realigned through `r10`), a
//! rule for `rsp` itself, a signal frame, an augmentation this reader does not know, an address no
//! unwind table covers — is [`Rule::Other`], and [`walk`] gives way to
//! libgcc for the whole stack where that is safe (unwind.rs), which
//! follows every rule and knows the kernel's signal trampolines; the stack
//! ends there otherwise. The stack ends where a frame's
//! return address is undefined (`_start`, a thread's `clone3`).
//!
//! **Finding the table.** A cache miss finds the object holding the
//! address with glibc's `_dl_find_object` (2.35 and later: lock-free, no
//! allocation), else with `dl_iterate_phdr` (older glibc, static
//! executables), then the function's FDE in the object's own search table
//! (`.eh_frame_hdr`), and runs the CIE's and the FDE's instructions up to
//! the address. Never libgcc's `_Unwind_Find_FDE`: a sample may be taken
//! inside libgcc, which allocates under its own lock as it sorts the
//! tables of code registered with `__register_frame` (JIT compilers; a
//! static C executable's own), and asking for that lock again hung the
//! program (found by review). Code no search table covers (registered
//! code; a static C executable linked without `-Wl,--eh-frame-hdr`) is a
//! frame this walk does not follow.
//!
//! **The cache** ([`SLOTS`] slots, one per hashed address, 16 bytes each) is
//! lock-free: a slot's key is the address with a 16-bit sequence above it,
//! and a writer marks the key busy while it writes the rule, so a reader
//! that reads the key, the rule and the key again with the same value read
//! the rule written for that key (a seqlock). A writer that finds the slot
//! busy does not cache. A slot left busy by a `fork` in the middle of a
//! write stays a miss in the child. Rules are not dropped when code goes
//! away: a rule left for an address that `dlclose` unmapped, or for JIT
//! code whose memory was reused, is applied if a return address of the
//! new code lands on exactly the same byte (a wrong stack in the profile,
//! read within the bounds below).
//!
//! **The walk's reads** stay between the stack pointer and a top: the
//! thread's descriptor (`pthread_self()`), which glibc places at the top
//! of the stack it gives a thread (or that `pthread_attr_setstack` gave
//! it), when it lies less than 1 GiB above the stack pointer, else
//! `__libc_stack_end`, the top of the main thread's stack. Each frame's
//! CFA must lie above the previous stack pointer, so the walk only climbs.
//! On stacks glibc made this keeps every read on the mapped stack even
//! under a wrong rule. On a stack of the program's own making (coroutines,
//! `sigaltstack`) the bound is only a bound: there the walk reads what
//! libgcc's would, the slots the frames' rules name.

use crate::sync::plain::{fence, AtomicU64, AtomicUsize};
use crate::sync::Ordering;
use core::ffi::c_void;

/// DWARF's numbers for x86-64's registers (the psABI's table).
const RBP: u64 = 6;
const RSP: u64 = 7;
const RA: u64 = 16;

/// What a return address's frame tells the walk.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Rule {
    /// The caller's frame: CFA = (`rbp` if `from_rbp`, else `rsp`) +
    /// `cfa_off`; the return address at CFA + `ra_off`; the caller's `rbp`
    /// at CFA + `rbp_off` when the frame saved it, else unchanged.
    Frame {
        from_rbp: bool,
        cfa_off: i32,
        ra_off: i8,
        rbp_off: Option<i16>,
    },
    /// The outermost frame (its return address undefined: `_start`, a
    /// thread's `clone3`).
    End,
    /// A rule this walk does not follow.
    Other,
}

impl Rule {
    /// The rule in one word (never 0, the empty slot's).
    fn pack(self) -> u64 {
        match self {
            Rule::Frame {
                from_rbp,
                cfa_off,
                ra_off,
                rbp_off,
            } => {
                1 | (from_rbp as u64) << 2
                    | (rbp_off.is_some() as u64) << 3
                    | (ra_off as u8 as u64) << 8
                    | (rbp_off.unwrap_or(0) as u16 as u64) << 16
                    | (cfa_off as u32 as u64) << 32
            }
            Rule::End => 2,
            Rule::Other => 3,
        }
    }

    fn unpack(word: u64) -> Rule {
        match word & 3 {
            1 => Rule::Frame {
                from_rbp: word & 4 != 0,
                cfa_off: (word >> 32) as u32 as i32,
                ra_off: (word >> 8) as u8 as i8,
                rbp_off: (word & 8 != 0).then_some((word >> 16) as u16 as i16),
            },
            2 => Rule::End,
            _ => Rule::Other,
        }
    }
}

/// Cached rules (a power of two): more distinct return addresses than the
/// profiled program's sampled stacks hold only cost misses.
pub(super) const SLOTS: usize = 1 << 12;
/// The cache's memory (static, touched as it fills).
pub(super) const CACHE_BYTES: usize = SLOTS * core::mem::size_of::<Slot>();

/// A key's busy mark: user-space addresses lie below 2^47 (an address
/// above, possible with five-level page tables, is never cached).
const BUSY: u64 = 1 << 47;
/// A key's address bits.
const ADDR: u64 = BUSY - 1;
/// Where a key's sequence number starts.
const SEQ_SHIFT: u32 = 48;

pub(super) struct Slot {
    /// The address (0: empty), `BUSY` while written, the sequence above.
    key: AtomicU64,
    /// The packed rule.
    rule: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    key: AtomicU64::new(0),
    rule: AtomicU64::new(0),
};
static CACHE: [Slot; SLOTS] = [EMPTY; SLOTS];

fn slot_of(addr: u64) -> &'static Slot {
    let hash = addr.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SLOTS.trailing_zeros());
    &CACHE[hash as usize]
}

/// The cached rule for `addr`, if any.
fn cached(addr: u64) -> Option<Rule> {
    if addr == 0 || addr & !ADDR != 0 {
        return None;
    }
    let slot = slot_of(addr);
    // Acquire: pairs with the writer's final Release store of this key, so
    // the rule read below is at least the one written with it.
    let key = slot.key.load(Ordering::Acquire);
    if key & (ADDR | BUSY) != addr {
        return None;
    }
    // Relaxed: validated by the second look at the key below.
    let rule = slot.rule.load(Ordering::Relaxed);
    // Acquire fence: if the rule read was written by a later writer, that
    // writer's busy mark (made before its Release fence) is visible to the
    // key's second look, which then differs.
    fence(Ordering::Acquire);
    // Relaxed: ordered after the rule's read by the fence above.
    (slot.key.load(Ordering::Relaxed) == key).then(|| Rule::unpack(rule))
}

/// Caches `rule` for `addr`, unless another thread is writing the slot.
fn remember(addr: u64, rule: Rule) {
    if addr == 0 || addr & !ADDR != 0 {
        return;
    }
    let slot = slot_of(addr);
    // Relaxed: the compare-exchange below decides.
    let old = slot.key.load(Ordering::Relaxed);
    if old & BUSY != 0 {
        return;
    }
    // Relaxed: the mark orders nothing by itself; the fence below orders
    // it before the rule's store.
    if slot
        .key
        .compare_exchange(old, old | BUSY, Ordering::Relaxed, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    // Release fence: a reader that reads the rule stored below sees the
    // busy mark at its second look at the key (see `cached`).
    fence(Ordering::Release);
    // Relaxed: published by the key's Release store below.
    slot.rule.store(rule.pack(), Ordering::Relaxed);
    let seq = (old >> SEQ_SHIFT).wrapping_add(1) & 0xffff;
    // Release: publishes the rule with its key.
    slot.key.store(addr | seq << SEQ_SHIFT, Ordering::Release);
}

/// glibc's `_dl_find_object` (2.35 and later; 0 where glibc has none, or
/// in a static executable, where `dlsym` finds nothing), looked up by
/// `loaded` when the object holding hakmem is initialised: by name rather
/// than linked, so that the library still loads on an older glibc.
static DL_FIND_OBJECT: AtomicUsize = AtomicUsize::new(0);

/// Looks `_dl_find_object` up (from the load-time constructor: `dlsym`
/// then takes the loader's lock this thread already holds, if any).
#[cfg_attr(feature = "secure", allow(dead_code))]
pub(super) fn loaded() {
    // SAFETY: a lookup by a NUL-terminated name.
    let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"_dl_find_object".as_ptr()) };
    // Relaxed: a plain value, set before any sample is recorded (the
    // samples' own switch, profile::LOADED, is stored after it by the
    // same thread, and a sample that reads 0 takes the slower path).
    // `black_box`: the call must return here, never be a tail call.
    // `dlsym` finds `RTLD_DEFAULT`'s scope from its caller's address;
    // jumped to from the constructor, its caller was the loader's
    // `call_init`, and the lookup crashed every program the secure
    // library was preloaded into (where the stores, unread, had gone:
    // found by the fresh-clone run).
    DL_FIND_OBJECT.store(core::hint::black_box(f) as usize, Ordering::Relaxed);
}

/// glibc's `struct dl_find_object` on x86-64 (`<dlfcn.h>`), with room to
/// spare.
#[repr(C)]
struct DlFindObject {
    flags: u64,
    map_start: usize,
    map_end: usize,
    link_map: usize,
    eh_frame: usize,
    reserved: [u64; 16],
}

type DlFindObjectFn = unsafe extern "C" fn(pc: usize, result: *mut DlFindObject) -> i32;

/// A loaded object: the addresses it maps, and its `.eh_frame_hdr` (0:
/// none).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Object {
    pub(super) start: usize,
    pub(super) end: usize,
    eh_frame_hdr: usize,
}

/// The loaded object holding `addr`, if any: by glibc's `_dl_find_object`
/// (lock-free and allocation-free: glibc lets a signal handler call it),
/// else by `dl_iterate_phdr` (under the loader's write lock, held only
/// while an object is added or removed). Neither is libgcc's lookup, whose
/// lock the calling thread may hold (see `find_fde`).
pub(super) fn find_object(addr: usize) -> Option<Object> {
    // Relaxed: see `loaded`.
    let f = DL_FIND_OBJECT.load(Ordering::Relaxed);
    if f != 0 {
        // SAFETY: f is glibc's `_dl_find_object`, whose signature this is.
        let f: DlFindObjectFn = unsafe { core::mem::transmute::<usize, DlFindObjectFn>(f) };
        let mut found = DlFindObject {
            flags: 0,
            map_start: 0,
            map_end: 0,
            link_map: 0,
            eh_frame: 0,
            reserved: [0; 16],
        };
        // SAFETY: a lookup by address into `found`, ours for the call.
        return (unsafe { f(addr, &mut found) } == 0).then_some(Object {
            start: found.map_start,
            end: found.map_end,
            eh_frame_hdr: found.eh_frame,
        });
    }
    let mut search = (addr, None::<Object>);
    // SAFETY: the callback reads the headers glibc passes it and writes
    // only `search`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(object_holding), (&raw mut search).cast()) };
    search.1
}

/// `dl_iterate_phdr`'s callback for `find_object`: `data` is the address
/// sought and the answer; stops (returns 1) at the object holding it.
unsafe extern "C" fn object_holding(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> i32 {
    // SAFETY: glibc's description of a loaded object, valid for the call,
    // and find_object's search.
    unsafe {
        let search = &mut *(data as *mut (usize, Option<Object>));
        let info = &*info;
        let base = info.dlpi_addr as usize;
        let (mut start, mut end, mut hdr, mut holds) = (usize::MAX, 0, 0, false);
        for k in 0..usize::from(info.dlpi_phnum) {
            let ph = &*info.dlpi_phdr.add(k);
            let at = base.wrapping_add(ph.p_vaddr as usize);
            match ph.p_type {
                libc::PT_LOAD => {
                    let seg_end = at.wrapping_add(ph.p_memsz as usize);
                    holds |= at <= search.0 && search.0 < seg_end;
                    start = start.min(at);
                    end = end.max(seg_end);
                }
                libc::PT_GNU_EH_FRAME => hdr = at,
                _ => {}
            }
        }
        if !holds {
            return 0;
        }
        search.1 = Some(Object {
            start,
            end,
            eh_frame_hdr: hdr,
        });
        1
    }
}

/// The FDE covering `addr` (0: none), by the search table of the object
/// holding it (its `PT_GNU_EH_FRAME` segment, `.eh_frame_hdr`), never by
/// libgcc's `_Unwind_Find_FDE`: libgcc sorts the tables of code
/// registered with `__register_frame` (JIT compilers; a static C
/// executable's own, registered by its start files) under its lock, and
/// allocates there, so a sample taken inside the unwinder (a C++ `throw`,
/// `backtrace()`) asked for that lock again and waited for good (found by
/// review). What no such table covers stays unknown here: registered
/// code, and an object linked without `--eh-frame-hdr` (a static C
/// executable unless linked with `-Wl,--eh-frame-hdr`).
fn find_fde(addr: usize) -> usize {
    let Some(object) = find_object(addr) else {
        return 0;
    };
    let hdr = object.eh_frame_hdr;
    if hdr == 0 {
        return 0;
    }
    // SAFETY: the object's `.eh_frame_hdr`, mapped while it is loaded: it
    // holds addr, a frame of this thread's stack. Its fixed part is 4
    // bytes and two encoded pointers of at most 8 bytes.
    let mut r = unsafe { Reader::new(hdr, hdr + 20) };
    let (version, ptr_enc, count_enc, table_enc) = (r.u8(), r.u8(), r.u8(), r.u8());
    if version != Some(1) {
        return 0;
    }
    let (Some(ptr_enc), Some(count_enc), Some(table_enc)) = (ptr_enc, count_enc, table_enc) else {
        return 0;
    };
    // The `.eh_frame` pointer, skipped (0xff: omitted).
    if ptr_enc != 0xff && r.encoded(ptr_enc, hdr).is_none() {
        return 0;
    }
    let count = match r.encoded(count_enc, hdr) {
        Some(count) if count > 0 && count < 1 << 28 => count,
        _ => return 0,
    };
    // The table linkers write: pairs of 4-byte offsets from the header
    // (`DW_EH_PE_datarel | DW_EH_PE_sdata4`), the functions' starts and
    // their FDEs, sorted by start.
    if table_enc != 0x3b {
        return 0;
    }
    let table = r.at;
    // SAFETY: entry i < count of the object's table.
    let entry = |i: usize| unsafe { core::ptr::read_unaligned((table + 8 * i) as *const [i32; 2]) };
    let start = |i: usize| hdr.wrapping_add(entry(i)[0] as isize as usize);
    if addr < start(0) {
        return 0;
    }
    // The last entry whose start is at most addr.
    let (mut lo, mut hi) = (0, count);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if start(mid) <= addr {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hdr.wrapping_add(entry(lo)[1] as isize as usize)
}

/// The rule for address `addr` (a return address minus one, or the first
/// frame's own address), from the cache or the unwind tables.
fn rule_for(addr: usize) -> Rule {
    if let Some(rule) = cached(addr as u64) {
        return rule;
    }
    let fde = find_fde(addr);
    let rule = if fde == 0 {
        // No table covers it: libgcc's walk where that is safe
        // (unwind.rs), which also knows the kernel's signal trampolines by
        // their instructions.
        Rule::Other
    } else {
        // The FDE's object holds addr, a frame of this thread's stack, so
        // it cannot be unloaded while we read.
        // SAFETY: fde is a loaded object's FDE (run_fde checks that it
        // covers addr).
        unsafe { run_fde(fde, addr) }.unwrap_or(Rule::Other)
    };
    remember(addr as u64, rule);
    rule
}

/// A cursor over unwind-table bytes, bounded by `end`: made by the unsafe
/// [`Reader::new`], whose caller vouches that the bytes can be read.
#[derive(Clone)]
struct Reader {
    at: usize,
    end: usize,
}

impl Reader {
    /// # Safety
    /// The bytes `at..end` must be readable while the reader is used.
    unsafe fn new(at: usize, end: usize) -> Reader {
        Reader { at, end }
    }

    /// # Safety
    /// As [`Reader::new`], for the bytes up to the new `end`.
    unsafe fn set_end(&mut self, end: usize) {
        self.end = end;
    }

    fn bytes(&mut self, n: usize) -> Option<usize> {
        let at = self.at;
        if n > self.end.wrapping_sub(at) {
            return None;
        }
        self.at = at + n;
        Some(at)
    }

    fn u8(&mut self) -> Option<u8> {
        // SAFETY: `bytes` checked the byte lies in the table, before `end`.
        self.bytes(1).map(|at| unsafe { *(at as *const u8) })
    }

    fn fixed<T: Copy>(&mut self) -> Option<T> {
        let at = self.bytes(core::mem::size_of::<T>())?;
        // SAFETY: as in `u8`: within the table; unaligned by nature.
        Some(unsafe { core::ptr::read_unaligned(at as *const T) })
    }

    fn uleb(&mut self) -> Option<u64> {
        let mut value = 0u64;
        let mut shift = 0;
        loop {
            let byte = self.u8()?;
            if shift < 64 {
                value |= u64::from(byte & 0x7f) << shift;
            }
            shift += 7;
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
    }

    fn sleb(&mut self) -> Option<i64> {
        let mut value = 0i64;
        let mut shift = 0;
        loop {
            let byte = self.u8()?;
            if shift < 64 {
                value |= i64::from(byte & 0x7f) << shift;
            }
            shift += 7;
            if byte & 0x80 == 0 {
                if shift < 64 && byte & 0x40 != 0 {
                    value |= -1i64 << shift;
                }
                return Some(value);
            }
        }
    }

    /// A pointer in DWARF's `DW_EH_PE_*` encoding `enc`; `data` is the
    /// base of `datarel`. Indirect pointers are read as their slot's
    /// address (only the personality's is, and only to be skipped).
    fn encoded(&mut self, enc: u8, data: usize) -> Option<usize> {
        if enc == 0xff {
            return None;
        }
        let start = self.at;
        let value = match enc & 0x0f {
            0x00 | 0x04 => self.fixed::<u64>()? as usize,
            0x01 => self.uleb()? as usize,
            0x02 => usize::from(self.fixed::<u16>()?),
            0x03 => self.fixed::<u32>()? as usize,
            0x09 => self.sleb()? as usize,
            0x0a => self.fixed::<i16>()? as isize as usize,
            0x0b => self.fixed::<i32>()? as isize as usize,
            0x0c => self.fixed::<i64>()? as usize,
            _ => return None,
        };
        match enc & 0x70 {
            0x00 => Some(value),
            0x10 => Some(start.wrapping_add(value)),
            0x30 if data != 0 => Some(data.wrapping_add(value)),
            _ => None,
        }
    }
}

/// A CIE's fields the FDE's instructions need.
struct Cie {
    code_align: u64,
    data_align: i64,
    fde_enc: u8,
    augmented: bool,
    insns: Reader,
}

/// A register's rule, for the two registers the walk follows.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reg {
    Same,
    At(i64),
    Undefined,
    Other,
}

#[derive(Clone, Copy)]
struct State {
    cfa_reg: u64,
    cfa_off: i64,
    cfa_expr: bool,
    rbp: Reg,
    ra: Reg,
    /// `rsp`'s own rule: the walk takes the caller's `rsp` to be the CFA,
    /// so a frame that gives `rsp` another rule (hand-written or JIT
    /// tables) is one it does not follow.
    rsp: Reg,
}

impl State {
    fn set(&mut self, reg: u64, rule: Reg) {
        match reg {
            RBP => self.rbp = rule,
            RA => self.ra = rule,
            RSP => self.rsp = rule,
            _ => {}
        }
    }

    fn get(&self, reg: u64) -> Reg {
        match reg {
            RBP => self.rbp,
            RA => self.ra,
            RSP => self.rsp,
            _ => Reg::Same,
        }
    }
}

/// Reads the CIE at `at`.
///
/// # Safety
/// `at` must be a CIE of a loaded object's `.eh_frame`.
unsafe fn read_cie(at: usize) -> Option<Cie> {
    // SAFETY: the caller's guarantee: a CIE starts with its length and id.
    let mut r = unsafe { Reader::new(at, at + 8) };
    let len = r.fixed::<u32>()?;
    if len == 0 || len == u32::MAX || len > (1 << 20) {
        return None;
    }
    // SAFETY: the CIE's length counts the bytes after it.
    unsafe { r.set_end(at + 4 + len as usize) };
    if r.fixed::<u32>()? != 0 {
        return None;
    }
    let version = r.u8()?;
    if version != 1 && version != 3 {
        return None;
    }
    // The augmentation string: 'z' first, then the letters we know.
    let mut letters = [0u8; 8];
    let mut n = 0;
    loop {
        let c = r.u8()?;
        if c == 0 {
            break;
        }
        if n == letters.len() {
            return None;
        }
        letters[n] = c;
        n += 1;
    }
    let code_align = r.uleb()?;
    let data_align = r.sleb()?;
    let ra = if version == 1 { u64::from(r.u8()?) } else { r.uleb()? };
    if ra != RA {
        return None;
    }
    let mut fde_enc = 0u8;
    let augmented = n > 0 && letters[0] == b'z';
    if n > 0 {
        if !augmented {
            return None;
        }
        let len = r.uleb()? as usize;
        let data_start = r.at;
        for &c in &letters[1..n] {
            match c {
                b'R' => fde_enc = r.u8()?,
                b'L' => {
                    r.u8()?;
                }
                b'P' => {
                    let enc = r.u8()?;
                    r.encoded(enc & 0x7f, 0)?;
                }
                // 'S' (a signal frame) and anything unknown: libgcc's.
                _ => return None,
            }
        }
        r.at = data_start;
        r.bytes(len)?;
    }
    Some(Cie {
        code_align,
        data_align,
        fde_enc,
        augmented,
        insns: r,
    })
}

/// Runs the FDE at `fde` to `addr` and turns the state there into a rule.
///
/// # Safety
/// `fde` must be an FDE of a loaded object's `.eh_frame`.
unsafe fn run_fde(fde: usize, addr: usize) -> Option<Rule> {
    // SAFETY: the caller's guarantee: an FDE starts with its length and CIE.
    let mut r = unsafe { Reader::new(fde, fde + 8) };
    let len = r.fixed::<u32>()?;
    if len == 0 || len == u32::MAX || len > (1 << 24) {
        return None;
    }
    // SAFETY: the FDE's length counts the bytes after it.
    unsafe { r.set_end(fde + 4 + len as usize) };
    let cie_field = r.at;
    let cie_off = r.fixed::<u32>()? as usize;
    if cie_off == 0 || cie_off > cie_field {
        return None;
    }
    // SAFETY: the FDE's CIE pointer names a CIE of the same table.
    let cie = unsafe { read_cie(cie_field - cie_off)? };
    let begin = r.encoded(cie.fde_enc, 0)?;
    let range = r.encoded(cie.fde_enc & 0x0f, 0)?;
    if addr.wrapping_sub(begin) >= range {
        return None;
    }
    if cie.augmented {
        let len = r.uleb()? as usize;
        r.bytes(len)?;
    }
    let mut state = State {
        cfa_reg: RSP,
        cfa_off: 8,
        cfa_expr: false,
        rbp: Reg::Same,
        ra: Reg::Same,
        rsp: Reg::Same,
    };
    let mut cie_insns = cie.insns.clone();
    let initial = state;
    let mut loc = begin;
    execute(&mut cie_insns, &cie, &initial, &mut state, &mut loc, usize::MAX)?;
    let initial = state;
    execute(&mut r, &cie, &initial, &mut state, &mut loc, addr)?;
    if state.cfa_expr || (state.cfa_reg != RSP && state.cfa_reg != RBP) || state.rsp != Reg::Same {
        return Some(Rule::Other);
    }
    let ra_off = match state.ra {
        Reg::Undefined => return Some(Rule::End),
        Reg::At(off) => match i8::try_from(off) {
            Ok(off) => off,
            Err(_) => return Some(Rule::Other),
        },
        _ => return Some(Rule::Other),
    };
    let rbp_off = match state.rbp {
        Reg::Same | Reg::Undefined => None,
        Reg::At(off) => match i16::try_from(off) {
            Ok(off) => Some(off),
            Err(_) => return Some(Rule::Other),
        },
        Reg::Other => return Some(Rule::Other),
    };
    let Ok(cfa_off) = i32::try_from(state.cfa_off) else {
        return Some(Rule::Other);
    };
    Some(Rule::Frame {
        from_rbp: state.cfa_reg == RBP,
        cfa_off,
        ra_off,
        rbp_off,
    })
}

/// How deep `DW_CFA_remember_state` may nest.
const REMEMBERED: usize = 8;

/// Runs call-frame instructions until the location passes `addr` or the
/// instructions end. `None`: an instruction this reader does not know.
fn execute(r: &mut Reader, cie: &Cie, initial: &State, state: &mut State, loc: &mut usize, addr: usize) -> Option<()> {
    let mut saved = [*state; REMEMBERED];
    let mut depth = 0;
    let align = |n: u64| (n as usize).wrapping_mul(cie.code_align as usize);
    let data = |n: i64| n.wrapping_mul(cie.data_align);
    while r.at < r.end {
        let op = r.u8()?;
        let advance = match op & 0xc0 {
            0x40 => align(u64::from(op & 0x3f)),
            0x80 => {
                let off = r.uleb()? as i64;
                state.set(u64::from(op & 0x3f), Reg::At(data(off)));
                0
            }
            0xc0 => {
                let reg = u64::from(op & 0x3f);
                state.set(reg, initial.get(reg));
                0
            }
            _ => match op {
                0x00 => 0,
                0x01 => {
                    *loc = r.encoded(cie.fde_enc, 0)?;
                    if *loc > addr {
                        return Some(());
                    }
                    0
                }
                0x02 => align(u64::from(r.u8()?)),
                0x03 => align(u64::from(r.fixed::<u16>()?)),
                0x04 => align(u64::from(r.fixed::<u32>()?)),
                0x05 => {
                    let reg = r.uleb()?;
                    let off = r.uleb()? as i64;
                    state.set(reg, Reg::At(data(off)));
                    0
                }
                0x06 => {
                    let reg = r.uleb()?;
                    state.set(reg, initial.get(reg));
                    0
                }
                0x07 => {
                    state.set(r.uleb()?, Reg::Undefined);
                    0
                }
                0x08 => {
                    state.set(r.uleb()?, Reg::Same);
                    0
                }
                0x09 => {
                    let reg = r.uleb()?;
                    r.uleb()?;
                    state.set(reg, Reg::Other);
                    0
                }
                0x0a => {
                    if depth == REMEMBERED {
                        return None;
                    }
                    saved[depth] = *state;
                    depth += 1;
                    0
                }
                0x0b => {
                    if depth == 0 {
                        return None;
                    }
                    depth -= 1;
                    *state = saved[depth];
                    0
                }
                0x0c => {
                    state.cfa_reg = r.uleb()?;
                    state.cfa_off = r.uleb()? as i64;
                    state.cfa_expr = false;
                    0
                }
                0x0d => {
                    state.cfa_reg = r.uleb()?;
                    state.cfa_expr = false;
                    0
                }
                0x0e => {
                    state.cfa_off = r.uleb()? as i64;
                    0
                }
                0x0f => {
                    let len = r.uleb()? as usize;
                    r.bytes(len)?;
                    state.cfa_expr = true;
                    0
                }
                0x10 | 0x16 => {
                    let reg = r.uleb()?;
                    let len = r.uleb()? as usize;
                    r.bytes(len)?;
                    state.set(reg, Reg::Other);
                    0
                }
                0x11 => {
                    let reg = r.uleb()?;
                    let off = r.sleb()?;
                    state.set(reg, Reg::At(data(off)));
                    0
                }
                0x12 => {
                    state.cfa_reg = r.uleb()?;
                    state.cfa_off = data(r.sleb()?);
                    state.cfa_expr = false;
                    0
                }
                0x13 => {
                    state.cfa_off = data(r.sleb()?);
                    0
                }
                0x14 => {
                    let reg = r.uleb()?;
                    r.uleb()?;
                    state.set(reg, Reg::Other);
                    0
                }
                0x15 => {
                    let reg = r.uleb()?;
                    r.sleb()?;
                    state.set(reg, Reg::Other);
                    0
                }
                // DW_CFA_GNU_args_size: only for landing pads.
                0x2e => {
                    r.uleb()?;
                    0
                }
                // DW_CFA_GNU_negative_offset_extended.
                0x2f => {
                    let reg = r.uleb()?;
                    let off = r.uleb()? as i64;
                    state.set(reg, Reg::At(data(off.wrapping_neg())));
                    0
                }
                _ => return None,
            },
        };
        if advance != 0 {
            *loc = loc.wrapping_add(advance);
            if *loc > addr {
                return Some(());
            }
        }
    }
    Some(())
}

extern "C" {
    /// The top of the main thread's stack (its arguments and environment
    /// lie above), set by the loader.
    static __libc_stack_end: *mut c_void;
}

/// The highest address the walk may read below, for stack pointer `sp`.
fn stack_top(sp: usize) -> Option<usize> {
    // SAFETY: pthread_self has no preconditions.
    let descriptor = unsafe { libc::pthread_self() } as usize;
    // A thread glibc started: its descriptor sits at the top of its stack
    // (allocated or given by pthread_attr_setstack), above the static TLS.
    if sp < descriptor && descriptor - sp < 1 << 30 {
        return Some(descriptor);
    }
    // SAFETY: a word the loader set before any code of ours ran.
    let end = unsafe { __libc_stack_end } as usize;
    (sp < end).then_some(end)
}

/// Fills `frames` with the calling stack's addresses, innermost first: the
/// walk's own, then each frame's return address. `Err` with the frames
/// found so far where the walk met a rule it does not follow or a stack
/// it cannot bound (the caller then asks libgcc, where that is safe).
#[inline(never)]
#[link_section = "hakmem_text"]
pub(super) fn walk(frames: &mut [usize]) -> Result<usize, usize> {
    let (mut pc, mut sp, mut bp): (usize, usize, usize);
    // SAFETY: reads three registers, touching no memory.
    unsafe {
        core::arch::asm!(
            "lea {pc}, [rip]",
            "mov {sp}, rsp",
            "mov {bp}, rbp",
            pc = out(reg) pc,
            sp = out(reg) sp,
            bp = out(reg) bp,
            options(nomem, nostack, preserves_flags),
        );
    }
    let top = stack_top(sp).ok_or(0usize)?;
    let mut len = 0;
    let mut first = true;
    while len < frames.len() {
        frames[len] = pc;
        len += 1;
        // A return address's call lies before it (a call may be the last
        // instruction of a function that does not return).
        let rule = rule_for(if first { pc } else { pc - 1 });
        first = false;
        let Rule::Frame {
            from_rbp,
            cfa_off,
            ra_off,
            rbp_off,
        } = rule
        else {
            if rule == Rule::End {
                break;
            }
            return Err(len);
        };
        let cfa = (if from_rbp { bp } else { sp }).wrapping_add(cfa_off as isize as usize);
        let ra_at = cfa.wrapping_add(ra_off as isize as usize);
        let on_stack = |at: usize| at >= sp && at <= top - 8;
        if cfa <= sp || !on_stack(ra_at) {
            break;
        }
        if let Some(off) = rbp_off {
            let at = cfa.wrapping_add(off as isize as usize);
            if !on_stack(at) {
                break;
            }
            // SAFETY: at lies on this thread's mapped stack (sp..top).
            bp = unsafe { core::ptr::read_unaligned(at as *const usize) };
        }
        // SAFETY: as above, for ra_at.
        pc = unsafe { core::ptr::read_unaligned(ra_at as *const usize) };
        sp = cfa;
        if pc == 0 {
            break;
        }
    }
    Ok(len)
}

/// Whether two addresses share a cache slot (for the tests: a lookup of
/// one replaces the other's rule).
#[cfg(test)]
pub(super) fn same_slot(a: usize, b: usize) -> bool {
    core::ptr::eq(slot_of(a as u64), slot_of(b as u64))
}

/// Replaces the cached rule for `addr` with `rule`; the returned closure
/// puts the real one back (for the tests of the walk's bounds).
#[cfg(test)]
pub(super) fn poison(addr: usize, rule: Rule) -> impl FnOnce() {
    let real = rule_for(addr);
    remember(addr as u64, rule);
    assert_eq!(cached(addr as u64), Some(rule));
    move || remember(addr as u64, real)
}

#[cfg(test)]
pub(super) mod tests {
    extern crate std;
    use super::*;

    /// Held by the tests that write the cache (each slot may be any
    /// address's: one test's rules could replace another's).
    pub(in crate::profile) static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// `_dl_find_object` and `dl_iterate_phdr` (glibc before 2.35, static
    /// executables) find the same object and the same FDE, for this
    /// test's code and for libc's; an address no object maps is in none.
    #[test]
    fn both_object_lookups_find_the_same_tables() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        loaded();
        // Relaxed: this test's own thread wrote it.
        let glibc = DL_FIND_OBJECT.load(Ordering::Relaxed);
        assert_ne!(glibc, 0, "glibc 2.35 or later has _dl_find_object");
        let here = both_object_lookups_find_the_same_tables as *const () as usize;
        for addr in [here, libc::malloc as *const () as usize, walk as *const () as usize] {
            let by_glibc = find_object(addr).expect("a loaded object holds it");
            let fde = find_fde(addr);
            DL_FIND_OBJECT.store(0, Ordering::Relaxed);
            let by_phdr = find_object(addr).expect("a loaded object holds it");
            let fde_by_phdr = find_fde(addr);
            DL_FIND_OBJECT.store(glibc, Ordering::Relaxed);
            assert_eq!(by_glibc.eh_frame_hdr, by_phdr.eh_frame_hdr, "{addr:#x}");
            assert_ne!(by_glibc.eh_frame_hdr, 0, "{addr:#x}: its object has a search table");
            assert!(by_phdr.start <= addr && addr < by_phdr.end, "{addr:#x}: {by_phdr:?}");
            assert!(by_glibc.start <= addr && addr < by_glibc.end, "{addr:#x}: {by_glibc:?}");
            assert_ne!(fde, 0, "{addr:#x}: an FDE covers it");
            assert_eq!(fde, fde_by_phdr, "{addr:#x}");
            // SAFETY: fde is a loaded object's FDE.
            let rule = unsafe { run_fde(fde, addr) };
            assert!(matches!(rule, Some(Rule::Frame { .. })), "{addr:#x}");
        }
        assert_eq!(find_object(16), None);
        assert_eq!(find_fde(16), 0);
    }

    #[test]
    fn rules_pack_and_unpack() {
        for rule in [
            Rule::End,
            Rule::Other,
            Rule::Frame {
                from_rbp: false,
                cfa_off: 8,
                ra_off: -8,
                rbp_off: None,
            },
            Rule::Frame {
                from_rbp: true,
                cfa_off: -70_000,
                ra_off: -8,
                rbp_off: Some(-16),
            },
            Rule::Frame {
                from_rbp: false,
                cfa_off: i32::MAX,
                ra_off: i8::MIN,
                rbp_off: Some(i16::MIN),
            },
        ] {
            assert_ne!(rule.pack(), 0);
            assert_eq!(Rule::unpack(rule.pack()), rule);
        }
    }

    #[test]
    fn leb128_reads() {
        let bytes = [0xe5u8, 0x8e, 0x26, 0x7f, 0x80, 0x7f, 0x02];
        let at = bytes.as_ptr() as usize;
        // SAFETY: the bytes are the array's.
        let mut r = unsafe { Reader::new(at, at + bytes.len()) };
        assert_eq!(r.uleb(), Some(624_485));
        assert_eq!(r.sleb(), Some(-1));
        assert_eq!(r.sleb(), Some(-128));
        assert_eq!(r.uleb(), Some(2));
        assert_eq!(r.uleb(), None, "reads stop at the end");
    }

    #[test]
    fn the_cache_keeps_what_it_is_given() {
        let _serial = SERIAL.lock();
        let addr = 0x1234_5678_9abc_u64;
        assert_eq!(cached(addr), None);
        let rule = Rule::Frame {
            from_rbp: true,
            cfa_off: 16,
            ra_off: -8,
            rbp_off: Some(-16),
        };
        remember(addr, rule);
        assert_eq!(cached(addr), Some(rule));
        assert_eq!(cached(addr + 1), None);
        remember(addr, Rule::End);
        assert_eq!(cached(addr), Some(Rule::End));
        // An address above 2^47 is never cached.
        remember(1 << 50, rule);
        assert_eq!(cached(1 << 50), None);
    }
}

//! The profile as pprof reads it: `profile.proto` (github.com/google/pprof,
//! proto/profile.proto), gzip-wrapped, written with system calls into
//! memory mapped for the purpose (no `malloc`: a dump may run inside a
//! program whose allocator is this one).
//!
//! Sample types `alloc_objects`/count, `alloc_space`/bytes,
//! `inuse_objects`/count and `inuse_space`/bytes (jemalloc's and Go's heap
//! profiles; `inuse_space` is the default), each value the estimate its
//! samples stand for (`weights`). Locations are raw addresses (the frame's
//! return address minus one, inside the call) with the executable mapping
//! of `/proc/self/maps` that holds them, so that `pprof` symbolizes them
//! from the files; `drop_frames` names the allocator's own frames so that
//! the stacks end at the caller of `malloc` (or of Rust's `__rust_alloc`).
//!
//! The gzip member holds the protobuf in stored (uncompressed) deflate
//! blocks: valid gzip every reader takes, with no compressor in the
//! allocator.

use super::symbols::Elf;
use super::table::{self, Stack};
use super::{math, DumpError};
use crate::os;
use crate::sync::plain::AtomicUsize;
use crate::sync::Ordering;
use core::ffi::CStr;

/// Functions pprof drops from every stack, with all they call (a full
/// match of each name, as demangled): the allocation entry points, C's and
/// C++'s and Rust's, and hakmem's own code.
const DROP_FRAMES: &[u8] = b"malloc|calloc|realloc|reallocarray|posix_memalign|aligned_alloc|memalign|valloc|pvalloc|\
free|operator new.*|operator delete.*|__libc_(malloc|calloc|realloc|free|memalign|valloc|pvalloc)|__rust_alloc.*|__rust_realloc|__rg_.*|__rdl_.*|\
hakmem_.*|hakmem_core::.*|hakmem_ffi::.*|<hakmem_core::.*|_Unwind_.*";

/// The most executable mappings listed (the rest: their frames unmapped).
const MAX_MAPPINGS: usize = 2048;
/// The most of `/proc/self/maps` read.
const MAPS_BYTES: usize = 4 << 20;

/// The objects and bytes a sample of `size` bytes taken at a mean
/// interval of `rate` bytes stands for.
pub(super) fn weights(size: usize, rate: usize) -> (f64, f64) {
    let p = math::sample_probability(size, rate);
    (1.0 / p, size as f64 / p)
}

/// Memory mapped for a dump, unmapped when dropped.
struct Mapped {
    base: *mut u8,
    size: usize,
}

impl Mapped {
    fn new(bytes: usize) -> Result<Self, DumpError> {
        let size = bytes.max(1).next_multiple_of(os::page_size());
        let base = os::map(size);
        if base.is_null() {
            Err(DumpError::NoMemory)
        } else {
            Ok(Self { base, size })
        }
    }

    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the whole mapping is ours, readable and writable.
        unsafe { core::slice::from_raw_parts_mut(self.base, self.size) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: mapped by `new`, no longer used.
        unsafe { os::unmap(self.base, self.size) };
    }
}

/// A growable byte buffer in mapped memory.
struct Buf {
    mem: Mapped,
    len: usize,
}

impl Buf {
    fn new() -> Result<Self, DumpError> {
        Ok(Self {
            mem: Mapped::new(1 << 20)?,
            len: 0,
        })
    }

    fn push(&mut self, bytes: &[u8]) -> Result<(), DumpError> {
        if self.len + bytes.len() > self.mem.size {
            let mut bigger = Mapped::new((self.len + bytes.len()) * 2)?;
            bigger.bytes()[..self.len].copy_from_slice(&self.mem.bytes()[..self.len]);
            self.mem = bigger;
        }
        let len = self.len;
        self.mem.bytes()[len..len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
        Ok(())
    }

    fn as_slice(&mut self) -> &[u8] {
        let len = self.len;
        &self.mem.bytes()[..len]
    }
}

/// A protobuf message being encoded on the stack (a sample, a location,
/// a mapping: each well under its size).
struct Msg {
    data: [u8; 1536],
    len: usize,
}

impl Msg {
    fn new() -> Self {
        Self {
            data: [0; 1536],
            len: 0,
        }
    }

    fn byte(&mut self, b: u8) {
        // The largest message, a sample of 64 location ids and 4 values,
        // takes under 700 bytes.
        debug_assert!(self.len < self.data.len(), "protobuf message too long");
        if self.len < self.data.len() {
            self.data[self.len] = b;
            self.len += 1;
        }
    }

    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.byte(v as u8 | 0x80);
            v >>= 7;
        }
        self.byte(v as u8);
    }

    /// A varint field (wire type 0); zero is left out, as proto3 does.
    fn uint(&mut self, field: u32, v: u64) {
        if v != 0 {
            self.varint(u64::from(field) << 3);
            self.varint(v);
        }
    }

    /// A length-delimited field (wire type 2).
    fn bytes(&mut self, field: u32, b: &[u8]) {
        self.varint(u64::from(field) << 3 | 2);
        self.varint(b.len() as u64);
        for &x in b {
            self.byte(x);
        }
    }

    fn as_slice(&self) -> &[u8] {
        &self.data[..self.len]
    }
}

/// Appends field `field` holding message `m` to `out`.
fn put_msg(out: &mut Buf, field: u32, m: &Msg) -> Result<(), DumpError> {
    let mut head = Msg::new();
    head.varint(u64::from(field) << 3 | 2);
    head.varint(m.len as u64);
    out.push(head.as_slice())?;
    out.push(m.as_slice())
}

/// A `ValueType` message: `type` and `unit` as string indexes.
fn value_type(kind: u64, unit: u64) -> Msg {
    let mut m = Msg::new();
    m.uint(1, kind);
    m.uint(2, unit);
    m
}

/// An executable mapping of `/proc/self/maps`.
#[derive(Clone, Copy)]
struct Mapping {
    start: u64,
    end: u64,
    offset: u64,
    /// The file name: its place in the maps text.
    name: (usize, usize),
}

/// Parses a hexadecimal number; None when empty or not hexadecimal.
fn hex(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    let mut v = 0u64;
    for &c in s {
        let d = (c as char).to_digit(16)?;
        v = v << 4 | u64::from(d);
    }
    Some(v)
}

/// Fills `out` with the executable file mappings in `maps` (the text of
/// `/proc/self/maps`); returns how many.
fn parse_maps(maps: &[u8], out: &mut [Mapping]) -> usize {
    let mut n = 0;
    let mut pos = 0;
    for line in maps.split(|&b| b == b'\n') {
        let line_start = pos;
        pos += line.len() + 1;
        let mut fields = line.splitn(6, |&b| b == b' ');
        let (Some(range), Some(perms), Some(offset)) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        let (_dev, _inode) = (fields.next(), fields.next());
        let Some(path) = fields.next() else { continue };
        let lead = path.iter().take_while(|&&b| b == b' ').count();
        let path = &path[lead..];
        if perms.get(2) != Some(&b'x') || path.first() != Some(&b'/') || n == out.len() {
            continue;
        }
        let Some(dash) = range.iter().position(|&b| b == b'-') else {
            continue;
        };
        let (Some(start), Some(end), Some(offset)) = (hex(&range[..dash]), hex(&range[dash + 1..]), hex(offset)) else {
            continue;
        };
        let name_start = line_start + (path.as_ptr() as usize - line.as_ptr() as usize);
        out[n] = Mapping {
            start,
            end,
            offset,
            name: (name_start, path.len()),
        };
        n += 1;
    }
    n
}

/// The CRC-32 (gzip's, reflected 0xEDB88320) table.
const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

fn crc32(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c = CRC_TABLE[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

/// Writes `data` to `fd` as one gzip member of stored deflate blocks.
fn write_gzip(fd: i32, data: &[u8]) -> Result<(), DumpError> {
    let io = DumpError::Io;
    // Magic, deflate, no flags, no time, no extra flags, OS unknown.
    os::write_all(fd, &[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255]).map_err(io)?;
    let mut chunks = data.chunks(0xffff).peekable();
    if chunks.peek().is_none() {
        os::write_all(fd, &[1, 0, 0, 0xff, 0xff]).map_err(io)?;
    }
    while let Some(chunk) = chunks.next() {
        let last = chunks.peek().is_none();
        let len = chunk.len() as u16;
        let head = [last as u8, len as u8, (len >> 8) as u8, !len as u8, (!len >> 8) as u8];
        os::write_all(fd, &head).map_err(io)?;
        os::write_all(fd, chunk).map_err(io)?;
    }
    let mut tail = [0u8; 8];
    tail[..4].copy_from_slice(&crc32(data).to_le_bytes());
    tail[4..].copy_from_slice(&(data.len() as u32).to_le_bytes());
    os::write_all(fd, &tail).map_err(io)
}

/// `path` with `%p` replaced by the process id, NUL-terminated, in `out`;
/// its length (without the NUL), or None when it does not fit or is bad.
fn expand_path(path: &[u8], out: &mut [u8; 4096]) -> Option<usize> {
    if path.is_empty() || path.contains(&0) {
        return None;
    }
    let mut n = 0;
    let mut i = 0;
    while i < path.len() {
        if path[i] == b'%' && path.get(i + 1) == Some(&b'p') {
            let mut digits = [0u8; 20];
            let mut pid = os::process_id() as u32;
            let mut d = 0;
            loop {
                digits[d] = b'0' + (pid % 10) as u8;
                d += 1;
                pid /= 10;
                if pid == 0 {
                    break;
                }
            }
            for k in (0..d).rev() {
                *out.get_mut(n)? = digits[k];
                n += 1;
            }
            i += 2;
        } else {
            *out.get_mut(n)? = path[i];
            n += 1;
            i += 1;
        }
    }
    *out.get_mut(n)? = 0;
    Some(n)
}

/// Writes the live-heap profile to `path` (see the module doc).
pub(super) fn dump(path: &[u8]) -> Result<(), DumpError> {
    let mut name = [0u8; 4096];
    let len = expand_path(path, &mut name).ok_or(DumpError::BadPath)?;
    let c_path = core::ffi::CStr::from_bytes_with_nul(&name[..=len]).map_err(|_| DumpError::BadPath)?;

    // The mappings first, holding nothing.
    let mut maps_mem = Mapped::new(MAPS_BYTES)?;
    let maps_len = os::read_file(c"/proc/self/maps", maps_mem.bytes());
    let mappings_mem = Mapped::new(MAX_MAPPINGS * core::mem::size_of::<Mapping>())?;
    // SAFETY: the mapping holds MAX_MAPPINGS `Mapping`s (zeroed: valid).
    let mappings: &mut [Mapping] = unsafe { core::slice::from_raw_parts_mut(mappings_mem.base.cast(), MAX_MAPPINGS) };
    // A last line cut by the buffer's end is left out.
    let maps_len = maps_mem.bytes()[..maps_len]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let maps = &maps_mem.bytes()[..maps_len];
    let count = parse_maps(maps, mappings);
    let mappings = &mappings[..count];

    let mut out = Buf::new()?;
    let time = os::realtime_ns();
    encode(&mut out, maps, mappings, time)?;

    // A regular file of ours (or none yet) is written beside itself and
    // renamed over it, so a dump that fails (a full disk, a file size
    // limit, a kill) leaves the profile there before whole (found by
    // review: a truncated one). The new file gets the old one's
    // permissions; its name is unique to this dump and opened only if
    // nothing is there (no symbolic link followed). Anything else is
    // written in place, as before: another user's file, a file with hard
    // links, a FIFO, a device, a symbolic link, and a path where the
    // temporary file cannot be made (a directory we cannot write, a name
    // too long).
    let temp_name = os::replaceable(c_path).and_then(|mode| Some((temp_path(&name[..len])?, mode)));
    let temp = temp_name.as_ref().and_then(|(name, mode)| {
        let temp = core::ffi::CStr::from_bytes_with_nul(name.as_bytes()).ok()?;
        Some((temp, os::create_new_file(temp, *mode).ok()?))
    });
    let fd = match temp {
        Some((_, fd)) => fd,
        None => os::create_file(c_path).map_err(DumpError::Io)?,
    };
    let written = write_gzip(fd, out.as_slice());
    let closed = os::close(fd).map_err(DumpError::Io);
    let result = written.and(closed);
    match (temp, result) {
        (Some((temp, _)), Ok(())) => os::rename(temp, c_path)
            .map_err(DumpError::Io)
            .inspect_err(|_| os::remove_file(temp)),
        (Some((temp, _)), Err(e)) => {
            os::remove_file(temp);
            Err(e)
        }
        (None, result) => result,
    }
}

/// `path.<pid>.<n>.tmp`, NUL-terminated, `n` counting this process's
/// dumps (so that two threads dumping at once do not share a name); None
/// when it does not fit in a path.
fn temp_path(path: &[u8]) -> Option<os::StackText<4096>> {
    static DUMPS: AtomicUsize = AtomicUsize::new(0);
    // Relaxed: only the count's uniqueness matters.
    let n = DUMPS.fetch_add(1, Ordering::Relaxed);
    let mut name = os::StackText::<4096>::new();
    name.push(path);
    name.push(b".");
    name.push_usize(os::process_id() as usize);
    name.push(b".");
    name.push_usize(n);
    name.push(b".tmp\0");
    // Cut short, it would have lost its NUL (or more).
    (name.as_bytes().last() == Some(&0) && name.as_bytes().len() < 4096).then_some(name)
}

/// What a dump knows of each executable mapping's file: its symbols,
/// once looked for.
struct FileSymbols {
    elf: Option<Elf>,
    looked: bool,
}

/// Encodes the profile into `out` from a copy of the tables taken under
/// their lock (`table::snapshot`): the fixed strings and the mappings
/// first, then the samples, each new address's location and each new
/// function (named from its file's symbol table, its name appended to the
/// string table) as they come. Nothing here holds the lock: symbol tables
/// are read from files, which takes as long as it takes.
fn encode(out: &mut Buf, maps: &[u8], mappings: &[Mapping], time: u64) -> Result<(), DumpError> {
    let stacks_mem = Mapped::new(table::STACK_SLOTS * core::mem::size_of::<Stack>())?;
    let pool_mem = Mapped::new(table::FRAME_POOL * core::mem::size_of::<usize>())?;
    // SAFETY: the mappings hold STACK_SLOTS stacks and FRAME_POOL frames,
    // zeroed (a valid `Stack`: empty, and valid frames); ours alone.
    let (stacks, pool) = unsafe {
        (
            core::slice::from_raw_parts_mut(stacks_mem.base.cast::<Stack>(), table::STACK_SLOTS),
            core::slice::from_raw_parts_mut(pool_mem.base.cast::<usize>(), table::FRAME_POOL),
        )
    };
    let used = table::snapshot(stacks, pool);
    let pool = &pool[..used];
    // Address -> location id, and symbol name -> function id: open
    // addressing over twice the frames (never full).
    let slots = (used.max(1) * 2).next_power_of_two();
    let ids_mem = Mapped::new(slots * 16)?;
    // SAFETY: the mapping holds `slots` (address, id) pairs, zeroed.
    let ids: &mut [(u64, u64)] = unsafe { core::slice::from_raw_parts_mut(ids_mem.base.cast(), slots) };
    let fns_mem = Mapped::new(slots * 16)?;
    // SAFETY: as above.
    let fns: &mut [(u64, u64)] = unsafe { core::slice::from_raw_parts_mut(fns_mem.base.cast(), slots) };
    let files_mem = Mapped::new(mappings.len().max(1) * core::mem::size_of::<FileSymbols>())?;
    let files_ptr = files_mem.base.cast::<FileSymbols>();
    for i in 0..mappings.len() {
        // SAFETY: slot i of the mapping, sized for every mapping; written
        // before any reference to it is made.
        unsafe {
            files_ptr.add(i).write(FileSymbols {
                elf: None,
                looked: false,
            })
        };
    }
    // SAFETY: every element was initialised just above.
    let files: &mut [FileSymbols] = unsafe { core::slice::from_raw_parts_mut(files_ptr, mappings.len()) };
    let result = encode_with(out, maps, mappings, time, stacks, pool, ids, fns, files);
    for f in files.iter_mut() {
        // Unmaps the file.
        f.elf = None;
    }
    result
}

/// [`encode`] with its tables.
#[allow(clippy::too_many_arguments)]
fn encode_with(
    out: &mut Buf,
    maps: &[u8],
    mappings: &[Mapping],
    time: u64,
    stacks: &[Stack],
    pool: &[usize],
    ids: &mut [(u64, u64)],
    fns: &mut [(u64, u64)],
    files: &mut [FileSymbols],
) -> Result<(), DumpError> {
    // The sample types, the strings they name (0-8: fixed; then the files,
    // then the functions).
    const STRINGS: [&[u8]; 9] = [
        b"",
        b"alloc_objects",
        b"count",
        b"alloc_space",
        b"bytes",
        b"inuse_objects",
        b"inuse_space",
        b"space",
        DROP_FRAMES,
    ];
    for (kind, unit) in [(1, 2), (3, 4), (5, 2), (6, 4)] {
        put_msg(out, 1, &value_type(kind, unit))?;
    }
    for s in STRINGS {
        put_string(out, s)?;
    }
    let name_of = |m: &Mapping| &maps[m.name.0..m.name.0 + m.name.1];
    for (i, m) in mappings.iter().enumerate() {
        put_string(out, name_of(m))?;
        let mut msg = Msg::new();
        msg.uint(1, i as u64 + 1);
        msg.uint(2, m.start);
        msg.uint(3, m.end);
        msg.uint(4, m.offset);
        msg.uint(5, (STRINGS.len() + i) as u64);
        put_msg(out, 3, &msg)?;
    }
    let mut next_string = (STRINGS.len() + mappings.len()) as u64;
    let mut next_location = 1u64;
    let mut next_function = 1u64;

    // The function id for the location at `address` in mapping `m` (1-based;
    // 0: none), its Function and name written when new.
    let mut function_for = |out: &mut Buf, m: usize, address: u64| -> Result<u64, DumpError> {
        if m == 0 {
            return Ok(0);
        }
        let mapping = &mappings[m - 1];
        let file = &mut files[m - 1];
        if !file.looked {
            file.looked = true;
            let mut path = [0u8; 4097];
            let name = name_of(mapping);
            if name.len() < path.len() {
                path[..name.len()].copy_from_slice(name);
                if let Ok(c) = CStr::from_bytes_until_nul(&path) {
                    file.elf = Elf::open(c);
                }
            }
        }
        let Some(elf) = &file.elf else { return Ok(0) };
        let Some(name) = elf.function_at(address - mapping.start + mapping.offset) else {
            return Ok(0);
        };
        // Functions are told apart by where their name lies in the file.
        let (id, new) = location_id(fns, name.as_ptr() as u64, &mut next_function);
        if new {
            put_string(out, name)?;
            let mut f = Msg::new();
            f.uint(1, id);
            f.uint(2, next_string); // name
            f.uint(3, next_string); // system_name
            put_msg(out, 5, &f)?;
            next_string += 1;
        }
        Ok(id)
    };

    for s in stacks.iter().filter(|s| s.hash != 0) {
        let mut locations = Msg::new();
        let frames = pool
            .get(s.frames as usize..s.frames as usize + s.depth as usize)
            .unwrap_or(&[]);
        for &ip in frames {
            let address = (ip as u64).saturating_sub(1);
            let (id, new) = location_id(ids, address, &mut next_location);
            if new {
                let m = mapping_of(mappings, address);
                let function = function_for(out, m as usize, address)?;
                let mut loc = Msg::new();
                loc.uint(1, id);
                loc.uint(2, m);
                loc.uint(3, address);
                if function != 0 {
                    let mut line = Msg::new();
                    line.uint(1, function);
                    loc.bytes(4, line.as_slice());
                }
                put_msg(out, 4, &loc)?;
            }
            locations.varint(id);
        }
        let mut sample = Msg::new();
        sample.bytes(1, locations.as_slice());
        let mut values = Msg::new();
        for v in [s.alloc_objects, s.alloc_bytes, s.inuse_objects, s.inuse_bytes] {
            values.varint((v + 0.5) as i64 as u64);
        }
        sample.bytes(2, values.as_slice());
        put_msg(out, 2, &sample)?;
    }

    let mut tail = Msg::new();
    tail.uint(7, 8); // drop_frames
    tail.uint(9, time); // time_nanos
    tail.bytes(11, value_type(7, 4).as_slice()); // period_type: space/bytes
    tail.uint(12, super::rate() as u64); // period
    tail.uint(14, 6); // default_sample_type: inuse_space
    out.push(tail.as_slice())
}

/// Appends string-table entry `s` (field 6).
fn put_string(out: &mut Buf, s: &[u8]) -> Result<(), DumpError> {
    let mut head = Msg::new();
    head.varint(6 << 3 | 2);
    head.varint(s.len() as u64);
    out.push(head.as_slice())?;
    out.push(s)
}

/// The location id of `address` and whether it is new.
fn location_id(ids: &mut [(u64, u64)], address: u64, next: &mut u64) -> (u64, bool) {
    let mask = ids.len() - 1;
    let mut i = (address.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & mask;
    loop {
        let (a, id) = ids[i];
        if id == 0 {
            let id = *next;
            *next += 1;
            ids[i] = (address, id);
            return (id, true);
        }
        if a == address {
            return (id, false);
        }
        i = (i + 1) & mask;
    }
}

/// The id (1-based) of the mapping holding `address`, 0 for none.
fn mapping_of(mappings: &[Mapping], address: u64) -> u64 {
    mappings
        .iter()
        .position(|m| m.start <= address && address < m.end)
        .map_or(0, |i| i as u64 + 1)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    #[test]
    fn crc32_matches_the_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn maps_lines_give_executable_file_mappings() {
        let maps = b"55d0c0a00000-55d0c0a02000 r--p 00000000 08:01 131 /usr/bin/prog\n\
55d0c0a02000-55d0c0a08000 r-xp 00002000 08:01 131 /usr/bin/prog\n\
7f1e2c000000-7f1e2c021000 rw-p 00000000 00:00 0 \n\
7f1e2d028000-7f1e2d1bd000 r-xp 00028000 08:01 2410                       /usr/lib/x86_64-linux-gnu/libc.so.6\n\
7ffd5b9f0000-7ffd5b9f2000 r-xp 00000000 00:00 0                          [vdso]\n";
        let mut out = [Mapping {
            start: 0,
            end: 0,
            offset: 0,
            name: (0, 0),
        }; 8];
        let n = parse_maps(maps, &mut out);
        assert_eq!(n, 2);
        assert_eq!(
            (out[0].start, out[0].end, out[0].offset),
            (0x55d0c0a02000, 0x55d0c0a08000, 0x2000)
        );
        assert_eq!(&maps[out[0].name.0..out[0].name.0 + out[0].name.1], b"/usr/bin/prog");
        assert_eq!(out[1].offset, 0x28000);
        assert_eq!(
            &maps[out[1].name.0..out[1].name.0 + out[1].name.1],
            b"/usr/lib/x86_64-linux-gnu/libc.so.6"
        );
        assert_eq!(mapping_of(&out[..n], 0x55d0c0a02fff), 1);
        assert_eq!(mapping_of(&out[..n], 0x7f1e2d028000), 2);
        assert_eq!(mapping_of(&out[..n], 0x7f1e2d1bd000), 0);
    }

    #[test]
    fn paths_expand_the_process_id() {
        let mut out = [0u8; 4096];
        let n = expand_path(b"/tmp/heap.%p.pb.gz", &mut out).unwrap();
        let pid = os::process_id();
        let want = std::format!("/tmp/heap.{pid}.pb.gz");
        assert_eq!(&out[..n], want.as_bytes());
        assert_eq!(out[n], 0);
        assert_eq!(expand_path(b"", &mut out), None);
        assert_eq!(expand_path(b"a\0b", &mut out), None);
        assert_eq!(expand_path(&[b'x'; 5000], &mut out), None);
    }
}

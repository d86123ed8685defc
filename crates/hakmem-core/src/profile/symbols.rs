//! Function names for a profile's addresses, from the ELF symbol tables of
//! the mapped files (`.symtab`, else `.dynsym`), read when a profile is
//! written. pprof symbolizes from debug information (DWARF) where the file
//! has it and then replaces these; where it has none — a C program built
//! without `-g`, the system libraries — these names are all there is
//! (`go tool pprof` reads no symbol table itself). Names are written as
//! the file has them (mangled); pprof demangles them.

use crate::os;
use core::ffi::CStr;

const PT_LOAD: u32 = 1;
const SHT_SYMTAB: u32 = 2;
const SHT_DYNSYM: u32 = 11;
const STT_FUNC: u8 = 2;
const STT_GNU_IFUNC: u8 = 10;

/// A mapped ELF file's symbol table.
pub(super) struct Elf {
    file: (*const u8, usize),
    /// The symbols (`Elf64_Sym`, 24 bytes each) and their string table.
    syms: (usize, usize),
    strs: (usize, usize),
    /// The file's loadable segments: (offset, address, size in the file).
    loads: [(u64, u64, u64); 16],
    load_count: usize,
    /// The function symbols sorted by address, in a mapping of their own
    /// (null when it could not be had: each lookup then reads the whole
    /// table, as a dump once did for every address, which took 18 s for a
    /// program of 60 000 functions; found by review).
    index: *mut Function,
    index_len: usize,
    index_bytes: usize,
}

/// A function symbol: its address, its size (at least 1) and its name's
/// offset in the string table.
#[derive(Clone, Copy)]
struct Function {
    value: u64,
    size: u32,
    name: u32,
    /// Its place in the table: of several symbols at one address (aliases)
    /// the first is the name, as the table has them.
    order: u32,
    /// The highest end (address + size) of this symbol and every one
    /// sorted before it: a lookup walking back stops where it falls to
    /// the address sought (a function may hold others in its range, as
    /// hand-written assembly's local symbols are).
    reach: u64,
}

/// The symbol of `index` (sorted by address, `reach` filled) holding
/// `addr` with the highest address, if any.
fn search(index: &[Function], addr: u64) -> Option<&Function> {
    let end = index.partition_point(|f| f.value <= addr);
    index[..end]
        .iter()
        .rev()
        .take_while(|f| f.reach > addr)
        .find(|f| addr - f.value < u64::from(f.size))
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at.checked_add(2)?)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

impl Elf {
    /// Maps and reads file `path`; None when it is not a 64-bit
    /// little-endian ELF file with a symbol table.
    pub(super) fn open(path: &CStr) -> Option<Self> {
        let file = os::map_file(path)?;
        let Some(mut elf) = Self::parse(file) else {
            // SAFETY: mapped above, not used again.
            unsafe { os::unmap_file(file.0, file.1) };
            return None;
        };
        elf.build_index();
        Some(elf)
    }

    /// The function symbol at `i` of the table, if it is one.
    fn function(&self, i: usize) -> Option<Function> {
        let b = self.bytes();
        // In bounds: `parse` checked the table lies in the file.
        let s = self.syms.0 + i * 24;
        let kind = *b.get(s + 4)? & 0xf;
        if kind != STT_FUNC && kind != STT_GNU_IFUNC || u16_at(b, s + 6)? == 0 {
            return None;
        }
        Some(Function {
            value: u64_at(b, s + 8)?,
            size: u64_at(b, s + 16)?.clamp(1, u64::from(u32::MAX)) as u32,
            name: u32_at(b, s)?,
            order: i as u32,
            reach: 0,
        })
    }

    /// Sorts the function symbols into `index` (left null when no memory).
    fn build_index(&mut self) {
        let bytes = (self.syms.1 * core::mem::size_of::<Function>()).next_multiple_of(os::page_size());
        if bytes == 0 {
            return;
        }
        let base = os::map(bytes) as *mut Function;
        if base.is_null() {
            return;
        }
        let mut len = 0;
        for i in 0..self.syms.1 {
            if let Some(f) = self.function(i) {
                // SAFETY: len < syms.1, the entries the mapping holds.
                unsafe { base.add(len).write(f) };
                len += 1;
            }
        }
        // SAFETY: the first len entries were written above.
        let index = unsafe { core::slice::from_raw_parts_mut(base, len) };
        index.sort_unstable_by_key(|f| (f.value, u32::MAX - f.order));
        let mut reach = 0;
        for f in index.iter_mut() {
            reach = reach.max(f.value.saturating_add(u64::from(f.size)));
            f.reach = reach;
        }
        (self.index, self.index_len, self.index_bytes) = (base, len, bytes);
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the file's read-only mapping, alive while self is.
        unsafe { core::slice::from_raw_parts(self.file.0, self.file.1) }
    }

    fn parse(file: (*const u8, usize)) -> Option<Self> {
        // SAFETY: the file's read-only mapping.
        let b = unsafe { core::slice::from_raw_parts(file.0, file.1) };
        if b.get(..6)? != b"\x7fELF\x02\x01" {
            return None;
        }
        let phoff = u64_at(b, 0x20)? as usize;
        let shoff = u64_at(b, 0x28)? as usize;
        let phentsize = u16_at(b, 0x36)? as usize;
        let phnum = u16_at(b, 0x38)? as usize;
        let shentsize = u16_at(b, 0x3a)? as usize;
        let shnum = u16_at(b, 0x3c)? as usize;
        let mut elf = Self {
            file,
            syms: (0, 0),
            strs: (0, 0),
            loads: [(0, 0, 0); 16],
            load_count: 0,
            index: core::ptr::null_mut(),
            index_len: 0,
            index_bytes: 0,
        };
        for i in 0..phnum {
            let ph = phoff.checked_add(i.checked_mul(phentsize)?)?;
            if u32_at(b, ph)? == PT_LOAD && elf.load_count < elf.loads.len() {
                elf.loads[elf.load_count] = (u64_at(b, ph + 8)?, u64_at(b, ph + 16)?, u64_at(b, ph + 32)?);
                elf.load_count += 1;
            }
        }
        let mut chosen = None;
        for i in 0..shnum {
            let sh = shoff.checked_add(i.checked_mul(shentsize)?)?;
            match u32_at(b, sh + 4)? {
                SHT_SYMTAB => {
                    chosen = Some(sh);
                    break;
                }
                SHT_DYNSYM if chosen.is_none() => chosen = Some(sh),
                _ => {}
            }
        }
        let sh = chosen?;
        let (off, size) = (u64_at(b, sh + 0x18)? as usize, u64_at(b, sh + 0x20)? as usize);
        let link = u32_at(b, sh + 0x28)? as usize;
        let str_sh = shoff.checked_add(link.checked_mul(shentsize)?)?;
        let (str_off, str_size) = (u64_at(b, str_sh + 0x18)? as usize, u64_at(b, str_sh + 0x20)? as usize);
        if off.checked_add(size)? > b.len() || str_off.checked_add(str_size)? > b.len() {
            return None;
        }
        elf.syms = (off, size / 24);
        elf.strs = (str_off, str_size);
        Some(elf)
    }

    /// The name of the function holding file offset `offset` (an address
    /// of a mapping turned into an offset in its file), or None.
    pub(super) fn function_at(&self, offset: u64) -> Option<&[u8]> {
        let (seg_off, seg_addr, _) = *self.loads[..self.load_count]
            .iter()
            .find(|&&(o, _, size)| o <= offset && offset - o < size)?;
        let addr = (offset - seg_off).wrapping_add(seg_addr);
        let holds = |f: &Function| f.value <= addr && addr - f.value < u64::from(f.size);
        let mut best: Option<(u64, u32)> = None;
        if self.index.is_null() {
            for f in (0..self.syms.1).filter_map(|i| self.function(i)) {
                if holds(&f) && best.is_none_or(|(v, _)| f.value > v) {
                    best = Some((f.value, f.name));
                }
            }
        } else {
            // SAFETY: build_index wrote index_len entries, alive while self is.
            let index = unsafe { core::slice::from_raw_parts(self.index, self.index_len) };
            best = search(index, addr).map(|f| (f.value, f.name));
        }
        let b = self.bytes();
        let name_at = self.strs.0.checked_add(best?.1 as usize)?;
        let rest = b.get(name_at..self.strs.0 + self.strs.1)?;
        let len = rest.iter().position(|&c| c == 0)?;
        (len > 0).then(|| &rest[..len])
    }
}

impl Drop for Elf {
    fn drop(&mut self) {
        // SAFETY: mapped by `open`, no longer used.
        unsafe { os::unmap_file(self.file.0, self.file.1) };
        if !self.index.is_null() {
            // SAFETY: mapped by `build_index` with this size, no longer used.
            unsafe { os::unmap(self.index.cast(), self.index_bytes) };
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    /// The sorted index names every address of this test program's
    /// functions (start, middle, last byte) as a scan of the whole table
    /// does.
    #[test]
    fn the_index_names_what_the_whole_table_names() {
        let exe = std::env::current_exe().unwrap();
        let path = std::ffi::CString::new(exe.to_str().unwrap()).unwrap();
        let mut elf = Elf::open(&path).expect("the test binary is an ELF file with symbols");
        assert!(
            !elf.index.is_null() && elf.index_len > 1000,
            "{} functions",
            elf.index_len
        );
        let to_offset = |elf: &Elf, addr: u64| {
            elf.loads[..elf.load_count]
                .iter()
                .find(|&&(_, a, size)| a <= addr && addr - a < size)
                .map(|&(o, a, _)| addr - a + o)
        };
        let index = elf.index;
        let mut compared = 0;
        for i in (0..elf.syms.1).step_by(3) {
            let Some(f) = elf.function(i) else { continue };
            for addr in [
                f.value,
                f.value + u64::from(f.size) / 2,
                f.value + u64::from(f.size) - 1,
            ] {
                let Some(offset) = to_offset(&elf, addr) else { continue };
                let by_index = elf.function_at(offset).map(<[u8]>::to_vec);
                elf.index = core::ptr::null_mut();
                let by_scan = elf.function_at(offset).map(<[u8]>::to_vec);
                elf.index = index;
                assert_eq!(by_index, by_scan, "address {addr:#x}");
                compared += 1;
            }
        }
        assert!(compared > 1000, "{compared} addresses");
    }

    /// A function holding 20 others in its range (local symbols of
    /// hand-written assembly) is found past them; between functions and
    /// past the last nothing is; of aliases the first in the table.
    #[test]
    fn a_function_is_found_past_the_ones_it_holds() {
        let f = |value: u64, size: u32, order: u32| Function {
            value,
            size,
            name: order,
            order,
            reach: 0,
        };
        let mut index = std::vec![f(0x1000, 0x10, 0), f(0x2000, 0x100, 1)];
        index.extend((0..20).map(|k| f(0x2010 + k, 1, 2 + k as u32)));
        index.extend([f(0x3000, 0x10, 30), f(0x3000, 0x10, 31), f(0x4000, 0x10, 40)]);
        index.sort_unstable_by_key(|f| (f.value, u32::MAX - f.order));
        let mut reach = 0;
        for f in index.iter_mut() {
            reach = reach.max(f.value + u64::from(f.size));
            f.reach = reach;
        }
        let name = |addr| search(&index, addr).map(|f| f.name);
        assert_eq!(name(0x2080), Some(1), "the outer function, 20 symbols back");
        assert_eq!(name(0x2012), Some(4), "an inner one");
        assert_eq!(name(0x1008), Some(0));
        assert_eq!(name(0x1010), None, "between functions");
        assert_eq!(name(0x500), None, "before the first");
        assert_eq!(name(0x3004), Some(30), "of aliases, the first in the table");
        assert_eq!(name(0x4010), None, "past the last");
    }

    /// This test program's own code is found by name in its file.
    #[test]
    fn a_function_of_this_program_is_named() {
        let mut maps = [0u8; 1 << 16];
        let n = os::read_file(c"/proc/self/maps", &mut maps);
        let here = a_function_of_this_program_is_named as *const () as usize as u64;
        let text = core::str::from_utf8(&maps[..n]).unwrap();
        let line = text
            .lines()
            .find(|l| {
                let mut it = l.split(['-', ' ']);
                let start = u64::from_str_radix(it.next().unwrap(), 16).unwrap();
                let end = u64::from_str_radix(it.next().unwrap(), 16).unwrap();
                start <= here && here < end
            })
            .expect("a mapping holds this code");
        let fields: std::vec::Vec<&str> = line.split_whitespace().collect();
        let start = u64::from_str_radix(fields[0].split('-').next().unwrap(), 16).unwrap();
        let offset = u64::from_str_radix(fields[2], 16).unwrap();
        let path = std::ffi::CString::new(fields[5]).unwrap();
        let elf = Elf::open(&path).expect("the test binary is an ELF file with symbols");
        let name = elf.function_at(here - start + offset).expect("named");
        let name = core::str::from_utf8(name).unwrap();
        assert!(name.contains("a_function_of_this_program_is_named"), "{name}");
    }
}

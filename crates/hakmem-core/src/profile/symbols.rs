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
        let elf = Self::parse(file);
        if elf.is_none() {
            // SAFETY: mapped above, not used again.
            unsafe { os::unmap_file(file.0, file.1) };
        }
        elf
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
        let b = self.bytes();
        let mut best: Option<(u64, u32)> = None;
        for i in 0..self.syms.1 {
            // In bounds: `parse` checked the table lies in the file.
            let s = self.syms.0 + i * 24;
            let info = *b.get(s + 4)?;
            let kind = info & 0xf;
            if kind != STT_FUNC && kind != STT_GNU_IFUNC || u16_at(b, s + 6)? == 0 {
                continue;
            }
            let value = u64_at(b, s + 8)?;
            let size = u64_at(b, s + 16)?.max(1);
            if value <= addr && addr - value < size && best.is_none_or(|(v, _)| value > v) {
                best = Some((value, u32_at(b, s)?));
            }
        }
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
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

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

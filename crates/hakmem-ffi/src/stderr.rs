//! One line formatted on the stack without allocating: diagnostics written
//! to stderr with `write(2)` (the panic handler of abort builds, misused
//! `free_sized`/`operator delete`), and the lines of `malloc_info`. Output
//! longer than the buffer is cut, never an error.

use core::ffi::c_void;

/// Bytes one line may hold; the rest is dropped.
const LINE_MAX: usize = 256;

/// A line being formatted.
pub(crate) struct Line {
    buf: [u8; LINE_MAX],
    len: usize,
}

impl Line {
    pub(crate) const fn new() -> Self {
        Self {
            buf: [0; LINE_MAX],
            len: 0,
        }
    }

    /// Appends `bytes`, as many as fit.
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        let start = self.len;
        if let Some(room) = self.buf.get_mut(start..) {
            let n = room.len().min(bytes.len());
            room.iter_mut().zip(bytes).for_each(|(slot, &b)| *slot = b);
            self.len = start + n;
        }
    }

    /// Appends `value` in decimal.
    pub(crate) fn push_usize(&mut self, mut value: usize) {
        // usize::MAX has 20 decimal digits.
        let mut digits = [0u8; 20];
        let mut start = digits.len();
        for slot in digits.iter_mut().rev() {
            *slot = b'0' + (value % 10) as u8;
            start -= 1;
            value /= 10;
            if value == 0 {
                break;
            }
        }
        self.push(digits.get(start..).unwrap_or_default());
    }

    /// Appends `value` as `0x` and 16 hex digits (hakmem-core's format for
    /// pointers in diagnostics).
    pub(crate) fn push_hex(&mut self, value: usize) {
        let mut digits = [0u8; 18];
        digits[0] = b'0';
        digits[1] = b'x';
        for (i, slot) in digits[2..].iter_mut().enumerate() {
            let nibble = (value >> ((15 - i) * 4)) & 0xf;
            *slot = b"0123456789abcdef"[nibble];
        }
        self.push(&digits);
    }

    /// What has been formatted so far.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or_default()
    }

    /// Writes the line to stderr; errors are ignored (there is nowhere to
    /// report them) and `errno` is left as it was.
    pub(crate) fn write(&self) {
        // SAFETY: __errno_location returns this thread's errno, always valid.
        let saved_errno = unsafe { *libc::__errno_location() };
        let mut rest = self.as_bytes();
        while !rest.is_empty() {
            // SAFETY: rest is a valid byte slice for its whole length.
            let n = unsafe { libc::write(libc::STDERR_FILENO, rest.as_ptr().cast::<c_void>(), rest.len()) };
            let Ok(written) = usize::try_from(n) else { break };
            if written == 0 {
                break;
            }
            rest = rest.get(written..).unwrap_or_default();
        }
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = saved_errno };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_numbers_in_decimal() {
        let mut line = Line::new();
        line.push(b"a ");
        line.push_usize(0);
        line.push(b" ");
        line.push_usize(1234567890);
        line.push(b" ");
        line.push_usize(usize::MAX);
        assert_eq!(line.as_bytes(), b"a 0 1234567890 18446744073709551615");
    }

    #[test]
    fn formats_pointers_in_hex() {
        let mut line = Line::new();
        line.push_hex(0);
        line.push(b" ");
        line.push_hex(0x7f12_3456_789a);
        assert_eq!(line.as_bytes(), b"0x0000000000000000 0x00007f123456789a");
    }

    #[test]
    fn write_leaves_errno_alone() {
        // SAFETY: __errno_location returns this thread's errno, always valid.
        unsafe { *libc::__errno_location() = 4242 };
        Line::new().write();
        let mut line = Line::new();
        line.push(b"hakmem-ffi unit test: stderr line\n");
        line.write();
        // SAFETY: as above.
        assert_eq!(unsafe { *libc::__errno_location() }, 4242);
    }

    #[test]
    fn cuts_what_does_not_fit() {
        let mut line = Line::new();
        for _ in 0..100 {
            line.push(b"0123456789");
        }
        line.push_usize(42);
        assert_eq!(line.as_bytes().len(), LINE_MAX);
        assert!(line.as_bytes().starts_with(b"0123456789"));
    }
}

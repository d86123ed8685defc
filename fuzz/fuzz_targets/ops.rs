//! cargo fuzz target: the input is a program for the op interpreter.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    hakmem_fuzz::run(data);
});

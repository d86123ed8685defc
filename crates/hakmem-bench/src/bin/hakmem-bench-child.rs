//! One measured run for hakmem-bench: see `hakmem_bench::child` for the
//! arguments and the result line. Linked with the workloads and the
//! allocators only, so its peak RSS is theirs.

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = Vec::new();
    for arg in std::env::args_os().skip(1) {
        match arg.into_string() {
            Ok(arg) => args.push(arg),
            Err(arg) => return fail(&format!("argument {arg:?} is not UTF-8")),
        }
    }
    match hakmem_bench::child::parse_args(&args) {
        Ok((job, allocator)) => match hakmem_bench::child::run(&job, allocator) {
            Ok(()) => ExitCode::SUCCESS,
            Err(message) => fail(&message),
        },
        Err(message) => fail(&message),
    }
}

fn fail(message: &str) -> ExitCode {
    eprintln!("hakmem-bench-child: {message}");
    ExitCode::FAILURE
}

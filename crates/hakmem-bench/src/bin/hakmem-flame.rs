//! `hakmem-flame PROFILE [BINARY] [--sample-index INDEX] [-o OUT.svg]`: a
//! heap profile written by hakmem (`HAKMEM_PROFILE`, `hakmem_profile_dump`,
//! `hakmem_core::profile::dump`) drawn as a flame graph (SVG), one box per
//! call stack frame, as wide as the bytes (or objects) allocated below it.
//! The stacks are those `go tool pprof -traces` prints (symbolized from the
//! profile's names and the binaries' debug information); inferno draws
//! them. INDEX is `inuse_space` (the default: the live heap),
//! `inuse_objects`, `alloc_space` or `alloc_objects`.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

struct Args {
    profile: PathBuf,
    binary: Option<PathBuf>,
    index: String,
    out: Option<PathBuf>,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut positional = Vec::new();
    let mut index = "inuse_space".to_string();
    let mut out = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--sample-index" => index = args.next().ok_or("--sample-index needs a value")?,
            "-o" => out = Some(PathBuf::from(args.next().ok_or("-o needs a file")?)),
            "-h" | "--help" => return Err(String::new()),
            _ if a.starts_with('-') => return Err(format!("unknown option {a}")),
            _ => positional.push(PathBuf::from(a)),
        }
    }
    if !matches!(
        index.as_str(),
        "inuse_space" | "inuse_objects" | "alloc_space" | "alloc_objects"
    ) {
        return Err(format!("unknown sample index {index}"));
    }
    let mut positional = positional.into_iter();
    let profile = positional.next().ok_or("no profile given")?;
    let binary = positional.next();
    if positional.next().is_some() {
        return Err("too many arguments".into());
    }
    Ok(Args {
        profile,
        binary,
        index,
        out,
    })
}

/// `go`, on `PATH` or where the Go tarball installs it.
fn go() -> Option<PathBuf> {
    ["go", "/usr/local/go/bin/go"].into_iter().map(PathBuf::from).find(|p| {
        Command::new(p)
            .arg("version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// Folds `go tool pprof -traces` output into inferno's lines: the frames
/// root first, joined by `;`, then the value.
fn fold(traces: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut value: Option<u64> = None;
    let mut frames: Vec<String> = Vec::new();
    let mut flush = |value: &mut Option<u64>, frames: &mut Vec<String>| {
        if let Some(v) = value.take() {
            if v > 0 && !frames.is_empty() {
                frames.reverse();
                lines.push(format!("{} {v}", frames.join(";")));
            }
        }
        frames.clear();
    };
    for line in traces.lines() {
        if line.starts_with("-----------+") {
            flush(&mut value, &mut frames);
            continue;
        }
        // A trace's first line: the value (with a unit letter when the
        // sample type has one), then its innermost frame; the others are
        // indented frames.
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if value.is_none() && indent < 12 {
            let mut parts = trimmed.splitn(2, char::is_whitespace);
            let number = parts.next().unwrap_or("");
            if let Ok(v) = number.trim_end_matches('B').parse::<u64>() {
                value = Some(v);
                if let Some(frame) = parts.next() {
                    frames.push(frame.trim().replace(';', ":"));
                }
            }
        } else if value.is_some() && !trimmed.is_empty() {
            frames.push(trimmed.replace(';', ":"));
        }
    }
    flush(&mut value, &mut frames);
    lines
}

fn run(args: &Args) -> Result<(), String> {
    let go = go().ok_or("go is not installed (hakmem-flame reads profiles with `go tool pprof`)")?;
    let mut pprof = Command::new(go);
    pprof
        .args(["tool", "pprof", "-traces", "-unit=B"])
        .arg(format!("-sample_index={}", args.index));
    if let Some(binary) = &args.binary {
        pprof.arg(binary);
    }
    let output = pprof
        .arg(&args.profile)
        .output()
        .map_err(|e| format!("run go tool pprof: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "go tool pprof failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let lines = fold(&String::from_utf8_lossy(&output.stdout));
    if lines.is_empty() {
        return Err(format!("{}: no samples for {}", args.profile.display(), args.index));
    }
    let mut options = inferno::flamegraph::Options::default();
    options.title = format!("{} ({})", args.profile.display(), args.index);
    options.count_name = if args.index.ends_with("space") {
        "bytes"
    } else {
        "objects"
    }
    .to_string();
    let mut svg = Vec::new();
    inferno::flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), &mut svg)
        .map_err(|e| format!("draw: {e}"))?;
    match &args.out {
        Some(path) => std::fs::write(path, svg).map_err(|e| format!("write {}: {e}", path.display())),
        None => std::io::stdout().write_all(&svg).map_err(|e| format!("write: {e}")),
    }
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("hakmem-flame: {e}");
            }
            eprintln!("usage: hakmem-flame PROFILE [BINARY] [--sample-index inuse_space|inuse_objects|alloc_space|alloc_objects] [-o OUT.svg]");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hakmem-flame: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn traces_fold_root_first() {
        let traces = "File: prof\nType: inuse_space\n\
-----------+-------------------------------------------------------\n\
 22026397B   hold_big\n             main\n             _start\n\
-----------+-------------------------------------------------------\n\
         0   churn\n             main\n\
-----------+-------------------------------------------------------\n\
 11535436B   std::vec::Vec<T>::push; inlined\n             main\n\
-----------+-------------------------------------------------------\n";
        assert_eq!(
            fold(traces),
            vec![
                "_start;main;hold_big 22026397".to_string(),
                "main;std::vec::Vec<T>::push: inlined 11535436".to_string(),
            ]
        );
    }

    #[test]
    fn arguments_parse() {
        let a = parse_args(
            ["p.pb.gz", "bin", "--sample-index", "alloc_space", "-o", "x.svg"]
                .map(String::from)
                .into_iter(),
        )
        .unwrap();
        assert_eq!(a.profile, Path::new("p.pb.gz"));
        assert_eq!(a.binary.as_deref(), Some(Path::new("bin")));
        assert_eq!(
            (a.index.as_str(), a.out.as_deref()),
            ("alloc_space", Some(Path::new("x.svg")))
        );
        assert!(parse_args(["p", "--sample-index", "rss"].map(String::from).into_iter()).is_err());
        assert!(parse_args(std::iter::empty()).is_err());
    }
}

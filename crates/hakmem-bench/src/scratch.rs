//! The tool's scratch folder and the files it writes there: the compiled C
//! benchmark (`preload`) and the embedded mimalloc libraries (`dlmimalloc`).
//!
//! The folder is `hakmem-bench-c/` beside this executable (so each cargo
//! profile has its own), or in the temp dir when that is read-only. Files are
//! written under a name of their own and renamed into place, so two
//! instances (or two test threads) never see each other's half-written
//! files, and a process that already mapped the old file keeps it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The directory of this executable (`target/release` under cargo).
pub fn exe_dir() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    exe.parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| format!("{} has no parent directory", exe.display()))
}

/// The scratch folder for an executable in `exe_dir`, created if needed.
pub fn dir(exe_dir: &Path) -> Result<PathBuf, String> {
    let beside = exe_dir.join("hakmem-bench-c");
    if std::fs::create_dir_all(&beside).is_ok() && !is_read_only(&beside) {
        return Ok(beside);
    }
    let temp = std::env::temp_dir().join("hakmem-bench-c");
    std::fs::create_dir_all(&temp).map_err(|e| format!("cannot create {}: {e}", temp.display()))?;
    Ok(temp)
}

fn is_read_only(dir: &Path) -> bool {
    let probe = dir.join(format!(".probe.{}", unique()));
    let writable = std::fs::write(&probe, b"").is_ok();
    let _ = std::fs::remove_file(&probe);
    !writable
}

/// A suffix no other file being written, by this process or another, has.
pub fn unique() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!("{}.{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Makes `dir/name` hold exactly `bytes` (rewriting it only when it differs)
/// and returns its path.
pub fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> Result<PathBuf, String> {
    let path = dir.join(name);
    if std::fs::read(&path).is_ok_and(|old| old == bytes) {
        return Ok(path);
    }
    let temp = dir.join(format!(".{name}.{}", unique()));
    std::fs::write(&temp, bytes).map_err(|e| format!("cannot write {}: {e}", temp.display()))?;
    std::fs::rename(&temp, &path).map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        format!("cannot move {} to {}: {e}", temp.display(), path.display())
    })?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_file_creates_replaces_and_keeps_identical_files() {
        let dir = std::env::temp_dir().join(format!("hakmem-bench-scratch-{}", unique()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = write_file(&dir, "lib.so", b"one").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"one");
        let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(write_file(&dir, "lib.so", b"one").unwrap(), path);
        assert_eq!(
            std::fs::metadata(&path).unwrap().modified().unwrap(),
            modified,
            "rewritten"
        );
        write_file(&dir, "lib.so", b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        // No temporary files left behind.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unique_suffixes_differ_within_a_process() {
        assert_ne!(unique(), unique());
    }
}

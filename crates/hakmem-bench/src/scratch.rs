//! The tool's scratch folder and the files it writes there: the compiled C
//! benchmark (`preload`) and the embedded mimalloc libraries (`dlmimalloc`),
//! which `--preload` runs and `LD_PRELOAD`s.
//!
//! Nothing is ever run from a place another user could have written to. The
//! folder is `hakmem-bench-c/` beside this executable (so each cargo profile
//! has its own, and the compiled program is reused from run to run) only
//! when it can be trusted: a real directory (not a link), owned by this user
//! and writable by no one else, inside a directory that no one else can
//! write to either (so it cannot be swapped for another), and which is not
//! read-only. Otherwise the folder is a fresh private temporary directory
//! (`tempfile`: a random name, mode 0700), removed when the run ends, and
//! everything is compiled and written anew. There is no fixed path under
//! `/tmp`: one could be created in advance by anyone, with anything in it.
//!
//! A file found in the folder is reused only when it too is a regular file
//! owned by this user and writable by no one else; the files written here
//! are created with mode 0700 whatever the umask. Each is written under a
//! name of its own and renamed into place, so two instances (or two test
//! threads) never see each other's half-written files, and a process that
//! already mapped the old file keeps it.

use std::fs::Metadata;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Mode of the files and the folder written here: this user only.
const PRIVATE_MODE: u32 = 0o700;

/// Permission bits that let someone else change a file or a folder's entries.
const WRITABLE_BY_OTHERS: u32 = 0o022;

/// The directory of this executable (`target/release` under cargo).
pub fn exe_dir() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    exe.parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| format!("{} has no parent directory", exe.display()))
}

/// Where the C program and the libraries go for one invocation. A private
/// folder is removed when this is dropped, so keep it until the last child
/// has exited.
#[derive(Debug)]
pub enum Scratch {
    /// `hakmem-bench-c/` beside the executable, checked to be ours alone.
    Beside(PathBuf),
    /// A fresh private temporary directory.
    Private(tempfile::TempDir),
}

impl Scratch {
    /// The scratch folder for an executable in `exe_dir`: the one beside it
    /// when it can be trusted (created if needed), else a private one.
    pub fn new(exe_dir: &Path) -> Result<Scratch, String> {
        let beside = exe_dir.join("hakmem-bench-c");
        if trusted_dir(exe_dir) {
            // A folder that is already there is checked below, not trusted.
            let _ = std::fs::DirBuilder::new().mode(PRIVATE_MODE).create(&beside);
            if std::fs::symlink_metadata(&beside).is_ok_and(|m| m.is_dir() && ours_alone(&m)) && !is_read_only(&beside)
            {
                return Ok(Scratch::Beside(beside));
            }
        }
        Scratch::private()
    }

    /// A fresh private temporary directory.
    pub fn private() -> Result<Scratch, String> {
        // tempfile gives a folder the umask's mode unless told otherwise.
        tempfile::Builder::new()
            .prefix("hakmem-bench-")
            .permissions(std::fs::Permissions::from_mode(PRIVATE_MODE))
            .tempdir()
            .map(Scratch::Private)
            .map_err(|e| format!("cannot create a private temporary directory: {e}"))
    }

    pub fn path(&self) -> &Path {
        match self {
            Scratch::Beside(path) => path,
            Scratch::Private(dir) => dir.path(),
        }
    }
}

/// Whether `metadata` is of something owned by this user that no one else
/// may change.
fn ours_alone(metadata: &Metadata) -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    metadata.uid() == uid && metadata.mode() & WRITABLE_BY_OTHERS == 0
}

/// Whether `metadata` is of something only this user or root may change.
fn ours_or_roots(metadata: &Metadata) -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    (metadata.uid() == uid || metadata.uid() == 0) && metadata.mode() & WRITABLE_BY_OTHERS == 0
}

/// Whether no one but this user (and root) can rename or replace the
/// entries of `dir`, nor change `dir` itself.
pub fn trusted_dir(dir: &Path) -> bool {
    std::fs::metadata(dir).is_ok_and(|m| m.is_dir() && ours_or_roots(&m))
}

fn is_read_only(dir: &Path) -> bool {
    let probe = dir.join(format!(".probe.{}", unique()));
    let writable = std::fs::write(&probe, b"").is_ok();
    let _ = std::fs::remove_file(&probe);
    !writable
}

/// Whether `path` is a regular file (not a link) owned by this user (or
/// root) that no one else may change: the only kind of file found in the
/// scratch folder that is reused, and the only `libhakmem.so` preloaded.
pub fn trusted_file(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file() && ours_or_roots(&m))
}

/// Makes `path` (which this process just created) ours alone: mode 0700.
pub fn make_private(path: &Path) -> Result<(), String> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(PRIVATE_MODE))
        .map_err(|e| format!("cannot change the mode of {}: {e}", path.display()))
}

/// A suffix no other file being written, by this process or another, has.
pub fn unique() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!("{}.{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Makes `dir/name` hold exactly `bytes` (rewriting it only when it differs
/// or cannot be trusted) and returns its path.
pub fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> Result<PathBuf, String> {
    let path = dir.join(name);
    if trusted_file(&path) && std::fs::read(&path).is_ok_and(|old| old == bytes) {
        return Ok(path);
    }
    let temp = dir.join(format!(".{name}.{}", unique()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(PRIVATE_MODE)
        .open(&temp)
        .and_then(|mut file| file.write_all(bytes));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(format!("cannot write {}: {e}", temp.display()));
    }
    rename(&temp, &path)?;
    Ok(path)
}

/// Moves `temp` (written by this process) over `path`, or removes it.
pub fn rename(temp: &Path, path: &Path) -> Result<(), String> {
    std::fs::rename(temp, path).map_err(|e| {
        let _ = std::fs::remove_file(temp);
        format!("cannot move {} to {}: {e}", temp.display(), path.display())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_file_creates_replaces_and_keeps_identical_files() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        let path = write_file(dir, "lib.so", b"one").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"one");
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, PRIVATE_MODE);
        let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(write_file(dir, "lib.so", b"one").unwrap(), path);
        assert_eq!(
            std::fs::metadata(&path).unwrap().modified().unwrap(),
            modified,
            "rewritten"
        );
        write_file(dir, "lib.so", b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        // No temporary files left behind.
        assert_eq!(std::fs::read_dir(dir).unwrap().count(), 1);
    }

    /// A file with the right contents that someone else could have changed
    /// (here: writable by the group) is replaced, not reused.
    #[test]
    fn write_file_replaces_a_file_others_can_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lib.so");
        std::fs::write(&path, b"one").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(!trusted_file(&path));
        write_file(dir.path(), "lib.so", b"one").unwrap();
        assert!(trusted_file(&path));
        assert_eq!(std::fs::read(&path).unwrap(), b"one");
        // A symbolic link is never a trusted file, whatever it points to.
        let link = dir.path().join("link.so");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(!trusted_file(&link));
    }

    #[test]
    fn the_folder_beside_the_executable_is_used_only_when_ours_alone() {
        let exe_dir = tempfile::tempdir().unwrap();
        let exe_dir = exe_dir.path();
        make_private(exe_dir).unwrap();
        let scratch = Scratch::new(exe_dir).unwrap();
        assert!(matches!(scratch, Scratch::Beside(_)), "{scratch:?}");
        assert_eq!(scratch.path(), exe_dir.join("hakmem-bench-c"));
        assert_eq!(std::fs::metadata(scratch.path()).unwrap().mode() & 0o777, PRIVATE_MODE);

        // Writable by others: someone may have put files there.
        std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let private = Scratch::new(exe_dir).unwrap();
        assert!(matches!(private, Scratch::Private(_)), "{private:?}");
        assert!(!private.path().starts_with(exe_dir));
        assert_eq!(std::fs::metadata(private.path()).unwrap().mode() & 0o777, PRIVATE_MODE);
        let private_path = private.path().to_path_buf();
        drop(private);
        assert!(!private_path.exists(), "a private folder is removed when dropped");

        // A link in its place, even to a good folder.
        std::fs::remove_dir(scratch.path()).unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        make_private(elsewhere.path()).unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), exe_dir.join("hakmem-bench-c")).unwrap();
        assert!(matches!(Scratch::new(exe_dir).unwrap(), Scratch::Private(_)));

        // An executable in a folder others can write to (like /tmp): the
        // folder beside it could be swapped at any time.
        std::fs::remove_file(exe_dir.join("hakmem-bench-c")).unwrap();
        std::fs::set_permissions(exe_dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(matches!(Scratch::new(exe_dir).unwrap(), Scratch::Private(_)));
        assert!(!exe_dir.join("hakmem-bench-c").exists(), "nothing created there");
    }

    #[test]
    fn unique_suffixes_differ_within_a_process() {
        assert_ne!(unique(), unique());
    }
}

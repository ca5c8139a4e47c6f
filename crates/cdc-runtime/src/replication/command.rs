//! Replication commands as text: quoting and the pgoutput options a server
//! version supports.

use std::fmt::Write as _;

use cdc_core::Lsn;

pub use cdc_core::sql::{quote_ident as quote_identifier, quote_literal};

/// The server rejects identifiers and literals with NUL bytes; so do we.
pub(crate) fn check_no_nul(what: &'static str, value: &str) -> Result<(), String> {
    if value.contains('\0') {
        Err(format!("{what} {value:?} contains a NUL byte"))
    } else {
        Ok(())
    }
}

/// A pgoutput option the server version does not support.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UnsupportedOption(String);

impl UnsupportedOption {
    pub(crate) fn new(message: String) -> Self {
        UnsupportedOption(message)
    }
}

/// What `CREATE_REPLICATION_SLOT` does with the snapshot at the slot's
/// consistent point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum SnapshotAction {
    /// Export it; its name is returned and usable by other sessions until the
    /// next command on this connection.
    Export,
    /// Use it in the current transaction of this connection.
    Use,
    /// Do not create one.
    #[default]
    Nothing,
}

/// The first server version with failover slots (`FAILOVER` option,
/// `ALTER_REPLICATION_SLOT`, `sync_replication_slots` on standbys).
pub const FAILOVER_SLOTS_SINCE: u32 = 170_000;

/// `CREATE_REPLICATION_SLOT` for a pgoutput logical slot, in the syntax of the
/// server version (`(SNAPSHOT '...')` from 15, the older keywords before;
/// `FAILOVER true` from 17, which the caller checks).
pub(crate) fn create_slot_command(
    slot: &str,
    temporary: bool,
    snapshot: SnapshotAction,
    failover: bool,
    server_version_num: u32,
) -> String {
    let mut cmd = format!("CREATE_REPLICATION_SLOT {}", quote_identifier(slot));
    if temporary {
        cmd.push_str(" TEMPORARY");
    }
    cmd.push_str(" LOGICAL pgoutput");
    if server_version_num >= 150_000 {
        let s = match snapshot {
            SnapshotAction::Export => "export",
            SnapshotAction::Use => "use",
            SnapshotAction::Nothing => "nothing",
        };
        let _ = write!(cmd, " (SNAPSHOT {}", quote_literal(s));
        if failover {
            cmd.push_str(", FAILOVER true");
        }
        cmd.push(')');
    } else {
        cmd.push_str(match snapshot {
            SnapshotAction::Export => " EXPORT_SNAPSHOT",
            SnapshotAction::Use => " USE_SNAPSHOT",
            SnapshotAction::Nothing => " NOEXPORT_SNAPSHOT",
        });
    }
    cmd
}

/// `ALTER_REPLICATION_SLOT "name" (FAILOVER true|false)` (PostgreSQL 17+).
pub(crate) fn alter_slot_failover_command(slot: &str, failover: bool) -> String {
    format!(
        "ALTER_REPLICATION_SLOT {} (FAILOVER {failover})",
        quote_identifier(slot)
    )
}

/// `DROP_REPLICATION_SLOT`.
pub(crate) fn drop_slot_command(slot: &str, wait: bool) -> String {
    let mut cmd = format!("DROP_REPLICATION_SLOT {}", quote_identifier(slot));
    if wait {
        cmd.push_str(" WAIT");
    }
    cmd
}

/// The highest pgoutput protocol version a server supports: 1 before 14,
/// 2 on 14, 3 on 15, 4 on 16 and later.
pub fn max_proto_version(server_version_num: u32) -> u32 {
    match server_version_num {
        v if v >= 160_000 => 4,
        v if v >= 150_000 => 3,
        v if v >= 140_000 => 2,
        _ => 1,
    }
}

/// The options of `START_REPLICATION ... LOGICAL` for pgoutput.
///
/// Build with [`PgOutputOptions::for_server`], which picks the newest protocol
/// version the server speaks and turns on what that version supports by
/// default (`messages`, and `streaming` of large in-progress transactions from
/// version 2); `binary` and `two_phase` are opt-in because the decoder must
/// be ready for them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgOutputOptions {
    proto_version: u32,
    publications: Vec<String>,
    messages: bool,
    streaming: bool,
    binary: bool,
    two_phase: bool,
    server_version_num: u32,
}

impl PgOutputOptions {
    /// Options for a server of `server_version_num` (e.g. `150004`, from
    /// `SHOW server_version_num`) publishing `publications`.
    pub fn for_server<I, S>(server_version_num: u32, publications: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let proto_version = max_proto_version(server_version_num);
        PgOutputOptions {
            proto_version,
            publications: publications.into_iter().map(Into::into).collect(),
            messages: server_version_num >= 140_000,
            streaming: proto_version >= 2,
            binary: false,
            two_phase: false,
            server_version_num,
        }
    }

    /// Ask for `proto_version` instead of the newest one; it must not exceed
    /// what the server supports. Features the older version lacks are turned off.
    pub fn proto_version(mut self, version: u32) -> Result<Self, UnsupportedOption> {
        let max = max_proto_version(self.server_version_num);
        if version == 0 || version > max {
            return Err(UnsupportedOption(format!(
                "pgoutput proto_version {version} is not supported by server version {}; use 1..={max}",
                self.server_version_num
            )));
        }
        self.proto_version = version;
        self.streaming &= version >= 2;
        self.two_phase &= version >= 3;
        Ok(self)
    }

    /// Receive logical decoding messages (`pg_logical_emit_message`); needs 14+.
    pub fn messages(mut self, on: bool) -> Result<Self, UnsupportedOption> {
        if on && self.server_version_num < 140_000 {
            return Err(UnsupportedOption(
                "the messages option needs PostgreSQL 14 or later".into(),
            ));
        }
        self.messages = on;
        Ok(self)
    }

    /// Stream large in-progress transactions; needs proto_version 2.
    pub fn streaming(mut self, on: bool) -> Result<Self, UnsupportedOption> {
        if on && self.proto_version < 2 {
            return Err(UnsupportedOption(
                "streaming needs pgoutput proto_version 2 (PostgreSQL 14) or later".into(),
            ));
        }
        self.streaming = on;
        Ok(self)
    }

    /// Send values in binary form where the type supports it; needs 14+.
    pub fn binary(mut self, on: bool) -> Result<Self, UnsupportedOption> {
        if on && self.server_version_num < 140_000 {
            return Err(UnsupportedOption(
                "the binary option needs PostgreSQL 14 or later".into(),
            ));
        }
        self.binary = on;
        Ok(self)
    }

    /// Decode prepared transactions at PREPARE time; needs proto_version 3.
    pub fn two_phase(mut self, on: bool) -> Result<Self, UnsupportedOption> {
        if on && self.proto_version < 3 {
            return Err(UnsupportedOption(
                "two_phase needs pgoutput proto_version 3 (PostgreSQL 15) or later".into(),
            ));
        }
        self.two_phase = on;
        Ok(self)
    }

    /// The protocol version that will be requested.
    pub fn get_proto_version(&self) -> u32 {
        self.proto_version
    }

    /// The publications.
    pub fn get_publications(&self) -> &[String] {
        &self.publications
    }

    /// Whether `streaming` is on.
    pub fn get_streaming(&self) -> bool {
        self.streaming
    }

    /// Whether `binary` is on.
    pub fn get_binary(&self) -> bool {
        self.binary
    }

    /// Whether `two_phase` is on.
    pub fn get_two_phase(&self) -> bool {
        self.two_phase
    }

    /// Whether `messages` is on.
    pub fn get_messages(&self) -> bool {
        self.messages
    }

    /// The parenthesised option list, e.g.
    /// `(proto_version '3', publication_names '"a","b"', messages 'true', streaming 'on')`.
    pub fn option_list(&self) -> String {
        let names = self
            .publications
            .iter()
            .map(|p| quote_identifier(p))
            .collect::<Vec<_>>()
            .join(",");
        let mut out = format!(
            "(proto_version {}, publication_names {}",
            quote_literal(&self.proto_version.to_string()),
            quote_literal(&names)
        );
        if self.messages {
            out.push_str(", messages 'true'");
        }
        if self.streaming {
            out.push_str(", streaming 'on'");
        }
        if self.binary {
            out.push_str(", binary 'true'");
        }
        if self.two_phase {
            out.push_str(", two_phase 'on'");
        }
        out.push(')');
        out
    }
}

/// `START_REPLICATION SLOT "slot" LOGICAL X/Y (options)`.
pub(crate) fn start_replication_command(
    slot: &str,
    start: Lsn,
    options: &PgOutputOptions,
) -> String {
    format!(
        "START_REPLICATION SLOT {} LOGICAL {} {}",
        quote_identifier(slot),
        start,
        options.option_list()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_doubles_quotes() {
        assert_eq!(quote_identifier("slot"), r#""slot""#);
        assert_eq!(quote_identifier(r#"a"b"#), r#""a""b""#);
        assert_eq!(quote_identifier(""), r#""""#);
        assert_eq!(quote_literal("it's"), "'it''s'");
        assert_eq!(quote_literal(r"back\slash"), r"'back\slash'");
        assert!(check_no_nul("slot", "a\0b").is_err());
        assert!(check_no_nul("slot", "ab").is_ok());
    }

    #[test]
    fn proto_version_by_server() {
        assert_eq!(max_proto_version(100_023), 1);
        assert_eq!(max_proto_version(130_012), 1);
        assert_eq!(max_proto_version(140_000), 2);
        assert_eq!(max_proto_version(150_004), 3);
        assert_eq!(max_proto_version(160_001), 4);
        assert_eq!(max_proto_version(170_000), 4);
    }

    #[test]
    fn defaults_follow_the_server() {
        let o = PgOutputOptions::for_server(130_000, ["p"]);
        assert_eq!(
            o.option_list(),
            r#"(proto_version '1', publication_names '"p"')"#
        );
        let o = PgOutputOptions::for_server(140_000, ["p"]);
        assert_eq!(
            o.option_list(),
            r#"(proto_version '2', publication_names '"p"', messages 'true', streaming 'on')"#
        );
        let o = PgOutputOptions::for_server(160_000, ["p"]);
        assert_eq!(o.get_proto_version(), 4);
        assert!(o.get_streaming() && o.get_messages() && !o.get_binary() && !o.get_two_phase());
    }

    #[test]
    fn opt_in_features_are_checked_against_the_version() {
        let o = PgOutputOptions::for_server(150_000, ["a", "b"])
            .binary(true)
            .unwrap()
            .two_phase(true)
            .unwrap();
        assert_eq!(
            o.option_list(),
            r#"(proto_version '3', publication_names '"a","b"', messages 'true', streaming 'on', binary 'true', two_phase 'on')"#
        );
        assert!(PgOutputOptions::for_server(140_000, ["p"])
            .two_phase(true)
            .is_err());
        assert!(PgOutputOptions::for_server(130_000, ["p"])
            .binary(true)
            .is_err());
        assert!(PgOutputOptions::for_server(130_000, ["p"])
            .streaming(true)
            .is_err());
        assert!(PgOutputOptions::for_server(150_000, ["p"])
            .proto_version(4)
            .is_err());
        let downgraded = PgOutputOptions::for_server(150_000, ["p"])
            .two_phase(true)
            .unwrap()
            .proto_version(1)
            .unwrap();
        assert!(!downgraded.get_streaming() && !downgraded.get_two_phase());
    }

    #[test]
    fn publication_names_are_quoted_twice() {
        // The literal holds a list of identifiers: "" inside identifiers, '' for the literal.
        let o = PgOutputOptions::for_server(130_000, [r#"we"ird"#, "it's", "a,b"]);
        assert_eq!(
            o.option_list(),
            r#"(proto_version '1', publication_names '"we""ird","it''s","a,b"')"#
        );
    }

    #[test]
    fn commands() {
        let o = PgOutputOptions::for_server(150_000, ["pub"]);
        assert_eq!(
            start_replication_command(r#"s"1"#, Lsn::from_u64(0x16_B374_D848), &o),
            r#"START_REPLICATION SLOT "s""1" LOGICAL 16/B374D848 (proto_version '3', publication_names '"pub"', messages 'true', streaming 'on')"#
        );
        assert_eq!(
            create_slot_command("s", true, SnapshotAction::Nothing, false, 150_000),
            r#"CREATE_REPLICATION_SLOT "s" TEMPORARY LOGICAL pgoutput (SNAPSHOT 'nothing')"#
        );
        assert_eq!(
            create_slot_command("s", false, SnapshotAction::Export, false, 150_000),
            r#"CREATE_REPLICATION_SLOT "s" LOGICAL pgoutput (SNAPSHOT 'export')"#
        );
        assert_eq!(
            create_slot_command("s", false, SnapshotAction::Use, false, 140_000),
            r#"CREATE_REPLICATION_SLOT "s" LOGICAL pgoutput USE_SNAPSHOT"#
        );
        assert_eq!(
            create_slot_command("s", false, SnapshotAction::Nothing, true, 170_000),
            r#"CREATE_REPLICATION_SLOT "s" LOGICAL pgoutput (SNAPSHOT 'nothing', FAILOVER true)"#
        );
        assert_eq!(
            alter_slot_failover_command(r#"s"1"#, true),
            r#"ALTER_REPLICATION_SLOT "s""1" (FAILOVER true)"#
        );
        assert_eq!(
            drop_slot_command("s", true),
            r#"DROP_REPLICATION_SLOT "s" WAIT"#
        );
        assert_eq!(
            drop_slot_command("s", false),
            r#"DROP_REPLICATION_SLOT "s""#
        );
    }
}

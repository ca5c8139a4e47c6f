//! Following the source's schema changes on the target table.
//!
//! Each [`SchemaChangeItem`] becomes `ALTER TABLE` statements run in the
//! write's transaction, in order with the row changes around it. Every step
//! first looks at the target's catalog, so applying a change again (a
//! replay without exactly-once) finds it done and does nothing:
//!
//! | change | on the target |
//! |---|---|
//! | add column | `ADD COLUMN IF NOT EXISTS c <type>`; with DDL capture and a constant default, existing rows get the source's value (`DEFAULT v` then `DROP DEFAULT`) |
//! | drop column | kept (`DROP NOT NULL`) or `DROP COLUMN IF EXISTS`, per [`DroppedColumns`] |
//! | rename column | `RENAME COLUMN` unless the new name is there already |
//! | column type | `ALTER COLUMN c TYPE <type> USING c::<type>` |
//! | rename table | `SET SCHEMA` / `RENAME TO` unless the new name exists |
//! | drop table | nothing: the target table is kept |
//!
//! Types are named on the target with `format_type(oid, typmod)`, which is
//! right for built-in types (their oids are the same on every server);
//! user-defined types (oid >= 16384) have other oids there, so a change
//! involving one stops the sink with the fix.

use super::*;
use crate::event::{ExistingRows, SchemaChange, SchemaChangeItem};
use cdc_core::sql::quote_literal;

/// The first oid PostgreSQL gives to user-defined objects.
const FIRST_NORMAL_OBJECT_ID: u32 = 16_384;

impl PgTableSink {
    /// Applies the schema change `ev` to its target table.
    pub(super) async fn follow_schema_change(&mut self, ev: &ChangeEvent) -> Result<(), SinkError> {
        let (Some(table), Some(change)) = (ev.table.as_deref(), ev.schema_change.as_deref()) else {
            return Err(SinkError::Malformed("schema change without its table"));
        };
        // Statements and keys learnt before the change may no longer fit.
        self.statements.clear();
        self.target_keys.clear();
        let target = self.target(table);
        for item in &change.items {
            self.follow_item(&target, table, change, item).await?;
        }
        Ok(())
    }

    async fn follow_item(
        &self,
        target: &TableName,
        table: &TableSchema,
        change: &SchemaChange,
        item: &SchemaChangeItem,
    ) -> Result<(), SinkError> {
        let client = self.client.as_ref().ok_or(SinkError::Closed)?;
        let quoted = target.quoted();
        let describe = |what: String| format!("{} {what}", item.kind());
        let fail = |what: String, reason: String, fix: String| SinkError::SchemaChange {
            table: format!("{}.{}", target.schema, target.table),
            change: describe(what),
            reason,
            fix,
        };
        // A statement's error: transient ones are retried as such, the
        // others name the change and the fix.
        let run = |sql: String, what: String, fix: String| async move {
            match client.batch_execute(&sql).await {
                Ok(()) => Ok(()),
                Err(e) if crate::pg_error::fault(&e).is_transient() => Err(SinkError::Postgres(e)),
                Err(e) => Err(fail(what, crate::pg_error::describe(&e), fix)),
            }
        };
        match item {
            SchemaChangeItem::RenameTable { schema, table: old } => {
                let from = self.target(&TableSchema {
                    facts: Default::default(),
                    oid: table.oid,
                    schema: schema.clone(),
                    table: old.clone(),
                    columns: Vec::new(),
                });
                if from == *target {
                    return Ok(()); // both names map to the same target
                }
                let what = format!("{} to {}", from.quoted(), quoted);
                let source_new = TableName::new(&*table.schema, &*table.table);
                let source_old = TableName::new(&**schema, &**old);
                if self.options.tables.contains_key(&source_old)
                    || self.options.tables.contains_key(&source_new)
                {
                    return Err(fail(
                        what,
                        "the table is mapped to a target name in the sink's tables".into(),
                        format!(
                            "map {}.{} to the target table in the sink's tables, then restart",
                            table.schema, table.table
                        ),
                    ));
                }
                if self.exists(target).await? {
                    if self.exists(&from).await? {
                        return Err(fail(
                            what,
                            "both the old and the new name exist on the target".into(),
                            "drop or rename one of the two target tables, then restart".into(),
                        ));
                    }
                    return Ok(()); // renamed before
                }
                let mut current = from.clone();
                if from.schema != target.schema {
                    let sql = format!(
                        "ALTER TABLE {} SET SCHEMA {}",
                        current.quoted(),
                        quote_ident(&target.schema)
                    );
                    run(
                        sql,
                        what.clone(),
                        format!(
                            "create schema {} on the target or map the table in the sink's tables",
                            quote_ident(&target.schema)
                        ),
                    )
                    .await?;
                    current.schema.clone_from(&target.schema);
                }
                if current.table != target.table {
                    let sql = format!(
                        "ALTER TABLE {} RENAME TO {}",
                        current.quoted(),
                        quote_ident(&target.table)
                    );
                    run(
                        sql,
                        what,
                        format!("rename the target table to {quoted} by hand, then restart"),
                    )
                    .await?;
                }
                Ok(())
            }
            SchemaChangeItem::AddColumn {
                column,
                existing_rows,
            } => {
                let what = quote_ident(&column.name);
                let ty = self
                    .type_name(column.type_oid, column.type_modifier)
                    .await?
                    .ok_or_else(|| {
                        fail(
                            what.clone(),
                            format!(
                                "its type (oid {}) is user-defined, so its name on the target is unknown",
                                column.type_oid
                            ),
                            format!("add column {what} to {quoted} on the target by hand, then restart"),
                        )
                    })?;
                let sql = match existing_rows {
                    // The rows there already get the value the source's
                    // rows got, stored once as PostgreSQL does for a
                    // constant default; the target keeps no default.
                    ExistingRows::Value(v) => {
                        if self.column(target, &column.name).await?.is_some() {
                            return Ok(()); // added before
                        }
                        format!(
                            "ALTER TABLE {quoted} ADD COLUMN {what} {ty} DEFAULT {}::{ty}; \
                             ALTER TABLE {quoted} ALTER COLUMN {what} DROP DEFAULT",
                            quote_literal(v)
                        )
                    }
                    // NULL, unknown, or values per row that a read of the
                    // table brings next.
                    _ => format!("ALTER TABLE {quoted} ADD COLUMN IF NOT EXISTS {what} {ty}"),
                };
                run(
                    sql,
                    what.clone(),
                    format!("add column {what} {ty} to {quoted} by hand, then restart"),
                )
                .await
            }
            SchemaChangeItem::DropColumn { column } => {
                let what = quote_ident(&column.name);
                match self.options.dropped_columns {
                    DroppedColumns::Drop => {
                        let sql = format!("ALTER TABLE {quoted} DROP COLUMN IF EXISTS {what}");
                        run(
                            sql,
                            what.clone(),
                            format!("drop column {what} of {quoted} by hand (or set dropped_columns = \"keep\"), then restart"),
                        )
                        .await
                    }
                    DroppedColumns::Keep => {
                        if self.column(target, &column.name).await? != Some(true) {
                            return Ok(()); // absent, or already nullable
                        }
                        let sql = format!("ALTER TABLE {quoted} ALTER COLUMN {what} DROP NOT NULL");
                        run(
                            sql,
                            what.clone(),
                            format!("make column {what} of {quoted} nullable or drop it by hand (or set dropped_columns = \"drop\"), then restart"),
                        )
                        .await
                    }
                }
            }
            SchemaChangeItem::RenameColumn { from, to } => {
                let what = format!("{} to {}", quote_ident(from), quote_ident(to));
                let has_from = self.column(target, from).await?.is_some();
                let has_to = self.column(target, to).await?.is_some();
                match (has_from, has_to) {
                    (true, false) => {
                        let sql = format!(
                            "ALTER TABLE {quoted} RENAME COLUMN {} TO {}",
                            quote_ident(from),
                            quote_ident(to)
                        );
                        run(
                            sql,
                            what,
                            format!("rename the column of {quoted} by hand, then restart"),
                        )
                        .await
                    }
                    (false, true) => Ok(()), // renamed before
                    (true, true) => Err(fail(
                        what,
                        "both columns exist on the target".into(),
                        format!("drop or rename one of them in {quoted}, then restart"),
                    )),
                    (false, false) => Err(fail(
                        what,
                        "neither column exists on the target".into(),
                        format!("add column {} to {quoted}, then restart", quote_ident(to)),
                    )),
                }
            }
            SchemaChangeItem::AlterColumnType {
                column,
                to_type_oid,
                to_type_modifier,
                ..
            } => {
                let what = quote_ident(column);
                let ty = self
                    .type_name(*to_type_oid, *to_type_modifier)
                    .await?
                    .ok_or_else(|| {
                        fail(
                            what.clone(),
                            format!("the new type (oid {to_type_oid}) is user-defined, so its name on the target is unknown"),
                            format!("change the type of {what} in {quoted} by hand, then restart"),
                        )
                    })?;
                let sql = format!(
                    "ALTER TABLE {quoted} ALTER COLUMN {what} TYPE {ty} USING {what}::{ty}"
                );
                run(
                    sql,
                    format!("{what} to {ty}"),
                    format!("change the type of {what} in {quoted} to {ty} by hand (ALTER TABLE … USING with a conversion of your own), then restart"),
                )
                .await
            }
            SchemaChangeItem::DropTable => {
                tracing::warn!(table = %quoted, previous = %change.previous.table,
                    "the source table was dropped; the postgres sink keeps the target table");
                Ok(())
            }
        }
    }

    /// Whether `table` exists on the target.
    async fn exists(&self, table: &TableName) -> Result<bool, SinkError> {
        let client = self.client.as_ref().ok_or(SinkError::Closed)?;
        let row = client
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table.quoted()])
            .await?;
        Ok(row.try_get(0)?)
    }

    /// Whether the target table has column `name`: `Some(not null)`, or
    /// `None` when it has none.
    async fn column(&self, table: &TableName, name: &str) -> Result<Option<bool>, SinkError> {
        let client = self.client.as_ref().ok_or(SinkError::Closed)?;
        let row = client
            .query_opt(
                "SELECT attnotnull FROM pg_catalog.pg_attribute \
                 WHERE attrelid = to_regclass($1) AND attname = $2 AND attnum > 0 AND NOT attisdropped",
                &[&table.quoted(), &name],
            )
            .await?;
        match row {
            Some(r) => Ok(Some(r.try_get(0)?)),
            None => Ok(None),
        }
    }

    /// The target's name of a built-in type (`None` for a user-defined one).
    async fn type_name(&self, oid: u32, modifier: i32) -> Result<Option<String>, SinkError> {
        if oid >= FIRST_NORMAL_OBJECT_ID {
            return Ok(None);
        }
        let client = self.client.as_ref().ok_or(SinkError::Closed)?;
        let row = client
            .query_one("SELECT format_type($1::oid, $2::int4)", &[&oid, &modifier])
            .await?;
        Ok(row.try_get(0)?)
    }
}

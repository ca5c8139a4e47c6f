//! [`SchemaChange`]: what changed between two versions of a table's schema,
//! inferred from pgoutput's Relation messages.
//!
//! pgoutput announces a new column set with a Relation message before the
//! first change that uses it; it says nothing of what happened in between.
//! PostgreSQL never reorders columns and appends added ones, so the change
//! is inferred from the two column lists:
//!
//! * a column whose name is in both lists is the same column (its type may
//!   have changed: [`SchemaChangeItem::AlterColumnType`]);
//! * between two such columns, a new name where an old one was is a rename
//!   (a column cannot be added in the middle);
//! * after the last kept column, old and new columns of the same type pair
//!   up in order as renames; the other old ones were dropped, the other new
//!   ones added.
//!
//! This is exact for one DDL statement between two changes of the table.
//! Several statements between the same two changes are summed up: a `DROP
//! COLUMN` of the last column followed by an `ADD COLUMN` of the same type
//! reads as a rename. With DDL capture (see [`crate::ddl`]) each statement
//! brings the table's columns after it, so the same inference runs once per
//! statement, at the statement's LSN.

use std::sync::Arc;

use super::{ColumnSchema, TableSchema};

/// One change of a table's schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaChangeItem {
    /// The table was renamed (or moved to another schema); the event's table
    /// has the new name.
    RenameTable {
        /// The old schema name.
        schema: Arc<str>,
        /// The old table name.
        table: Arc<str>,
    },
    /// A column was added (the event's table has it).
    AddColumn {
        /// The new column.
        column: ColumnSchema,
        /// What the rows that existed before hold in it.
        existing_rows: ExistingRows,
    },
    /// A column was dropped.
    DropColumn {
        /// The dropped column, as it was.
        column: ColumnSchema,
    },
    /// A column was renamed (its type may also have changed).
    RenameColumn {
        /// The old name.
        from: Arc<str>,
        /// The new name.
        to: Arc<str>,
    },
    /// A column's type (or type modifier) changed.
    AlterColumnType {
        /// The column (its new name, if it was renamed too).
        column: Arc<str>,
        /// The old type OID.
        from_type_oid: cdc_core::Oid,
        /// The old type modifier.
        from_type_modifier: i32,
        /// The new type OID.
        to_type_oid: cdc_core::Oid,
        /// The new type modifier.
        to_type_modifier: i32,
    },
    /// The table was dropped (known only with DDL capture).
    DropTable,
}

impl SchemaChangeItem {
    /// A lower-case word for the kind of change: `rename_table`,
    /// `add_column`, `drop_column`, `rename_column`, `alter_column_type`,
    /// `drop_table`.
    pub const fn kind(&self) -> &'static str {
        match self {
            SchemaChangeItem::RenameTable { .. } => "rename_table",
            SchemaChangeItem::AddColumn { .. } => "add_column",
            SchemaChangeItem::DropColumn { .. } => "drop_column",
            SchemaChangeItem::RenameColumn { .. } => "rename_column",
            SchemaChangeItem::AlterColumnType { .. } => "alter_column_type",
            SchemaChangeItem::DropTable => "drop_table",
        }
    }
}

/// What the rows that existed before a column was added hold in it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ExistingRows {
    /// Not known (the change was inferred from a Relation message, without
    /// DDL capture): the PostgreSQL sink leaves `NULL` there.
    #[default]
    Unknown,
    /// `NULL` (the column was added without a default).
    Null,
    /// This value, in PostgreSQL's text form (a constant default, which
    /// PostgreSQL stored once rather than writing every row).
    Value(Arc<str>),
    /// A value of their own (a volatile default or an identity column: the
    /// table was rewritten, and the rewrite is not in the WAL stream). The
    /// job reads the table again.
    PerRow,
}

/// A schema change of one table: the payload of an
/// [`Operation::SchemaChange`](super::Operation::SchemaChange) event, whose
/// `table` is the schema in force from then on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaChange {
    /// The schema the change replaced.
    pub previous: Arc<TableSchema>,
    /// What changed, in the order a follower applies it: table rename,
    /// dropped columns, renamed columns, type changes, added columns.
    pub items: Vec<SchemaChangeItem>,
    /// The DDL statement's text, when DDL capture saw it (see
    /// [`crate::ddl`]); `None` when the change was inferred from pgoutput's
    /// Relation messages.
    pub ddl: Option<Arc<str>>,
}

impl SchemaChange {
    /// The change from `previous` to `current`; `None` when no name or type
    /// differs (a change of the replica identity only, or the same schema).
    pub fn between(previous: &Arc<TableSchema>, current: &TableSchema) -> Option<Self> {
        let items = diff(previous, current);
        (!items.is_empty()).then(|| SchemaChange {
            previous: previous.clone(),
            items,
            ddl: None,
        })
    }
}

/// The items that turn `old` into `new`.
fn diff(old: &TableSchema, new: &TableSchema) -> Vec<SchemaChangeItem> {
    let mut renames_table = Vec::new();
    if old.schema != new.schema || old.table != new.table {
        renames_table.push(SchemaChangeItem::RenameTable {
            schema: old.schema.clone(),
            table: old.table.clone(),
        });
    }
    // Columns kept under their name, in increasing positions on both sides.
    let mut anchors: Vec<(usize, usize)> = Vec::new();
    let mut next_old = 0;
    for (j, col) in new.columns.iter().enumerate() {
        let found = old
            .columns
            .iter()
            .enumerate()
            .skip(next_old)
            .find(|(_, o)| o.name == col.name)
            .map(|(i, _)| i);
        if let Some(i) = found {
            anchors.push((i, j));
            next_old = i + 1;
        }
    }
    let mut pairs: Vec<(usize, usize)> = anchors.clone();
    let mut added = Vec::new();
    // The gaps between anchors, and after the last one.
    let mut prev = (0usize, 0usize);
    let bounds = anchors
        .iter()
        .copied()
        .map(Some)
        .chain(std::iter::once(None));
    for bound in bounds {
        let (old_end, new_end) = bound.unwrap_or((old.columns.len(), new.columns.len()));
        let trailing = bound.is_none();
        let mut olds: Vec<usize> = (prev.0..old_end).collect();
        for j in prev.1..new_end {
            let Some(new_col) = new.columns.get(j) else {
                continue;
            };
            let same_type = olds.iter().position(|&i| {
                old.columns
                    .get(i)
                    .is_some_and(|o| o.type_oid == new_col.type_oid)
            });
            // In the middle, a new name can only be a rename; at the end it
            // is one only when a dropped-looking column of its type is left.
            let pick = match (same_type, trailing) {
                (Some(p), _) => Some(p),
                (None, false) if !olds.is_empty() => Some(0),
                _ => None,
            };
            match pick {
                Some(p) => {
                    // Keep order: the old columns before the one taken
                    // cannot pair with later new ones.
                    let i = olds.remove(p);
                    olds.retain(|&o| o > i);
                    pairs.push((i, j));
                }
                None => added.push(j),
            }
        }
        if let Some((o, n)) = bound {
            prev = (o + 1, n + 1);
        }
    }
    pairs.sort_unstable();
    let mut dropped = Vec::new();
    let mut renamed = Vec::new();
    let mut retyped = Vec::new();
    let mut paired = pairs.iter().peekable();
    for (i, o) in old.columns.iter().enumerate() {
        match paired.peek() {
            Some(&&(pi, pj)) if pi == i => {
                paired.next();
                let Some(n) = new.columns.get(pj) else {
                    continue;
                };
                if n.name != o.name {
                    renamed.push(SchemaChangeItem::RenameColumn {
                        from: o.name.clone(),
                        to: n.name.clone(),
                    });
                }
                if n.type_oid != o.type_oid || n.type_modifier != o.type_modifier {
                    retyped.push(SchemaChangeItem::AlterColumnType {
                        column: n.name.clone(),
                        from_type_oid: o.type_oid,
                        from_type_modifier: o.type_modifier,
                        to_type_oid: n.type_oid,
                        to_type_modifier: n.type_modifier,
                    });
                }
            }
            _ => dropped.push(SchemaChangeItem::DropColumn { column: o.clone() }),
        }
    }
    added.sort_unstable();
    let added = added.into_iter().filter_map(|j| {
        new.columns.get(j).map(|c| SchemaChangeItem::AddColumn {
            column: c.clone(),
            existing_rows: ExistingRows::Unknown,
        })
    });
    renames_table
        .into_iter()
        .chain(dropped)
        .chain(renamed)
        .chain(retyped)
        .chain(added)
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn col(name: &str, type_oid: u32) -> ColumnSchema {
        ColumnSchema {
            name: name.into(),
            type_oid,
            type_modifier: -1,
            is_key: name == "id",
        }
    }

    fn table(name: &str, cols: &[(&str, u32)]) -> TableSchema {
        TableSchema {
            facts: Default::default(),
            oid: 1,
            schema: "public".into(),
            table: name.into(),
            columns: cols.iter().map(|&(n, t)| col(n, t)).collect(),
        }
    }

    fn kinds(items: &[SchemaChangeItem]) -> Vec<String> {
        items
            .iter()
            .map(|i| match i {
                SchemaChangeItem::RenameTable { table, .. } => format!("rename_table {table}"),
                SchemaChangeItem::AddColumn { column, .. } => format!("add {}", column.name),
                SchemaChangeItem::DropColumn { column } => format!("drop {}", column.name),
                SchemaChangeItem::RenameColumn { from, to } => format!("rename {from}->{to}"),
                SchemaChangeItem::AlterColumnType {
                    column,
                    to_type_oid,
                    ..
                } => format!("type {column} {to_type_oid}"),
                SchemaChangeItem::DropTable => "drop_table".into(),
            })
            .collect()
    }

    #[test]
    fn single_statements_are_recognised() {
        let t = table("t", &[("id", 23), ("a", 25), ("b", 23)]);
        let cases: &[(TableSchema, &[&str])] = &[
            (t.clone(), &[]),
            (
                table("t", &[("id", 23), ("a", 25), ("b", 23), ("c", 25)]),
                &["add c"],
            ),
            (table("t", &[("id", 23), ("b", 23)]), &["drop a"]),
            (table("t", &[("id", 23), ("a", 25)]), &["drop b"]),
            (
                table("t", &[("id", 23), ("x", 25), ("b", 23)]),
                &["rename a->x"],
            ),
            (
                table("t", &[("id", 23), ("a", 25), ("y", 23)]),
                &["rename b->y"],
            ),
            (
                table("t", &[("id", 23), ("a", 25), ("b", 20)]),
                &["type b 20"],
            ),
            (
                table("u", &[("id", 23), ("a", 25), ("b", 23)]),
                &["rename_table t"],
            ),
        ];
        for (new, want) in cases {
            assert_eq!(kinds(&diff(&t, new)), *want, "{new:?}");
        }
    }

    #[test]
    fn several_statements_are_summed_up() {
        let t = table("t", &[("id", 23), ("a", 25), ("b", 23)]);
        // DROP a, ADD c int4: b keeps its name, so c is added.
        let new = table("t", &[("id", 23), ("b", 23), ("c", 23)]);
        assert_eq!(kinds(&diff(&t, &new)), ["drop a", "add c"]);
        // DROP b, ADD c text: no int4 left to rename, so drop and add.
        let new = table("t", &[("id", 23), ("a", 25), ("c", 25)]);
        assert_eq!(kinds(&diff(&t, &new)), ["drop b", "add c"]);
        // RENAME a TO x, ALTER x TYPE int8 between kept columns.
        let new = table("t", &[("id", 23), ("x", 20), ("b", 23)]);
        assert_eq!(kinds(&diff(&t, &new)), ["rename a->x", "type x 20"]);
    }
}

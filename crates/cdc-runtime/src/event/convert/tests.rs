//! Tests of the event converter.

use cdc_core::pgoutput::{
    Column, Delete, Insert, OldTuple, Relation, ReplicaIdentity, Truncate, Update,
};
use cdc_core::{decode_text, types, TupleData, TupleValue, TxnBegin, TxnCommit, TxnKind, Value};

use super::*;
use crate::event::SchemaChangeItem;

fn relation(cache: &mut RelationCache, oid: Oid, name: &str) -> Arc<Relation<'static>> {
    cache.insert_relation(Relation {
        xid: None,
        oid,
        namespace: "public".into(),
        name: name.to_owned().into(),
        replica_identity: ReplicaIdentity::Default,
        columns: vec![
            Column {
                flags: 1,
                name: "id".into(),
                type_oid: types::INT8,
                type_modifier: -1,
            },
            Column {
                flags: 0,
                name: "doc".into(),
                type_oid: types::TEXT,
                type_modifier: -1,
            },
        ],
    })
}

fn tuple(values: &[TupleValue<'_>]) -> TupleData<'static> {
    TupleData::from_values(values).unwrap()
}

fn begin(xid: Xid) -> TxnEvent<'static> {
    TxnEvent::Begin(TxnBegin {
        xid,
        final_lsn: Lsn::from_u64(0x500),
        timestamp: PgTimestamp::from_pg_micros(1_000_000),
        kind: TxnKind::Plain,
    })
}

fn commit(xid: Xid) -> TxnEvent<'static> {
    TxnEvent::Commit(TxnCommit {
        xid,
        commit_lsn: Lsn::from_u64(0x500),
        end_lsn: Lsn::from_u64(0x530),
        commit_time: PgTimestamp::from_pg_micros(1_000_000),
    })
}

#[test]
fn transaction_of_every_change_kind() {
    let mut cache = RelationCache::new();
    let a = relation(&mut cache, 10, "a");
    relation(&mut cache, 11, "b");
    let mut conv = EventConverter::new("db", "slot");
    let mut out = Vec::new();
    let events = [
        begin(9),
        TxnEvent::Change(Change::Insert(
            a.clone(),
            Insert {
                xid: None,
                relation: 10,
                new: tuple(&[TupleValue::Text(b"1"), TupleValue::Binary(b"hi")]),
            },
        )),
        TxnEvent::Change(Change::Update(
            a.clone(),
            Update {
                xid: None,
                relation: 10,
                old: Some(OldTuple::Key(tuple(&[
                    TupleValue::Text(b"1"),
                    TupleValue::Null,
                ]))),
                new: tuple(&[TupleValue::Text(b"2"), TupleValue::UnchangedToast]),
            },
        )),
        TxnEvent::Change(Change::Delete(
            a.clone(),
            Delete {
                xid: None,
                relation: 10,
                old: OldTuple::Key(tuple(&[TupleValue::Text(b"2"), TupleValue::Null])),
            },
        )),
        TxnEvent::Change(Change::Truncate(Truncate {
            xid: None,
            options: 0,
            relations: vec![10, 11],
        })),
        commit(9),
    ];
    let mut n = 0;
    for (i, ev) in events.iter().enumerate() {
        n += conv
            .handle(ev, &cache, Some(Lsn::from_u64(0x400 + i as u64)), &mut out)
            .unwrap();
    }
    assert_eq!(n, 5);
    let ops: Vec<Operation> = out.iter().map(|e| e.op).collect();
    assert_eq!(
        ops,
        [
            Operation::Create,
            Operation::Update,
            Operation::Delete,
            Operation::Truncate,
            Operation::Truncate
        ]
    );
    let idx: Vec<u32> = out.iter().map(|e| e.index).collect();
    assert_eq!(idx, [0, 1, 2, 3, 4]);
    assert_eq!(
        out[0].after_values().as_deref(),
        Some(&[Value::Int8(1), Value::Text("hi".into())][..])
    );
    assert_eq!(
        out[1].before_values().as_deref(),
        Some(&[Value::Int8(1), Value::Null][..])
    );
    assert_eq!(
        out[1].after_values().as_deref(),
        Some(&[Value::Int8(2), Value::UnchangedToast][..])
    );
    assert_eq!(out[3].table_name(), Some("a"));
    assert_eq!(out[4].table_name(), Some("b"));
    assert!(out
        .iter()
        .all(|e| e.source.commit_lsn == Lsn::from_u64(0x500) && e.source.xid == 9));
    assert_eq!(out[0].source.lsn, Lsn::from_u64(0x401));
    // One schema shared by every event of a table.
    assert!(Arc::ptr_eq(
        out[0].table.as_ref().unwrap(),
        out[2].table.as_ref().unwrap()
    ));
    let names: Vec<&str> = out[0].after_columns().map(|c| &*c.schema.name).collect();
    assert_eq!(names, ["id", "doc"]);
    assert_eq!(conv.open_transaction(), None);

    // The next transaction numbers from 0 again.
    out.clear();
    conv.handle(&begin(10), &cache, None, &mut out).unwrap();
    conv.handle(&events[1], &cache, None, &mut out).unwrap();
    assert_eq!(out[0].index, 0);
    assert_eq!(
        out[0].source.lsn,
        Lsn::from_u64(0x500),
        "commit LSN when the position is unknown"
    );
}

#[test]
fn typed_errors() {
    let mut cache = RelationCache::new();
    let a = relation(&mut cache, 10, "a");
    let mut conv = EventConverter::new("db", "slot");
    let mut out = Vec::new();
    let insert = |t: TupleData<'static>| {
        TxnEvent::Change(Change::Insert(
            a.clone(),
            Insert {
                xid: None,
                relation: 10,
                new: t,
            },
        ))
    };
    let good = insert(tuple(&[TupleValue::Text(b"1"), TupleValue::Null]));
    assert!(matches!(
        conv.handle(&good, &cache, None, &mut out),
        Err(ConvertError::NoTransaction { what: "Insert" })
    ));
    conv.handle(&begin(1), &cache, None, &mut out).unwrap();
    assert!(matches!(
        conv.handle(&begin(2), &cache, None, &mut out),
        Err(ConvertError::NestedBegin {
            xid: 2,
            open_xid: 1
        })
    ));
    let short = insert(tuple(&[TupleValue::Text(b"1")]));
    assert!(matches!(
        conv.handle(&short, &cache, None, &mut out),
        Err(ConvertError::ColumnCount {
            expected: 2,
            got: 1,
            ..
        })
    ));
    let bad = insert(tuple(&[TupleValue::Text(b"one"), TupleValue::Null]));
    match conv.handle(&bad, &cache, None, &mut out) {
        Err(ConvertError::Value { column, .. }) => assert_eq!(&*column, "id"),
        other => panic!("{other:?}"),
    }
    // Validation gives the errors decoding gives (it builds no value).
    let cases: [(&[u8], &[u8], &str, Oid); 5] = [
        (b"99999999999999999999", b"", "id", types::INT8),
        (b"9223372036854775808", b"", "id", types::INT8),
        (b"-", b"", "id", types::INT8),
        (b"1", b"caf\xc3", "doc", types::TEXT),
        (b"1", b"ok \xff\xfe", "doc", types::TEXT),
    ];
    for (id, doc, bad_column, oid) in cases {
        let bad = insert(tuple(&[TupleValue::Text(id), TupleValue::Text(doc)]));
        let raw = if bad_column == "id" { id } else { doc };
        let want = decode_text(oid, raw).unwrap_err();
        match conv.handle(&bad, &cache, None, &mut out) {
            Err(ConvertError::Value { column, source, .. }) => {
                assert_eq!(&*column, bad_column);
                assert_eq!(source, want, "{raw:?}");
            }
            other => panic!("{raw:?}: {other:?}"),
        }
    }
    let trunc = TxnEvent::Change(Change::Truncate(Truncate {
        xid: None,
        options: 0,
        relations: vec![99],
    }));
    assert!(matches!(
        conv.handle(&trunc, &cache, None, &mut out),
        Err(ConvertError::UnknownRelation { oid: 99 })
    ));
    assert!(out.is_empty());
}

#[test]
fn new_relation_message_rebuilds_the_schema() {
    let mut cache = RelationCache::new();
    let a = relation(&mut cache, 10, "a");
    let mut conv = EventConverter::new("db", "slot");
    let mut out = Vec::new();
    conv.handle(&begin(1), &cache, None, &mut out).unwrap();
    let ins = |r: &Arc<Relation<'static>>| {
        TxnEvent::Change(Change::Insert(
            r.clone(),
            Insert {
                xid: None,
                relation: 10,
                new: tuple(&[TupleValue::Text(b"1"), TupleValue::Null]),
            },
        ))
    };
    conv.handle(&ins(&a), &cache, None, &mut out).unwrap();
    let renamed = relation(&mut cache, 10, "a2");
    conv.handle(&ins(&renamed), &cache, None, &mut out).unwrap();
    assert_eq!(out[0].table_name(), Some("a"));
    assert_eq!(out[1].table_name(), Some("a2"));
}

#[test]
fn a_committed_prepared_transaction_converts_like_any_other() {
    let mut cache = RelationCache::new();
    let a = relation(&mut cache, 10, "a");
    let mut conv = EventConverter::new("db", "slot");
    let mut out = Vec::new();
    // As the assembler releases it at Commit Prepared: the commit's position.
    let begin = TxnEvent::Begin(TxnBegin {
        xid: 9,
        final_lsn: Lsn::from_u64(0x500),
        timestamp: PgTimestamp::from_pg_micros(1_000_000),
        kind: TxnKind::Prepared,
    });
    let insert = TxnEvent::Change(Change::Insert(
        a,
        Insert {
            xid: None,
            relation: 10,
            new: tuple(&[TupleValue::Text(b"1"), TupleValue::Null]),
        },
    ));
    for e in [begin, insert, commit(9)] {
        conv.handle(&e, &cache, None, &mut out).unwrap();
    }
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].source.commit_lsn, Lsn::from_u64(0x500));
    // Decisions the assembler had nothing of: no events.
    let rollback = TxnEvent::RollbackPrepared(cdc_core::pgoutput::RollbackPrepared {
        flags: 0,
        prepare_end_lsn: Lsn::from_u64(0x600),
        rollback_end_lsn: Lsn::from_u64(0x700),
        prepare_time: PgTimestamp::EPOCH,
        rollback_time: PgTimestamp::EPOCH,
        xid: 10,
        gid: "g".into(),
    });
    assert_eq!(conv.handle(&rollback, &cache, None, &mut out).unwrap(), 0);
    assert_eq!(out.len(), 1);
}

/// A relation `t` (oid 20) with the given `(name, type)` columns, `id` the key.
fn relation_with(
    cache: &mut RelationCache,
    name: &str,
    cols: &[(&str, Oid)],
) -> Arc<Relation<'static>> {
    cache.insert_relation(Relation {
        xid: None,
        oid: 20,
        namespace: "public".into(),
        name: name.to_owned().into(),
        replica_identity: ReplicaIdentity::Default,
        columns: cols
            .iter()
            .map(|&(n, t)| Column {
                flags: u8::from(n == "id"),
                name: n.to_owned().into(),
                type_oid: t,
                type_modifier: -1,
            })
            .collect(),
    })
}

fn insert_of(rel: &Arc<Relation<'static>>, values: &[&'static [u8]]) -> TxnEvent<'static> {
    let vals: Vec<TupleValue<'static>> = values.iter().map(|v| TupleValue::Text(v)).collect();
    TxnEvent::Change(Change::Insert(
        rel.clone(),
        Insert {
            xid: None,
            relation: rel.oid,
            new: tuple(&vals),
        },
    ))
}

fn names(ev: &ChangeEvent) -> Vec<String> {
    ev.table
        .as_ref()
        .map(|t| t.columns.iter().map(|c| c.name.to_string()).collect())
        .unwrap_or_default()
}

#[test]
fn a_schema_change_between_changes_of_one_transaction_comes_first() {
    let mut cache = RelationCache::new();
    let v1 = relation_with(&mut cache, "t", &[("id", types::INT4), ("a", types::TEXT)]);
    let v2 = relation_with(
        &mut cache,
        "t",
        &[("id", types::INT4), ("a", types::TEXT), ("b", types::INT8)],
    );
    let mut conv = EventConverter::new("db", "slot");
    let mut out = Vec::new();
    for ev in [
        begin(9),
        insert_of(&v1, &[b"1", b"x"]),
        insert_of(&v2, &[b"2", b"y", b"7"]),
        insert_of(&v2, &[b"3", b"z", b"8"]),
        commit(9),
    ] {
        conv.handle(&ev, &cache, None, &mut out).unwrap();
    }
    let ops: Vec<Operation> = out.iter().map(|e| e.op).collect();
    assert_eq!(
        ops,
        [
            Operation::Create,
            Operation::SchemaChange,
            Operation::Create,
            Operation::Create
        ]
    );
    assert_eq!(
        out.iter().map(|e| e.index).collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
    let change = out[1].schema_change.as_ref().unwrap();
    assert_eq!(names(&out[1]), ["id", "a", "b"]);
    assert_eq!(change.previous.columns.len(), 2);
    assert!(matches!(
        &change.items[..],
        [SchemaChangeItem::AddColumn { column, .. }] if &*column.name == "b"
    ));
    assert_eq!(names(&out[0]), ["id", "a"]);
    assert_eq!(
        out[2].after_values().as_deref(),
        Some(&[Value::Int4(2), Value::Text("y".into()), Value::Int8(7)][..])
    );
    let versions = conv.relation_versions();
    assert_eq!(versions.len(), 1);
    assert_eq!(versions[0].columns.len(), 3);
}

#[test]
fn a_replayed_transaction_compares_with_the_schema_before_it() {
    let mut cache = RelationCache::new();
    let v1 = relation_with(&mut cache, "t", &[("id", types::INT4), ("a", types::TEXT)]);
    let v2 = relation_with(&mut cache, "t", &[("id", types::INT4), ("b", types::TEXT)]);
    let mut conv = EventConverter::new("db", "slot");
    let mut out = Vec::new();
    for ev in [begin(1), insert_of(&v1, &[b"1", b"x"]), commit(1)] {
        conv.handle(&ev, &cache, None, &mut out).unwrap();
    }
    // Transaction 2 renames a column, then the connection drops.
    for ev in [begin(2), insert_of(&v2, &[b"2", b"y"])] {
        conv.handle(&ev, &cache, None, &mut out).unwrap();
    }
    assert_eq!(out.len(), 3);
    conv.reset();
    out.clear();
    // The server sends it again, announcing the old schema first.
    let v1_again = relation_with(&mut cache, "t", &[("id", types::INT4), ("a", types::TEXT)]);
    let v2_again = relation_with(&mut cache, "t", &[("id", types::INT4), ("b", types::TEXT)]);
    for ev in [
        begin(2),
        insert_of(&v1_again, &[b"0", b"w"]),
        insert_of(&v2_again, &[b"2", b"y"]),
        commit(2),
    ] {
        conv.handle(&ev, &cache, None, &mut out).unwrap();
    }
    let ops: Vec<Operation> = out.iter().map(|e| e.op).collect();
    assert_eq!(
        ops,
        [
            Operation::Create,
            Operation::SchemaChange,
            Operation::Create
        ],
        "no change back to the old schema, one rename"
    );
    assert!(matches!(
        &out[1].schema_change.as_ref().unwrap().items[..],
        [SchemaChangeItem::RenameColumn { from, to }] if &**from == "a" && &**to == "b"
    ));
}

#[test]
fn restored_versions_decide_what_a_restart_reports() {
    let mut cache = RelationCache::new();
    let v1 = relation_with(&mut cache, "t", &[("id", types::INT4), ("a", types::TEXT)]);
    let mut first = EventConverter::new("db", "slot");
    let mut out = Vec::new();
    for ev in [begin(1), insert_of(&v1, &[b"1", b"x"]), commit(1)] {
        first
            .handle(&ev, &cache, Some(Lsn::from_u64(0x42)), &mut out)
            .unwrap();
    }
    let saved = first.relation_versions();
    assert_eq!(saved[0].lsn, Lsn::from_u64(0x42));

    // A new process: the same schema again is no change, a new one is.
    for (cols, expect) in [
        (&[("id", types::INT4), ("a", types::TEXT)][..], 1),
        (&[("id", types::INT4), ("a", types::INT8)][..], 2),
    ] {
        let mut cache = RelationCache::new();
        let rel = relation_with(&mut cache, "t", cols);
        let mut conv = EventConverter::new("db", "slot");
        conv.restore_relations(&saved);
        let mut out = Vec::new();
        for ev in [begin(2), insert_of(&rel, &[b"2", b"5"]), commit(2)] {
            conv.handle(&ev, &cache, None, &mut out).unwrap();
        }
        assert_eq!(out.len(), expect, "{cols:?}");
    }
    // Without restored versions a first sight is no change.
    let mut conv = EventConverter::new("db", "slot");
    let mut out = Vec::new();
    let rel = relation_with(&mut cache, "t", &[("id", types::INT4), ("a", types::INT8)]);
    for ev in [begin(2), insert_of(&rel, &[b"2", b"5"]), commit(2)] {
        conv.handle(&ev, &cache, None, &mut out).unwrap();
    }
    assert_eq!(out.len(), 1);
}

/// A DDL message's content for table 20 `t` with `cols` (name, type,
/// existing rows as the trigger reports them).
fn ddl_of(name: &str, cols: &[(&str, Oid, &str)]) -> crate::ddl::CapturedDdl {
    let columns: Vec<String> = cols
        .iter()
        .map(|&(n, t, existing)| {
            let (has_missing, missing, per_row) = match existing {
                "null" => ("false", "null".to_owned(), "false"),
                "per_row" => ("false", "null".to_owned(), "true"),
                v => ("true", format!("{v:?}"), "false"),
            };
            format!(
                r#"{{"name":"{n}","type":{t},"typmod":-1,"key":{},"has_missing":{has_missing},"missing":{missing},"per_row":{per_row}}}"#,
                n == "id"
            )
        })
        .collect();
    let json = format!(
        r#"{{"tag":"ALTER TABLE","ddl":"alter table","tables":[{{"oid":20,"schema":"public","name":"{name}","column_lists":null,"columns":[{}]}}]}}"#,
        columns.join(",")
    );
    crate::ddl::parse(json.as_bytes()).unwrap()
}

#[test]
fn captured_ddl_is_reported_at_its_own_lsn_once() {
    let mut cache = RelationCache::new();
    let v1 = relation_with(&mut cache, "t", &[("id", types::INT4), ("a", types::TEXT)]);
    let mut conv = EventConverter::new("db", "slot");
    let mut out = Vec::new();
    for ev in [begin(1), insert_of(&v1, &[b"1", b"x"]), commit(1)] {
        conv.handle(&ev, &cache, None, &mut out).unwrap();
    }
    out.clear();
    // DROP COLUMN a; ADD COLUMN b text DEFAULT 'd' — two statements, two
    // messages; without capture they would read as one rename.
    conv.handle(&begin(2), &cache, None, &mut out).unwrap();
    let drop = ddl_of("t", &[("id", types::INT4, "null")]);
    let add = ddl_of("t", &[("id", types::INT4, "null"), ("b", types::TEXT, "d")]);
    let pubs = vec!["p".to_owned()];
    assert_eq!(
        conv.captured_ddl(&drop, &pubs, Lsn::from_u64(0x10), &mut out)
            .unwrap(),
        1
    );
    assert_eq!(
        conv.captured_ddl(&add, &pubs, Lsn::from_u64(0x20), &mut out)
            .unwrap(),
        1
    );
    // The server's Relation before the next change matches: no third event.
    let v2 = relation_with(&mut cache, "t", &[("id", types::INT4), ("b", types::TEXT)]);
    for ev in [insert_of(&v2, &[b"2", b"y"]), commit(2)] {
        conv.handle(&ev, &cache, None, &mut out).unwrap();
    }
    let ops: Vec<Operation> = out.iter().map(|e| e.op).collect();
    assert_eq!(
        ops,
        [
            Operation::SchemaChange,
            Operation::SchemaChange,
            Operation::Create
        ]
    );
    assert_eq!(out.iter().map(|e| e.index).collect::<Vec<_>>(), [0, 1, 2]);
    assert_eq!(out[0].source.lsn, Lsn::from_u64(0x10));
    let items = |i: usize| out[i].schema_change.as_ref().unwrap().items.clone();
    assert!(
        matches!(&items(0)[..], [SchemaChangeItem::DropColumn { column }] if &*column.name == "a")
    );
    assert!(matches!(
        &items(1)[..],
        [SchemaChangeItem::AddColumn { column, existing_rows: crate::event::ExistingRows::Value(v) }]
            if &*column.name == "b" && &**v == "d"
    ));
    assert_eq!(
        out[1].schema_change.as_ref().unwrap().ddl.as_deref(),
        Some("alter table")
    );
}

#[test]
fn captured_drop_table_forgets_the_table_at_commit() {
    let mut cache = RelationCache::new();
    let v1 = relation_with(&mut cache, "t", &[("id", types::INT4), ("a", types::TEXT)]);
    let mut conv = EventConverter::new("db", "slot");
    let mut out = Vec::new();
    for ev in [begin(1), insert_of(&v1, &[b"1", b"x"]), commit(1)] {
        conv.handle(&ev, &cache, None, &mut out).unwrap();
    }
    out.clear();
    let drop = crate::ddl::parse(
        br#"{"tag":"DROP TABLE","ddl":"drop table t","dropped":[{"oid":20,"schema":"public","name":"t"},{"oid":99,"schema":"public","name":"unknown"}]}"#,
    )
    .unwrap();
    conv.handle(&begin(2), &cache, None, &mut out).unwrap();
    let n = conv
        .captured_ddl(&drop, &[], Lsn::from_u64(0x10), &mut out)
        .unwrap();
    assert_eq!(n, 1, "only the known table");
    assert_eq!(
        out[0].schema_change.as_ref().unwrap().items,
        [SchemaChangeItem::DropTable]
    );
    assert_eq!(out[0].table.as_ref().unwrap().columns.len(), 2);
    conv.handle(&commit(2), &cache, None, &mut out).unwrap();
    assert!(conv.relation_versions().is_empty());
    // Outside a transaction a DDL message is an error, not a panic.
    assert!(conv
        .captured_ddl(&drop, &[], Lsn::from_u64(0x20), &mut out)
        .is_err());
}

#[test]
fn captured_ddl_of_a_column_listed_table_is_left_to_the_relation() {
    let mut cache = RelationCache::new();
    let v1 = relation_with(&mut cache, "t", &[("id", types::INT4), ("a", types::TEXT)]);
    let mut conv = EventConverter::new("db", "slot");
    let mut out = Vec::new();
    for ev in [begin(1), insert_of(&v1, &[b"1", b"x"]), commit(1), begin(2)] {
        conv.handle(&ev, &cache, None, &mut out).unwrap();
    }
    let mut add = ddl_of(
        "t",
        &[
            ("id", types::INT4, "null"),
            ("a", types::TEXT, "null"),
            ("b", types::TEXT, "per_row"),
        ],
    );
    add.tables[0].column_lists = vec!["p".to_owned()];
    let n = conv
        .captured_ddl(&add, &["p".to_owned()], Lsn::from_u64(0x10), &mut out)
        .unwrap();
    assert_eq!(n, 0);
}

#[test]
fn captured_ddl_after_the_change_that_announced_it_completes_its_event() {
    let mut cache = RelationCache::new();
    let v1 = relation_with(&mut cache, "t", &[("id", types::INT4)]);
    let mut conv = EventConverter::new("db", "slot");
    let mut out = Vec::new();
    for ev in [begin(1), insert_of(&v1, &[b"1"]), commit(1), begin(2)] {
        conv.handle(&ev, &cache, None, &mut out).unwrap();
    }
    // The insert (a subtransaction's) comes first at the message's LSN.
    let v2 = relation_with(&mut cache, "t", &[("id", types::INT4), ("c", types::INT4)]);
    let at = Lsn::from_u64(0x90);
    conv.handle(&insert_of(&v2, &[b"2", b"5"]), &cache, Some(at), &mut out)
        .unwrap();
    let add = ddl_of("t", &[("id", types::INT4, "null"), ("c", types::INT4, "5")]);
    let n = conv.captured_ddl(&add, &[], at, &mut out).unwrap();
    assert_eq!(n, 0, "no second event");
    let change = out[1].schema_change.as_ref().unwrap();
    assert_eq!(change.ddl.as_deref(), Some("alter table"));
    assert!(matches!(
        &change.items[..],
        [SchemaChangeItem::AddColumn { existing_rows: crate::event::ExistingRows::Value(v), .. }] if &**v == "5"
    ));
}

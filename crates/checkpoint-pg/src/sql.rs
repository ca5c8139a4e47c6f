//! The SQL the store runs, built once per store from the quoted names.

use crate::schema::Names;

/// Statements, with table names filled in.
#[derive(Debug, Clone)]
pub(crate) struct Sql {
    pub(crate) lock_lease: String,
    pub(crate) acquire: String,
    pub(crate) save_inline: String,
    pub(crate) save_inline_keep_all: String,
    pub(crate) lease_state: String,
    pub(crate) lock_for_save: String,
    pub(crate) finish_large: String,
    pub(crate) copy_chunks: String,
    pub(crate) record_lo: String,
    pub(crate) retain: String,
    pub(crate) delete: String,
    pub(crate) list: String,
    pub(crate) list_desc: String,
    pub(crate) newest: String,
    pub(crate) read_chunks: String,
    pub(crate) get: String,
    pub(crate) vacuum: String,
}

/// The CTEs that remove what belongs to the checkpoint rows a CTE `doomed` deleted
/// (columns `checkpoint_id, storage, lo_oid`; `job` is $1): their chunk rows (`unchunked`)
/// and their large objects (`unlinked`, then `forgotten` in the record of ours).
///
/// Explicit deletes in the same statement instead of a cascading foreign key: no trigger
/// runs per deleted checkpoint (schema version 2 dropped the key), and nothing is touched
/// when nothing was deleted. The chunks go by one range scan of their primary key between
/// the lowest and highest doomed chunk-rows checkpoint: `doomed` always holds every row
/// of the job in that range (a retention cut-off or one id), and with no chunk-rows
/// checkpoint among them the bounds are NULL and the scan ends before it starts.
fn gone(n: &Names) -> String {
    let chunks = &n.chunks;
    let lobs = &n.large_objects;
    format!(
        "unchunked AS (
            DELETE FROM {chunks} WHERE job = $1
              AND checkpoint_id >= (SELECT min(checkpoint_id) FROM doomed WHERE storage = 'chunk_rows')
              AND checkpoint_id <= (SELECT max(checkpoint_id) FROM doomed WHERE storage = 'chunk_rows')),
         unlinked AS (
            SELECT lo_unlink(d.lo_oid) FROM doomed d
            WHERE d.lo_oid IS NOT NULL
              AND EXISTS (SELECT 1 FROM pg_largeobject_metadata m WHERE m.oid = d.lo_oid)),
         forgotten AS (
            DELETE FROM {lobs} WHERE lo_oid IN (
                SELECT lo_oid FROM doomed WHERE lo_oid IS NOT NULL))"
    )
}

/// Columns of a metadata row read back, in this order.
pub(crate) const META_COLUMNS: &str =
    "checkpoint_id, commit_end_lsn, created_at_us, stored_bytes, \
     storage, chunk_size, chunk_count, lo_oid";

impl Sql {
    pub(crate) fn new(n: &Names) -> Self {
        let cps = &n.checkpoints;
        let leases = &n.leases;
        let chunks = &n.chunks;
        let lobs = &n.large_objects;
        // No row of $1 has an id below this (the lease's `lowest_id`, as the statement
        // sees it). Every scan of the job's rows that may go down the index starts here:
        // the index entries of rows deleted before stay until VACUUM, and a scan open
        // below reads every one of them, at every save (the planner, which believes the
        // job has a few rows, likes to read them all with a bitmap scan and sort).
        let floor = format!("coalesce((SELECT lowest_id FROM {leases} WHERE job = $1), 0)");
        // The commit end LSN of the newest row of $1 (NULL if none), read from the table.
        let newest_stored = format!(
            "(SELECT commit_end_lsn FROM {cps} WHERE job = $1 AND checkpoint_id >= {floor}
              ORDER BY checkpoint_id DESC LIMIT 1)"
        );
        // The id of the newest row of $1 that retention keeping `offset` rows deletes,
        // as the statement sees the table.
        let cut = |offset: &str| {
            format!(
                "(SELECT checkpoint_id FROM {cps} WHERE job = $1 AND checkpoint_id >= {floor}
                  ORDER BY checkpoint_id DESC OFFSET {offset} LIMIT 1)"
            )
        };
        // Deletes the rows of $1 beyond the newest `offset` where `cond` holds, with their
        // chunk rows and large objects, all in the statement's transaction. `job` is
        // always $1. The rows go by one range scan from the floor to the cut-off.
        let doomed = |cond: &str, offset: &str| {
            format!(
                "doomed AS (
                    DELETE FROM {cps} WHERE job = $1 AND {cond}
                      AND checkpoint_id >= {floor} AND checkpoint_id <= {}
                    RETURNING checkpoint_id, storage, lo_oid),
                 {}",
                cut(offset),
                gone(n)
            )
        };
        // The lease's new `lowest_id` after retention keeping `offset` rows ($1 = job):
        // one above the cut-off, or unchanged when nothing is cut or retention is off.
        let lowest = |offset: &str| {
            format!(
                "lowest_id = CASE WHEN {offset}::bigint IS NULL THEN lowest_id
                                  ELSE coalesce({} + 1, lowest_id) END",
                cut(offset)
            )
        };
        // The insert of an inline save (`ins`), of one row if the CTE `lease` returned one.
        let insert_inline = format!(
            "ins AS (
                    INSERT INTO {cps} (job, checkpoint_id, commit_end_lsn, created_at_us,
                        format_version, stored_bytes, crc32c, storage, chunk_size, chunk_count,
                        writer_epoch, data)
                    SELECT $1, $2, $4, $5, $6, $7, $8, 'inline', $9, $10, $3, $11 FROM lease
                    RETURNING 1)"
        );
        Sql {
            // Taken before `acquire`, `retain` and `delete`, in their transaction and the
            // same round trip (the store's `under_lease_lock`): it waits for the job's
            // saves, deletes and retention in flight, so the next statement's snapshot
            // sees what they wrote. The statements' own `FOR UPDATE` on the lease row
            // changes nothing after it (the transaction holds the lock), but keeps each
            // statement checking the epoch under the lock were it ever run on its own.
            lock_lease: format!("SELECT 1 FROM {leases} WHERE job = $1 FOR UPDATE"),
            // The new epoch, and the newest stored LSN read from the table itself: rows
            // deleted by hand (or written by a build before schema version 5) while no
            // writer held the job count as they are now.
            acquire: format!(
                "INSERT INTO {leases} AS l (job, epoch, owner, newest_lsn)
                 VALUES ($1, 1, $2, {newest_stored})
                 ON CONFLICT (job) DO UPDATE
                 SET epoch = l.epoch + 1, owner = EXCLUDED.owner, acquired_at = now(),
                     newest_lsn = EXCLUDED.newest_lsn
                 RETURNING epoch"
            ),
            // One statement, hence one implicit transaction and one round trip. The lease
            // row's UPDATE is the lock: it bumps the highest id and the newest LSN only
            // if the epoch is the writer's ($3), the id is new ($2) and the LSN ($4) does
            // not go back; a concurrent takeover makes it match nothing (READ COMMITTED
            // re-checks the updated row). Then the insert and retention ($12 = rows to
            // keep besides the new one; NULL keeps all), only if the lease row was updated.
            //
            // The floor and the retention cut-off come from one scan of the newest
            // $12 + 1 rows (`top`, `k`), each computed once: the floor, as an expression,
            // was a subquery at every use.
            save_inline: format!(
                "WITH f AS (SELECT {floor} AS floor),
                 top AS (
                    SELECT checkpoint_id FROM {cps}
                    WHERE job = $1 AND checkpoint_id >= (SELECT floor FROM f)
                    ORDER BY checkpoint_id DESC LIMIT coalesce($12::bigint, 0) + 1),
                 k AS (
                    SELECT CASE WHEN count(*) > $12::bigint THEN min(checkpoint_id) END AS cut
                    FROM top),
                 lease AS (
                    UPDATE {leases}
                    SET highest_id = $2, newest_lsn = $4,
                        lowest_id = coalesce((SELECT cut FROM k) + 1, lowest_id)
                    WHERE job = $1 AND epoch = $3
                      AND (highest_id IS NULL OR highest_id < $2)
                      AND (newest_lsn IS NULL OR newest_lsn <= $4)
                    RETURNING 1),
                 {insert_inline},
                 doomed AS (
                    DELETE FROM {cps} WHERE job = $1 AND EXISTS (SELECT 1 FROM ins)
                      AND checkpoint_id >= (SELECT floor FROM f)
                      AND checkpoint_id <= (SELECT cut FROM k)
                    RETURNING checkpoint_id, storage, lo_oid),
                 {}
                 SELECT EXISTS (SELECT 1 FROM ins), (SELECT count(*) FROM unlinked)",
                gone(n)
            ),
            // The inline save of a pooled connection: retention runs after it, in a
            // statement of its own (the store's `retention` module), so this one only checks
            // and bumps the lease row and inserts the new row: one index lookup and two
            // writes, like an upsert and one more row. (Reading the newest row's LSN from
            // the checkpoints table instead, before schema version 5, cost two more
            // lookups and a third of the statement's time.)
            save_inline_keep_all: format!(
                "WITH lease AS (
                    UPDATE {leases} SET highest_id = $2, newest_lsn = $4
                    WHERE job = $1 AND epoch = $3
                      AND (highest_id IS NULL OR highest_id < $2)
                      AND (newest_lsn IS NULL OR newest_lsn <= $4)
                    RETURNING 1),
                 {insert_inline}
                 SELECT EXISTS (SELECT 1 FROM ins)"
            ),
            // Why a save was refused (read after the fact, no lock).
            lease_state: format!(
                "SELECT epoch, highest_id, newest_lsn FROM {leases} WHERE job = $1"
            ),
            lock_for_save: format!(
                "SELECT epoch, highest_id, newest_lsn FROM {leases} WHERE job = $1 FOR UPDATE"
            ),
            // The end of a large save, after lock_for_save and the chunks, in its
            // transaction: metadata row, highest id and retention in one round trip
            // ($13 = rows to keep besides the new one; NULL keeps all).
            finish_large: format!(
                "WITH ins AS (
                    INSERT INTO {cps} (job, checkpoint_id, commit_end_lsn, created_at_us,
                        format_version, stored_bytes, crc32c, storage, chunk_size, chunk_count,
                        writer_epoch, lo_oid)
                    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
                    RETURNING 1),
                 bump AS (
                    UPDATE {leases} SET highest_id = $2, newest_lsn = $3, {}
                    WHERE job = $1 RETURNING 1),
                 {}
                 SELECT (SELECT count(*) FROM ins), (SELECT count(*) FROM bump),
                        (SELECT count(*) FROM unlinked)",
                lowest("$13"),
                doomed("$13::bigint IS NOT NULL", "$13")
            ),
            copy_chunks: format!(
                "COPY {chunks} (job, checkpoint_id, seq, data) FROM STDIN (FORMAT binary)"
            ),
            record_lo: format!(
                "INSERT INTO {lobs} (lo_oid, job, checkpoint_id) VALUES (lo_create(0), $1, $2)
                 RETURNING lo_oid"
            ),
            // $3 = the writer's epoch; nothing is deleted unless it is current. The lease's
            // floor (`lowest_id`) goes up to one above the newest row deleted, so later scans
            // of the job's rows skip the dead index entries (never down: every doomed id is at
            // or above it). Keeping none ($2 = 0) deletes the newest row too: no LSN is stored.
            retain: format!(
                "WITH lease AS (SELECT epoch FROM {leases} WHERE job = $1 FOR UPDATE),
                 {},
                 raised AS (
                    UPDATE {leases} SET lowest_id = greatest(lowest_id,
                        (SELECT max(checkpoint_id) + 1 FROM doomed)),
                        newest_lsn = CASE WHEN $2::bigint = 0 THEN NULL ELSE newest_lsn END
                    WHERE job = $1 AND EXISTS (SELECT 1 FROM doomed)
                    RETURNING 1)
                 SELECT (SELECT epoch FROM lease), (SELECT count(*) FROM doomed),
                        (SELECT count(*) FROM unlinked), (SELECT count(*) FROM raised)",
                doomed("EXISTS (SELECT 1 FROM lease WHERE lease.epoch = $3)", "$2")
            ),
            // Deleting the newest row makes the one below it the newest: the lease's
            // newest LSN becomes that row's (every CTE sees the table as the statement
            // began, the doomed row still in it).
            delete: format!(
                "WITH lease AS (SELECT epoch FROM {leases} WHERE job = $1 FOR UPDATE),
                 doomed AS (
                    DELETE FROM {cps} WHERE job = $1 AND checkpoint_id = $2
                      AND EXISTS (SELECT 1 FROM lease WHERE lease.epoch = $3)
                    RETURNING checkpoint_id, storage, lo_oid),
                 {},
                 renewed AS (
                    UPDATE {leases} SET newest_lsn = (
                        SELECT commit_end_lsn FROM {cps}
                        WHERE job = $1 AND checkpoint_id >= {floor} AND checkpoint_id < $2
                        ORDER BY checkpoint_id DESC LIMIT 1)
                    WHERE job = $1 AND EXISTS (SELECT 1 FROM doomed)
                      AND NOT EXISTS (SELECT 1 FROM {cps} WHERE job = $1 AND checkpoint_id > $2)
                    RETURNING 1)
                 SELECT (SELECT epoch FROM lease), (SELECT count(*) FROM doomed),
                        (SELECT count(*) FROM unlinked)",
                gone(n)
            ),
            list: format!(
                "SELECT {META_COLUMNS} FROM {cps} WHERE job = $1 AND checkpoint_id >= {floor}
                 ORDER BY checkpoint_id"
            ),
            get: format!(
                "SELECT {META_COLUMNS}, data FROM {cps} WHERE job = $1 AND checkpoint_id = $2"
            ),
            list_desc: format!(
                "SELECT {META_COLUMNS}, data FROM {cps} WHERE job = $1 AND checkpoint_id >= {floor}
                 ORDER BY checkpoint_id DESC"
            ),
            newest: format!(
                "SELECT {META_COLUMNS}, data FROM {cps}
                 WHERE job = $1 AND checkpoint_id >= {floor}
                 ORDER BY checkpoint_id DESC LIMIT 1"
            ),
            read_chunks: format!(
                "SELECT data FROM {chunks} WHERE job = $1 AND checkpoint_id = $2 ORDER BY seq"
            ),
            vacuum: format!(
                "WITH orphans AS (
                    SELECT o.lo_oid FROM {lobs} o
                    WHERE NOT EXISTS (SELECT 1 FROM {cps} c WHERE c.lo_oid = o.lo_oid)
                    FOR UPDATE OF o SKIP LOCKED),
                 unlinked AS (
                    SELECT lo_unlink(o.lo_oid) FROM orphans o
                    WHERE EXISTS (SELECT 1 FROM pg_largeobject_metadata m WHERE m.oid = o.lo_oid)),
                 forgotten AS (
                    DELETE FROM {lobs} WHERE lo_oid IN (SELECT lo_oid FROM orphans)),
                 strays AS (
                    DELETE FROM {chunks} s WHERE NOT EXISTS (
                        SELECT 1 FROM {cps} c
                        WHERE c.job = s.job AND c.checkpoint_id = s.checkpoint_id)
                    RETURNING 1)
                 SELECT (SELECT count(*) FROM unlinked), (SELECT count(*) FROM strays)"
            ),
        }
    }
}

//! The demo table and the background writer that changes it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::Client;

use super::error::QuickstartError;

/// The demo table.
pub(super) const TABLE: &str = "public.orders";
/// How many distinct customers the writer uses (the aggregate's groups).
const CUSTOMERS: i64 = 5;
/// The writer's pace: one round (a few small transactions) per tick.
const ROUND_INTERVAL: Duration = Duration::from_millis(4);

/// `public.orders`, with REPLICA IDENTITY FULL so update and delete events carry
/// the old row.
pub(super) const CREATE_TABLE: &str =
    "CREATE TABLE public.orders (id bigint PRIMARY KEY, customer int, amount int);
     ALTER TABLE public.orders REPLICA IDENTITY FULL";

/// Rows in the table before `pgcdc run` starts (ids -1 down to
/// -SEED_ROWS): they reach the events file through the initial snapshot.
pub(super) const SEED_ROWS: i64 = 2000;

/// Fills the table before `pgcdc run` starts.
pub(super) const SEED: &str = "INSERT INTO public.orders (id, customer, amount) \
     SELECT -g, (g % 7)::int + 1, ((g * 37) % 100)::int + 1 FROM generate_series(1, 2000) g";

/// Row changes committed by the writer, by operation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Written {
    /// Rows inserted.
    pub inserts: u64,
    /// Rows updated.
    pub updates: u64,
    /// Rows deleted.
    pub deletes: u64,
}

impl Written {
    /// All row changes.
    pub fn total(&self) -> u64 {
        self.inserts + self.updates + self.deletes
    }
}

/// A running writer: inserts, updates and deletes in small transactions.
#[derive(Debug)]
pub(super) struct Writer {
    stop: Arc<AtomicBool>,
    rounds: Arc<AtomicU64>,
    changes: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<Result<Written, QuickstartError>>,
}

impl Writer {
    /// Starts writing through `client` (its own connection).
    pub(super) fn start(client: Client) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let rounds = Arc::new(AtomicU64::new(0));
        let changes = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(write(client, stop.clone(), rounds.clone(), changes.clone()));
        Writer {
            stop,
            rounds,
            changes,
            task,
        }
    }

    /// Rounds committed so far.
    pub(super) fn rounds(&self) -> u64 {
        self.rounds.load(Ordering::Acquire)
    }

    /// Row changes committed so far.
    pub(super) fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    /// Whether the writer has ended (only on an error before `finish`).
    pub(super) fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Stops after the current round; returns what was committed.
    pub(super) async fn finish(self) -> Result<Written, QuickstartError> {
        self.stop.store(true, Ordering::Release);
        self.task
            .await
            .map_err(|e| QuickstartError::Task(e.to_string()))?
    }
}

async fn write(
    client: Client,
    stop: Arc<AtomicBool>,
    rounds: Arc<AtomicU64>,
    changes: Arc<AtomicU64>,
) -> Result<Written, QuickstartError> {
    let insert = client
        .prepare(
            "INSERT INTO public.orders (id, customer, amount) \
             SELECT g, (g % $2::int8)::int + 1, ((g * 37) % 100)::int + 1 FROM generate_series($1::int8, $1::int8 + 4) g",
        )
        .await
        .map_err(QuickstartError::pg("prepare the insert"))?;
    let update = client
        .prepare("UPDATE public.orders SET amount = amount + 10 WHERE id = $1")
        .await
        .map_err(QuickstartError::pg("prepare the update"))?;
    let delete = client
        .prepare("DELETE FROM public.orders WHERE id = $1")
        .await
        .map_err(QuickstartError::pg("prepare the delete"))?;
    let mut written = Written::default();
    let mut next: i64 = 1;
    let mut round: i64 = 0;
    let mut pace = tokio::time::interval(ROUND_INTERVAL);
    pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !stop.load(Ordering::Acquire) {
        pace.tick().await;
        round += 1;
        written.inserts += client
            .execute(&insert, &[&next, &CUSTOMERS])
            .await
            .map_err(QuickstartError::pg("insert orders"))?;
        next += 5;
        // Ids spread over what exists; some were deleted already (0 rows).
        let target = (round * 7) % (next - 1) + 1;
        written.updates += client
            .execute(&update, &[&target])
            .await
            .map_err(QuickstartError::pg("update an order"))?;
        if round % 4 == 0 {
            let target = (round * 13) % (next - 1) + 1;
            written.deletes += client
                .execute(&delete, &[&target])
                .await
                .map_err(QuickstartError::pg("delete an order"))?;
        }
        changes.store(written.total(), Ordering::Release);
        rounds.fetch_add(1, Ordering::AcqRel);
    }
    Ok(written)
}

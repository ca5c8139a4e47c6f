//! Embeds a pgcdc job with an operator of your own whose state is
//! checkpointed and restored: stop it (Ctrl-C) and start it again, and the
//! count goes on from the last checkpoint, with no insert counted twice.
//!
//! `cargo run -p cdc-runtime --example stateful_operator -- "host=db dbname=app user=cdc"`
use std::time::Duration;

use bytes::Bytes;
use cdc_runtime::{
    Capture, ChangeEvent, CheckpointSettings, CommitContext, Job, Operation, Operator,
    OperatorError, ReplicationConfig, SinkOptions, SourceOptions, StoreOptions, TableRef,
};
use checkpoint_api::{OperatorStateError, StatefulOperator};

/// Counts committed inserts; the open transaction's share is kept apart, so
/// a checkpoint (always between transactions) holds committed state only.
#[derive(Default)]
struct InsertCounter {
    committed: u64,
    open: u64,
}

impl StatefulOperator for InsertCounter {
    fn operator_id(&self) -> &str {
        "inserts"
    }
    fn kind(&self) -> &str {
        "example.insert_counter"
    }
    fn state_version(&self) -> u32 {
        1
    }
    fn snapshot_state(&self) -> Result<Bytes, OperatorStateError> {
        Ok(Bytes::from(self.committed.to_string()))
    }
    fn restore_state(&mut self, _: u32, state: Bytes) -> Result<(), OperatorStateError> {
        let text = String::from_utf8_lossy(&state);
        self.committed = text.parse().map_err(|_| OperatorStateError::Invalid {
            operator: "inserts".into(),
            reason: format!("{text:?} is not a count"),
        })?;
        println!("restored from the checkpoint: {} inserts", self.committed);
        Ok(())
    }
}

impl Operator for InsertCounter {
    fn on_event(&mut self, event: &ChangeEvent) -> Result<(), OperatorError> {
        self.open += u64::from(event.op == Operation::Create);
        Ok(())
    }
    fn on_commit(
        &mut self,
        _: &CommitContext,
        _: &mut Vec<ChangeEvent>,
    ) -> Result<(), OperatorError> {
        self.committed += std::mem::take(&mut self.open);
        println!("inserts committed so far: {}", self.committed);
        Ok(())
    }
    fn on_abort(&mut self) {
        self.open = 0;
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .ok_or("usage: stateful_operator <conninfo>")?;
    let db: ReplicationConfig = url.parse()?;
    let orders = Capture::Tables(vec![TableRef::parse("public.orders")?]);
    let source = SourceOptions::new(db.clone(), "example_slot", "example_pub", orders);
    let mut checkpoints = CheckpointSettings::new(StoreOptions::new(db));
    checkpoints.interval = Duration::from_secs(1);
    let job = Job::builder(source)
        .operator(InsertCounter::default())
        .sink(SinkOptions::Null)
        .checkpoints(checkpoints)
        .build()?;
    let progress = job
        .run(async { drop(tokio::signal::ctrl_c().await) })
        .await?;
    println!("stopped at {}", progress.confirmed);
    Ok(())
}

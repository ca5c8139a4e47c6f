//! Embeds a pgcdc job with an operator of your own whose state is
//! checkpointed and restored: stop it (Ctrl-C) and start it again, and the
//! count goes on from the last checkpoint, with no insert counted twice.
//!
//! `cargo run -p cdc-runtime --example stateful_operator -- "host=localhost dbname=app user=cdc"`
//! (the server needs `wal_level=logical`; the slot, publication and the
//! `pgcdc.checkpoints` table are created on the first run).
use std::time::Duration;

use bytes::Bytes;
use cdc_runtime::encoding::JsonFormat;
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
    fn restore_state(&mut self, _version: u32, state: Bytes) -> Result<(), OperatorStateError> {
        let invalid = |reason: String| OperatorStateError::Invalid {
            operator: "inserts".into(),
            reason,
        };
        let text = std::str::from_utf8(&state).map_err(|e| invalid(e.to_string()))?;
        self.committed = text
            .parse()
            .map_err(|_| invalid(format!("{text:?} is no count")))?;
        println!(
            "restored from the checkpoint: {} inserts so far",
            self.committed
        );
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
        .ok_or("usage: stateful_operator <connection string>")?;
    let db: ReplicationConfig = url.parse()?;
    let orders = Capture::Tables(vec![TableRef::parse("public.orders")?]);
    let job = Job::builder(SourceOptions::new(
        db.clone(),
        "example_slot",
        "example_pub",
        orders,
    ))
    .operator(InsertCounter::default())
    .sink(SinkOptions::Stdout {
        format: JsonFormat::Plain,
    })
    .checkpoints(CheckpointSettings {
        interval: Duration::from_secs(1),
        ..CheckpointSettings::new(StoreOptions::new(db))
    })
    .build()?;
    let progress = job
        .run(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    println!(
        "stopped at {} after {} checkpoints",
        progress.confirmed, progress.checkpoints.saved
    );
    Ok(())
}

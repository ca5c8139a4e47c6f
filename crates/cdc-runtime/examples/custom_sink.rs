//! A sink of your own: here, one that counts the changes per table and
//! prints the counts each time the pipeline asks it to make its writes
//! durable. A real sink would write to its system in `write` and make the
//! writes durable in `flush`: the slot is confirmed only up to what `flush`
//! returned `Ok` for, so after a crash the events since then come again.
//!
//! `cargo run -p cdc-runtime --example custom_sink -- "host=localhost dbname=app user=cdc"`
use std::collections::BTreeMap;

use cdc_runtime::snapshot::StartupMode;
use cdc_runtime::{
    Capture, ChangeEvent, Job, ReplicationConfig, Sink, SinkError, SnapshotSettings, SourceOptions,
    TableRef,
};

#[derive(Default)]
struct CountingSink {
    /// Changes written since the start, by `schema.table` and Debezium op.
    counts: BTreeMap<(String, &'static str), u64>,
}

#[async_trait::async_trait]
impl Sink for CountingSink {
    async fn write(&mut self, batch: &[ChangeEvent]) -> Result<(), SinkError> {
        for event in batch {
            let table = match (event.schema_name(), event.table_name()) {
                (Some(schema), Some(table)) => format!("{schema}.{table}"),
                _ => "(message)".to_owned(),
            };
            *self
                .counts
                .entry((table, event.op.debezium_code()))
                .or_default() += 1;
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), SinkError> {
        for ((table, op), n) in &self.counts {
            println!("{table} {op}: {n}");
        }
        Ok(())
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        self.flush().await
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .ok_or("usage: custom_sink <connection string>")?;
    let db: ReplicationConfig = url.parse()?;
    let tables = Capture::Tables(vec![TableRef::parse("public.orders")?]);
    let job = Job::builder(SourceOptions::new(
        db,
        "example_sink_slot",
        "example_sink_pub",
        tables,
    ))
    .custom_sink(CountingSink::default())
    .snapshot(SnapshotSettings {
        mode: StartupMode::Latest,
        ..SnapshotSettings::default()
    })
    .build()?;
    let progress = job
        .run(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    println!(
        "{} events, confirmed up to {}",
        progress.events, progress.confirmed
    );
    Ok(())
}

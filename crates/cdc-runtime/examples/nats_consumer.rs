//! A consumer of the NATS sink's JetStream stream: a durable pull consumer
//! that fetches the change events in batches, prints one line per event and
//! acknowledges each one after printing it.
//!
//! Run pgcdc with a `nats` sink (a JetStream server on 127.0.0.1:4222, e.g.
//! `nats-server -js`):
//!
//! ```toml
//! [[sinks]]
//! type = "nats"
//! servers = ["nats://127.0.0.1:4222"]
//! subject = "{prefix}.{schema}.{table}"
//!
//! [sinks.stream]
//! name = "PGCDC"
//! subjects = ["pgcdc.>"]
//! duplicate_window_secs = 120
//! ```
//!
//! `pgcdc run --config pgcdc.toml`, and next to it:
//!
//! ```text
//! cargo run -p cdc-runtime --example nats_consumer -- \
//!     [--server nats://127.0.0.1:4222] [--stream PGCDC] [--durable pgcdc-example] \
//!     [--subject 'pgcdc.public.orders'] [--batch 100] [--max N] [--idle-secs S]
//! ```
//!
//! The environment variables `NATS_URL`, `NATS_STREAM`, `NATS_DURABLE` and
//! `NATS_SUBJECT` stand in for the first four options. A user and password
//! or a token go in the URL (`nats://user:pass@host:4222`). Without `--max`
//! or `--idle-secs` it runs until interrupted; the durable consumer keeps
//! its place on the server, so the next run goes on after the last
//! acknowledged event.
//!
//! Delivery is **at least once**, twice over: pgcdc republishes the
//! transactions after its last checkpoint when it restarts (JetStream drops
//! those within the stream's duplicate window, by `Nats-Msg-Id`), and
//! JetStream redelivers a message whose acknowledgement it did not get
//! (this process stopped between processing and acking, or took longer than
//! the consumer's ack wait). So processing must be idempotent, keyed by the
//! `Nats-Msg-Id` header (`{job}:{commit LSN}:{index}[:suffix]`, unique per
//! record of a job): record the ids you have applied in the same transaction
//! as the effect, and skip an id you have seen.
use std::time::{Duration, Instant};

use async_nats::jetstream::consumer::{pull, AckPolicy, PullConsumer};
use async_nats::jetstream::{self, AckKind};
use futures_util::StreamExt;
use serde_json::Value;

/// One pull request's wait when neither the idle timeout nor anything else
/// bounds it: long enough to be cheap, short enough to notice a lost server.
const MAX_WAIT: Duration = Duration::from_secs(30);

const USAGE: &str = "usage: nats_consumer [--server URL] [--stream NAME] [--durable NAME] \
     [--subject FILTER] [--batch N] [--max N] [--idle-secs S]";

#[derive(Debug)]
struct Args {
    server: String,
    stream: String,
    durable: String,
    /// Only the stream's messages on this subject (wildcards allowed).
    subject: Option<String>,
    /// Messages asked for per pull request.
    batch: usize,
    /// Exit after this many messages.
    max: Option<u64>,
    /// Exit when no message came for this long.
    idle: Option<Duration>,
}

impl Args {
    fn parse() -> Result<Args, String> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let mut args = Args {
            server: env("NATS_URL").unwrap_or_else(|| "nats://127.0.0.1:4222".to_owned()),
            stream: env("NATS_STREAM").unwrap_or_else(|| "PGCDC".to_owned()),
            durable: env("NATS_DURABLE").unwrap_or_else(|| "pgcdc-example".to_owned()),
            subject: env("NATS_SUBJECT"),
            batch: 100,
            max: None,
            idle: None,
        };
        let mut it = std::env::args().skip(1);
        while let Some(flag) = it.next() {
            let value = it
                .next()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
            let number = |v: &str| {
                v.parse::<u64>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("{flag}: {v:?} is not a positive number"))
            };
            match flag.as_str() {
                "--server" => args.server = value,
                "--stream" => args.stream = value,
                "--durable" => args.durable = value,
                "--subject" => args.subject = Some(value),
                "--batch" => {
                    args.batch = usize::try_from(number(&value)?).map_err(|e| e.to_string())?
                }
                "--max" => args.max = Some(number(&value)?),
                "--idle-secs" => args.idle = Some(Duration::from_secs(number(&value)?)),
                _ => return Err(format!("unknown option {flag}\n{USAGE}")),
            }
        }
        Ok(args)
    }
}

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    if std::env::args().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return std::process::ExitCode::SUCCESS;
    }
    let result = match Args::parse() {
        Ok(args) => run(args).await,
        Err(e) => Err(e.into()),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nats_consumer: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), Error> {
    let client = async_nats::ConnectOptions::new()
        .name("pgcdc-example-consumer")
        .connect(args.server.as_str())
        .await
        .map_err(|e| format!("cannot connect to {}: {e}", without_secret(&args.server)))?;
    let js = jetstream::new(client.clone());
    let stream = js
        .get_stream(&args.stream)
        .await
        .map_err(|e| format!("stream {}: {e}", args.stream))?;

    // Durable: the server keeps the consumer's position between runs.
    // Explicit acks: a message counts as processed only once acked.
    let filter = args.subject.clone().unwrap_or_default();
    let consumer: PullConsumer = stream
        .get_or_create_consumer(
            &args.durable,
            pull::Config {
                durable_name: Some(args.durable.clone()),
                ack_policy: AckPolicy::Explicit,
                filter_subject: filter.clone(),
                description: Some("pgcdc example consumer".to_owned()),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| format!("consumer {} on {}: {e}", args.durable, args.stream))?;
    // An existing durable consumer keeps its filter: say so rather than
    // print a different subset of events than asked for.
    let existing = &consumer.cached_info().config.filter_subject;
    if *existing != filter {
        return Err(format!(
            "the durable consumer {} on stream {} exists with subject filter {existing:?}, \
             not {filter:?}: use another --durable, or delete it",
            args.durable, args.stream
        )
        .into());
    }

    let mut seen: u64 = 0;
    let mut last_message = Instant::now();
    loop {
        // Never ask for more than --max leaves: a message delivered and not
        // acked would wait out the ack wait before another consumer gets it.
        let want = match args.max {
            Some(max) if seen >= max => break,
            Some(max) => {
                usize::try_from(max - seen).map_or(args.batch, |left| left.min(args.batch))
            }
            None => args.batch,
        };
        let wait = match args.idle {
            Some(idle) => match idle.checked_sub(last_message.elapsed()) {
                Some(left) if !left.is_zero() => left.min(MAX_WAIT),
                _ => {
                    eprintln!("no message for {} s; exiting", idle.as_secs());
                    break;
                }
            },
            None => MAX_WAIT,
        };
        // One pull request: up to `want` messages, waiting at most `wait`
        // for them; the batch ends with the last one or the server's timeout.
        let mut batch = consumer
            .batch()
            .max_messages(want)
            .expires(wait)
            .messages()
            .await?;
        while let Some(message) = batch.next().await {
            let message = message?;
            let header = |name: &str| {
                message
                    .headers
                    .as_ref()
                    .and_then(|h| h.get(name))
                    .map_or("-", |v| v.as_str())
                    .to_owned()
            };
            let redelivery = match message.info() {
                Ok(info) if info.delivered > 1 => format!(" (delivery {})", info.delivered),
                _ => String::new(),
            };
            match serde_json::from_slice::<Value>(&message.payload) {
                Ok(value) => {
                    // Here a real consumer applies the event, idempotently by
                    // Nats-Msg-Id, and acks only once that is done.
                    println!(
                        "{} Nats-Msg-Id={} Pgcdc-Commit-Lsn={}{redelivery}",
                        summary(&value),
                        header("Nats-Msg-Id"),
                        header("Pgcdc-Commit-Lsn"),
                    );
                    message.ack().await?;
                }
                Err(e) => {
                    // It will not parse the next time either: stop its
                    // redelivery instead of acking it as processed.
                    eprintln!(
                        "{}: not JSON ({e}); terminated Nats-Msg-Id={}",
                        message.subject,
                        header("Nats-Msg-Id")
                    );
                    message.ack_with(AckKind::Term).await?;
                }
            }
            seen += 1;
            last_message = Instant::now();
        }
        // The acks are plain publishes: put them on the wire before the
        // next request, and before exiting.
        client.flush().await?;
    }
    client.flush().await?;
    eprintln!("{seen} messages");
    Ok(())
}

/// One line for a change event: `op schema.table lsn=… after={…}` for
/// Debezium values (with or without `key = true` and `schemas.enable`),
/// the transaction boundaries and the plain format's events.
fn summary(value: &Value) -> String {
    // key = true: {"key":…,"value":…}; schemas.enable: {"schema":…,"payload":…}.
    let unwrap_schema = |v: &Value| match v.get("payload") {
        Some(payload) if v.get("schema").is_some() => payload.clone(),
        _ => v.clone(),
    };
    let value = match (value.get("key"), value.get("value")) {
        (Some(key), Some(Value::Null)) => return format!("tombstone key={}", unwrap_schema(key)),
        (Some(_), Some(v)) => unwrap_schema(v),
        _ => unwrap_schema(value),
    };
    if let Some(status) = value.get("status").and_then(Value::as_str) {
        let id = value.get("id").and_then(Value::as_str).unwrap_or("?");
        return match value.get("event_count") {
            Some(n) => format!("{status} transaction {id}: {n} events"),
            None => format!("{status} transaction {id}"),
        };
    }
    let op = value.get("op").and_then(Value::as_str).unwrap_or("?");
    // Debezium has them in `source`, the plain format at the top.
    let source = value.get("source").unwrap_or(&value);
    let text = |v: &Value, name: &str| v.get(name).and_then(Value::as_str).map(str::to_owned);
    let table = match (text(source, "schema"), text(source, "table")) {
        (Some(schema), Some(table)) => format!(" {schema}.{table}"),
        _ => String::new(),
    };
    let lsn = source
        .get("lsn")
        .filter(|l| !l.is_null())
        .map_or(String::new(), |l| {
            format!(" lsn={}", l.to_string().trim_matches('"'))
        });
    // A delete's row is its `before`; every other op's is `after`.
    let row = match op {
        "d" | "delete" => ("before", value.get("before")),
        _ => ("after", value.get("after")),
    };
    let row = match row {
        (name, Some(row)) if !row.is_null() => format!(" {name}={row}"),
        _ => String::new(),
    };
    // A logical decoding message (pg_logical_emit_message) has no table.
    let prefix = value
        .get("message")
        .and_then(|m| m.get("prefix"))
        .map_or(String::new(), |p| format!(" prefix={p}"));
    format!("{op}{table}{lsn}{row}{prefix}")
}

/// `url` with its user and password (or token) left out, for messages.
fn without_secret(url: &str) -> String {
    let rest = url.find("://").map_or(0, |i| i + 3);
    match url[rest..].find('@') {
        Some(at) => format!("{}***{}", &url[..rest], &url[rest + at..]),
        None => url.to_owned(),
    }
}

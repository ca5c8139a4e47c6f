//! The JetStream stream: created when missing, checked when present (its
//! subjects must cover the sink's, its duplicate window must outlast a
//! replay, and it must keep its messages on disk unless
//! `allow_memory_storage` says otherwise).

use std::time::Duration;

use async_nats::jetstream::{
    self,
    context::{CreateStreamError, CreateStreamErrorKind, GetStreamErrorKind},
    stream,
};

use super::error::NatsError;
use super::options::{NatsSinkOptions, NatsStorage, DEDUPE_MARGIN};
use super::subject::{covers, SubjectTemplate};
use crate::encoding::JsonFormat;

/// What was found (or done) about the stream.
#[derive(Debug, Clone)]
pub(crate) struct StreamReport {
    /// One line for logs and `pgcdc validate`.
    pub line: String,
}

/// Creates the stream if it is missing and allowed (`create`), and checks
/// it. With `plan`, creates nothing and says what `run` would do.
pub(crate) async fn ensure(
    js: &jetstream::Context,
    options: &NatsSinkOptions,
    template: &SubjectTemplate,
    plan: bool,
) -> Result<StreamReport, NatsError> {
    let name = options.stream_name();
    let wanted = wanted_config(options, &name);
    // Configured subjects must cover what the sink publishes, whether the
    // stream exists or not.
    let transactions = matches!(&options.format,
        JsonFormat::Debezium(d) if d.provide_transaction_metadata);
    check_subjects(
        &name,
        &wanted.subjects,
        template,
        transactions,
        "sinks.stream.subjects",
    )?;
    let (config, verb) = match js.get_stream(&name).await {
        Ok(s) => {
            let config = s.cached_info().config.clone();
            check_storage(
                &name,
                config.storage,
                options.stream.allow_memory_storage,
                true,
            )?;
            (config, "exists")
        }
        Err(e) if is_not_found(&e) => {
            if !options.stream.create {
                return Err(NatsError::permanent(
                    "stream",
                    format!("stream {name} does not exist; create it (subjects {:?}) or set create = true in [sinks.stream]", wanted.subjects),
                ));
            }
            // Refused before anything is created.
            check_storage(
                &name,
                wanted.storage,
                options.stream.allow_memory_storage,
                false,
            )?;
            if plan {
                check_placement(&name, wanted.num_replicas, &js.client().server_info())?;
                (wanted.clone(), "will be created")
            } else {
                let info = create_stream(js, &wanted)
                    .await
                    .map_err(|e| create_error(&name, wanted.num_replicas, &e))?;
                (info.cached_info().config.clone(), "was created")
            }
        }
        Err(e) => {
            return Err(NatsError::transient(
                "stream",
                format!("looking up stream {name}: {e} (is JetStream enabled on the server? start it with -js)"),
            ))
        }
    };
    check_subjects(
        &name,
        &config.subjects,
        template,
        transactions,
        "the stream's subjects",
    )?;
    check_window(&name, config.duplicate_window, options.checkpoint_interval)?;
    if verb == "exists" && config.duplicate_window != wanted.duplicate_window {
        tracing::info!(stream = %name, "the stream's duplicate_window is {} s, not the configured {} s; the stream's own setting applies", config.duplicate_window.as_secs(), wanted.duplicate_window.as_secs());
    }
    let memory = config.storage == stream::StorageType::Memory;
    if memory && !plan {
        tracing::warn!(
            stream = %name,
            "nats sink: stream {name} keeps its messages in memory (allow_memory_storage = true): a server restart loses them and the duplicate-id window, so delivery is at least once, not exactly once"
        );
    }
    Ok(StreamReport {
        line: format!(
            "stream {name} {verb}: subjects {:?}, {}, {} replica(s), {}duplicate_window {} s",
            config.subjects,
            if memory {
                "memory storage (allow_memory_storage: at least once)"
            } else {
                "file storage"
            },
            config.num_replicas,
            if config.max_age.is_zero() {
                String::new()
            } else {
                format!("max_age {} s, ", config.max_age.as_secs())
            },
            config.duplicate_window.as_secs()
        ),
    })
}

/// A stream in memory loses its messages and its duplicate-id window when
/// the server restarts: the replay after that stores messages again (and
/// the messages before it are gone). Refused unless allowed; `exists`
/// tells a stream found so from one that would be created so.
fn check_storage(
    name: &str,
    storage: stream::StorageType,
    allow: bool,
    exists: bool,
) -> Result<(), NatsError> {
    if storage != stream::StorageType::Memory || allow {
        return Ok(());
    }
    let (what, fix) = if exists {
        (
            "uses memory storage",
            format!("recreate it with file storage (storage cannot be changed in place: `nats stream rm {name}`, then let pgcdc create it, or `nats stream add {name} --storage file`)"),
        )
    } else {
        (
            "would be created with memory storage (storage = \"memory\")",
            "use storage = \"file\" in [sinks.stream]".to_owned(),
        )
    };
    Err(NatsError::permanent(
        "stream",
        format!(
            "stream {name} {what}, which loses its messages and its duplicate-id window when the server restarts, so the sink cannot be exactly once on it: {fix}, or set allow_memory_storage = true in [sinks.stream] to accept at-least-once delivery"
        ),
    ))
}

/// Whether the servers can hold `replicas` copies of a stream about to be
/// created, judged (for `pgcdc validate`, which creates nothing) from what
/// the connected server told the client: a server outside a cluster holds
/// one; a cluster member advertises the client URLs of the cluster's
/// servers (`connect_urls`, one or more per server), so fewer URLs than
/// replicas means fewer servers. A cluster that advertises nothing
/// (`no_advertise`) cannot be judged here; creating the stream then tells.
/// `run` leaves the judgement to the server's answer, which names the fix
/// the same way (see [`create_error`]).
fn check_placement(
    name: &str,
    replicas: usize,
    info: &async_nats::ServerInfo,
) -> Result<(), NatsError> {
    if replicas <= 1 {
        return Ok(());
    }
    let advertised = {
        let mut urls: Vec<&str> = info.connect_urls.iter().map(String::as_str).collect();
        urls.sort_unstable();
        urls.dedup();
        urls.len()
    };
    let problem = match &info.cluster {
        None => format!(
            "replicas = {replicas} needs a JetStream cluster of at least {replicas} servers, and server {} is not clustered: set replicas = 1 in [sinks.stream], or connect to a cluster",
            info.server_name
        ),
        Some(cluster) if advertised > 0 && advertised < replicas => format!(
            "replicas = {replicas} needs {replicas} JetStream servers, and cluster {cluster} advertises {advertised} server URL(s) ({}): lower replicas in [sinks.stream] to at most the number of JetStream servers, or add servers",
            info.connect_urls.join(", ")
        ),
        Some(_) => return Ok(()),
    };
    Err(NatsError::permanent(
        "stream",
        format!("stream {name} would be created with {problem}"),
    ))
}

/// How many times a stream creation the server failed on its side is tried.
const CREATE_ATTEMPTS: u32 = 5;

/// Creates the stream, trying again (after 0.1, 0.2, 0.4, 0.8 s) when the server
/// answers with a failure of its own (status 500). Seen with nats-server 2.9 while
/// other clients created and deleted streams of the same account: "error creating store
/// for stream", the server's log saying the account's store directory was missing for a
/// moment. A creation that raced with itself is no harm: creating a stream that exists
/// with the same configuration succeeds.
async fn create_stream(
    js: &jetstream::Context,
    config: &stream::Config,
) -> Result<stream::Stream, CreateStreamError> {
    let mut delay = Duration::from_millis(100);
    let mut attempt = 1;
    loop {
        match js.create_stream(config.clone()).await {
            Err(e) if attempt < CREATE_ATTEMPTS && server_failure(&e) => {
                tracing::warn!(stream = %config.name, error = %e, attempt,
                    "nats sink: the server failed to create the stream; trying again");
                tokio::time::sleep(delay).await;
                delay *= 2;
                attempt += 1;
            }
            result => return result,
        }
    }
}

/// A JetStream API error with a status of 500 or above: the server failed, not the
/// request.
fn server_failure(e: &CreateStreamError) -> bool {
    matches!(e.kind(), CreateStreamErrorKind::JetStream(j) if j.code() >= 500)
}

/// The error of creating the stream, with the fix when the server cannot
/// hold the replicas asked for. A server failure that outlasted the retries is
/// transient (the job's next start tries again); the rest are permanent.
fn create_error(name: &str, replicas: usize, e: &CreateStreamError) -> NatsError {
    let code = match e.kind() {
        CreateStreamErrorKind::JetStream(j) => Some(j.error_code()),
        _ => None,
    };
    let hint = match code {
        Some(c) if c == jetstream::ErrorCode::STREAM_REPLICAS_NOT_SUPPORTED => format!(
            "; replicas = {replicas} needs a JetStream cluster of at least {replicas} servers, and this server is not clustered: set replicas = 1 in [sinks.stream], or connect to a cluster"
        ),
        // No placement (2.9: "no suitable peers"), or not room enough.
        Some(c)
            if replicas > 1
                && (c == jetstream::ErrorCode::CLUSTER_NO_PEERS
                    || c == jetstream::ErrorCode::INSUFFICIENT_RESOURCES) =>
        {
            format!(
            "; replicas = {replicas} needs {replicas} JetStream servers of the cluster with room for the stream: lower replicas in [sinks.stream] to at most the number of JetStream servers, or add servers"
            )
        }
        _ => String::new(),
    };
    let message = format!("creating stream {name}: {e}{hint}");
    if server_failure(e) {
        NatsError::transient("stream", message)
    } else {
        NatsError::permanent("stream", message)
    }
}

fn wanted_config(options: &NatsSinkOptions, name: &str) -> stream::Config {
    stream::Config {
        name: name.to_owned(),
        subjects: options.stream_subjects(),
        storage: match options.stream.storage {
            NatsStorage::File => stream::StorageType::File,
            NatsStorage::Memory => stream::StorageType::Memory,
        },
        num_replicas: options.stream.replicas,
        max_age: options.stream.max_age.unwrap_or(Duration::ZERO),
        duplicate_window: options.stream.duplicate_window,
        ..Default::default()
    }
}

fn is_not_found(e: &async_nats::jetstream::context::GetStreamError) -> bool {
    matches!(e.kind(), GetStreamErrorKind::JetStream(j)
        if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND)
}

/// Every subject the sink publishes on must be in the stream.
fn check_subjects(
    name: &str,
    subjects: &[String],
    template: &SubjectTemplate,
    transactions: bool,
    whose: &str,
) -> Result<(), NatsError> {
    for pattern in template.patterns(transactions) {
        if !subjects.iter().any(|s| covers(s, &pattern)) {
            return Err(NatsError::permanent(
                "stream",
                format!("stream {name}: {whose} {subjects:?} do not cover {pattern:?}, which the sink publishes on; add it (or a wildcard such as \"{}.>\") to the stream's subjects, or change the sink's subject/prefix", pattern.split('.').next().unwrap_or(&pattern)),
            ));
        }
    }
    Ok(())
}

/// A replay after a crash republishes what the last checkpoint does not
/// cover: up to one checkpoint interval of messages, plus the restart.
/// JetStream drops those repeats only within its duplicate window.
pub(crate) fn check_window(
    name: &str,
    window: Duration,
    interval: Option<Duration>,
) -> Result<(), NatsError> {
    let interval = interval.unwrap_or(Duration::ZERO);
    if interval + DEDUPE_MARGIN >= window {
        return Err(NatsError::permanent(
            "stream",
            format!(
                "stream {name} drops repeated messages for {} s (duplicate_window), but a replay after a crash can reach back the checkpoint interval ({} s) plus {} s for the restart: messages older than the window would be stored twice. Raise duplicate_window_secs in [sinks.stream] (an existing stream: `nats stream edit {name} --dupe-window`) above {} s, or lower checkpoint.interval_ms",
                window.as_secs_f64(),
                interval.as_secs_f64(),
                DEDUPE_MARGIN.as_secs(),
                (interval + DEDUPE_MARGIN).as_secs_f64()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_must_outlast_the_interval_and_the_margin() {
        let w = Duration::from_secs(120);
        assert!(check_window("S", w, Some(Duration::from_secs(30))).is_ok());
        assert!(check_window("S", w, None).is_ok());
        let e = check_window("S", w, Some(Duration::from_secs(60))).unwrap_err();
        assert!(!e.transient);
        assert!(e.message.contains("duplicate_window"), "{e}");
        assert!(e.message.contains("checkpoint.interval_ms"), "{e}");
        assert!(check_window("S", Duration::from_secs(30), None).is_err());
    }

    #[test]
    fn replicas_are_judged_by_what_the_server_advertises() {
        let urls = |n: usize| {
            (0..n)
                .map(|i| format!("10.0.0.{i}:4222"))
                .collect::<Vec<_>>()
        };
        let single = async_nats::ServerInfo {
            server_name: "n1".into(),
            connect_urls: urls(1),
            ..Default::default()
        };
        assert!(check_placement("S", 1, &single).is_ok());
        let e = check_placement("S", 3, &single).unwrap_err();
        assert!(!e.transient);
        assert!(
            e.message.contains("stream S") && e.message.contains("not clustered"),
            "{e}"
        );
        assert!(
            e.message.contains("set replicas = 1 in [sinks.stream]"),
            "{e}"
        );

        let cluster = |n| async_nats::ServerInfo {
            cluster: Some("c".into()),
            connect_urls: urls(n),
            ..Default::default()
        };
        assert!(check_placement("S", 3, &cluster(3)).is_ok());
        let e = check_placement("S", 5, &cluster(3)).unwrap_err();
        assert!(
            e.message.contains("replicas = 5 needs 5 JetStream servers"),
            "{e}"
        );
        assert!(e.message.contains("advertises 3 server URL(s)"), "{e}");
        assert!(
            e.message.contains("lower replicas in [sinks.stream]"),
            "{e}"
        );
        // A URL listed twice is one server; a cluster advertising nothing
        // cannot be judged before the stream is created.
        let mut twice = cluster(2);
        twice.connect_urls.push(twice.connect_urls[0].clone());
        assert!(check_placement("S", 3, &twice).is_err());
        assert!(check_placement("S", 5, &cluster(0)).is_ok());
    }

    #[test]
    fn memory_storage_is_refused_unless_allowed() {
        use stream::StorageType::{File, Memory};
        assert!(check_storage("S", File, false, true).is_ok());
        assert!(check_storage("S", File, false, false).is_ok());
        assert!(check_storage("S", Memory, true, true).is_ok());
        assert!(check_storage("S", Memory, true, false).is_ok());
        for exists in [true, false] {
            let e = check_storage("S", Memory, false, exists).unwrap_err();
            assert!(!e.transient);
            assert!(e.message.contains("stream S"), "{e}");
            assert!(e.message.contains("memory storage"), "{e}");
            assert!(
                e.message.contains("file storage") || e.message.contains("storage = \"file\""),
                "{e}"
            );
            assert!(
                e.message
                    .contains("allow_memory_storage = true in [sinks.stream]"),
                "{e}"
            );
        }
    }

    #[test]
    fn subjects_that_miss_the_template_are_named() {
        let t = SubjectTemplate::parse("{prefix}.{schema}.{table}", "cdc", 1).unwrap();
        assert!(check_subjects("S", &["cdc.>".into()], &t, true, "x").is_ok());
        let e = check_subjects("S", &["cdc.*.*".into()], &t, false, "x").unwrap_err();
        assert!(e.message.contains("cdc.message"), "{e}");
        assert!(check_subjects(
            "S",
            &["cdc.*.*".into(), "cdc.message".into()],
            &t,
            false,
            "x"
        )
        .is_ok());
        let e = check_subjects(
            "S",
            &["cdc.*.*".into(), "cdc.message".into()],
            &t,
            true,
            "x",
        )
        .unwrap_err();
        assert!(e.message.contains("cdc.transaction"), "{e}");
        let e = check_subjects("S", &["other.>".into()], &t, false, "x").unwrap_err();
        assert!(e.message.contains("other.>"), "{e}");
    }
}

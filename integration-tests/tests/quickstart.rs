//! `pgcdc quickstart` end to end: the real binary starts its own throwaway
//! server, crashes `pgcdc run` twice mid-stream and reports its checks.
//!
//! Needs the binary built next to the tests (`cargo test --workspace` does
//! that; otherwise `cargo build -p pgcdc --bin pgcdc`) and the
//! PostgreSQL server programs.

// Test code: a failed step must fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::Duration;

use integration_tests::run_pgcdc;

const TIMEOUT: Duration = Duration::from_secs(120);

/// The number after `label` on the report line starting with it.
fn number(report: &str, label: &str) -> u64 {
    let line = report
        .lines()
        .find(|l| l.trim_start().starts_with(label))
        .unwrap_or_else(|| panic!("no {label:?} line in:\n{report}"));
    line.trim_start()[label.len()..]
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number in {line:?}"))
}

/// The path on the report line starting with `label`.
fn path(report: &str, label: &str) -> PathBuf {
    let line = report
        .lines()
        .find(|l| l.trim_start().starts_with(label))
        .unwrap_or_else(|| panic!("no {label:?} line in:\n{report}"));
    let rest = line.trim_start()[label.len()..].trim();
    PathBuf::from(rest.split(" (").next().unwrap())
}

#[tokio::test]
async fn quickstart_survives_two_crashes_and_reports_exact_results() {
    let out = run_pgcdc(&["quickstart", "--kills", "2"], TIMEOUT)
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "quickstart failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert_eq!(
        stdout.matches("SIGKILLed `pgcdc run` mid-stream").count(),
        2,
        "{stdout}"
    );

    let written = number(&stdout, "rows written:");
    let lines = number(&stdout, "change events:");
    let reads = number(&stdout, "snapshot reads:");
    assert!(
        reads >= 2000,
        "the rows there before pgcdc started are read\n{stdout}"
    );
    let distinct = number(&stdout, "distinct events:");
    let duplicates = number(&stdout, "duplicates:");
    let missing = number(&stdout, "missing:");
    assert!(written > 0, "{stdout}");
    assert_eq!(
        distinct, written,
        "every written change delivered once\n{stdout}"
    );
    assert_eq!(missing, 0, "{stdout}");
    assert_eq!(lines, distinct + duplicates, "{stdout}");
    for check in [
        "replayed events equal the table: ok",
        "<= oldest retained checkpoint",
        "  equal: ok",
        "each change counted once: ok",
        "checks passed",
    ] {
        assert!(stdout.contains(check), "no {check:?} in:\n{stdout}");
    }
    assert!(!stdout.contains("FAILED"), "{stdout}");

    // Without --keep nothing is left behind.
    for label in ["config:", "log:", "cluster:"] {
        let p = path(&stdout, label);
        assert!(!p.exists(), "{} was left behind", p.display());
    }
}

#[tokio::test]
async fn quickstart_keep_leaves_files_in_the_chosen_dir() {
    let dir = std::env::temp_dir().join(format!("pgcdc-quickstart-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = run_pgcdc(
        &[
            "quickstart",
            "--kills",
            "1",
            "--keep",
            "--dir",
            dir.to_str().unwrap(),
        ],
        TIMEOUT,
    )
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "quickstart failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let config = path(&stdout, "config:");
    let events = path(&stdout, "events:");
    let cluster = path(&stdout, "cluster:");
    assert_eq!(config, dir.join("pgcdc.toml"));
    assert!(std::fs::read_to_string(&config)
        .unwrap()
        .contains("type = \"keyed_aggregate\""));
    let event_lines = std::fs::read_to_string(&events).unwrap().lines().count() as u64;
    assert_eq!(
        event_lines,
        number(&stdout, "change events:")
            + number(&stdout, "snapshot reads:")
            + number(&stdout, "aggregate updates:")
            + number(&stdout, "transaction records:")
    );
    // The cluster directory stays, its server stopped.
    assert!(cluster.join("data").join("PG_VERSION").is_file());
    assert!(!cluster.join("data").join("postmaster.pid").exists());

    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&cluster);
}

#[tokio::test]
async fn quickstart_without_server_programs_says_how_to_install_them() {
    let out = tokio::process::Command::new(integration_tests::pgcdc_binary().unwrap())
        .args(["quickstart"])
        .env("PGCDC_PG_BINDIR", "/nonexistent/pgcdc-test")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("apt-get install postgresql"), "{stderr}");
    assert!(stderr.contains("/nonexistent/pgcdc-test"), "{stderr}");
}

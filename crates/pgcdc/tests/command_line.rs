//! The `pgcdc` binary's command line, run as a child process. (Having an
//! integration test here also makes `cargo test --workspace` build the
//! binary that the end-to-end tests in `integration-tests` run.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

fn pgcdc(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_pgcdc"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run pgcdc: {e}"))
}

#[test]
fn help_lists_every_command() {
    let out = pgcdc(&["--help"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    for command in ["run", "validate", "checkpoints", "quickstart", "slot"] {
        assert!(text.contains(command), "{command} missing from:\n{text}");
    }
    assert!(text.contains("Exit status:"), "{text}");
    for line in [
        "2  configuration",
        "3  cannot connect",
        "4  refused to start",
    ] {
        assert!(text.contains(line), "{line} missing from:\n{text}");
    }
}

#[test]
fn a_missing_configuration_file_is_named_in_the_error() {
    let out = pgcdc(&["validate", "--config", "/nonexistent/pgcdc.toml"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/pgcdc.toml"), "{err}");
    // A configuration error, printed once.
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.matches("/nonexistent/pgcdc.toml").count(), 1, "{err}");
}

//! Compiles `proto/pgcdc/checkpoint/v1/checkpoint.proto` with protox (pure Rust, no system
//! `protoc`) and generates the private prost types with `bytes::Bytes` for every `bytes`
//! field, so large operator state is never copied on decode.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    // `proto` links to the workspace's `proto/`; `cargo package` copies what it
    // points at, so the published crate builds on its own.
    let proto_root = manifest_dir.join("proto");
    let file = proto_root.join("pgcdc/checkpoint/v1/checkpoint.proto");
    println!("cargo:rerun-if-changed={}", file.display());

    let fds = protox::compile([&file], [&proto_root])?;
    prost_build::Config::new().bytes(["."]).compile_fds(fds)?;
    Ok(())
}

//! The `pgcdc` command.

fn main() {
    println!("pgcdc {}", env!("CARGO_PKG_VERSION"));
}

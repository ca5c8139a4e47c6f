//! Shared helpers for pgcdc benchmarks.

//! Sinks.

//! checkpoint-api (work in progress).
#![forbid(unsafe_code)]

//! PostgreSQL test harness for pgcdc (work in progress).

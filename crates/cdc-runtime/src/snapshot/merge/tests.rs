//! Tests of the snapshot merger.

use super::*;

type M = Merger<&'static str, i64, (i64, &'static str)>;

/// The key of a test row `(key, payload)`.
fn first<K: Clone, P>(row: &(K, P)) -> Option<K> {
    Some(row.0.clone())
}

fn emitted(out: Result<HighWatermark<&'static str, (i64, &'static str)>, MergeError>) -> Vec<i64> {
    match out {
        Ok(HighWatermark::Emit { rows, .. }) => rows.into_iter().map(|(k, _)| k).collect(),
        other => panic!("expected Emit, got {other:?}"),
    }
}

#[test]
fn only_changes_between_low_and_high_drop_rows() {
    let mut m = M::new();
    m.start(1, "t").unwrap();
    m.rows(1, vec![(3, "c"), (1, "a"), (2, "b"), (4, "d")])
        .unwrap();
    m.changed(&"t", &1); // before LW: part of the read
    assert_eq!(m.low_watermark(1), Watermark::Opened);
    m.changed(&"t", &2);
    m.changed(&"other", &3); // another table's key 3
    let out = m.high_watermark(1, first);
    m.changed(&"t", &4); // after HW: changes nothing
    assert_eq!(emitted(out), vec![3, 1, 4]);
    assert!(
        m.windows.is_empty() && m.chunks.is_empty(),
        "finished chunk released"
    );
}

#[test]
fn a_truncate_inside_the_window_drops_every_row_read() {
    let mut m = M::new();
    m.start(1, "t").unwrap();
    m.start(2, "t").unwrap();
    m.rows(1, vec![(1, "a"), (2, "b")]).unwrap();
    m.rows(2, vec![(3, "c")]).unwrap();
    m.truncated(&"t"); // before any LW: the reads saw it
    assert_eq!(m.low_watermark(1), Watermark::Opened);
    m.truncated(&"t");
    assert_eq!(m.low_watermark(2), Watermark::Opened);
    assert_eq!(emitted(m.high_watermark(1, first)), Vec::<i64>::new());
    assert_eq!(emitted(m.high_watermark(2, first)), vec![3]);
}

#[test]
fn overlapping_windows_each_see_their_own_changes() {
    let mut m = M::new();
    for id in [1, 2] {
        m.start(id, "t").unwrap();
        m.rows(id, vec![(1, "a"), (2, "b")]).unwrap();
    }
    let _ = m.low_watermark(1);
    m.changed(&"t", &1);
    let _ = m.low_watermark(2);
    m.changed(&"t", &2);
    assert_eq!(emitted(m.high_watermark(1, first)), Vec::<i64>::new());
    assert_eq!(emitted(m.high_watermark(2, first)), vec![1]);
}

#[test]
fn stale_and_repeated_watermarks_are_ignored() {
    let mut m = M::new();
    assert_eq!(m.low_watermark(7), Watermark::Ignored);
    assert_eq!(m.high_watermark(7, first), Ok(HighWatermark::Ignored));
    m.start(1, "t").unwrap();
    m.rows(1, vec![(1, "a")]).unwrap();
    assert_eq!(m.low_watermark(1), Watermark::Opened);
    m.changed(&"t", &1);
    assert_eq!(m.low_watermark(1), Watermark::Ignored); // keeps the first window
    assert_eq!(emitted(m.high_watermark(1, first)), Vec::<i64>::new());
    assert_eq!(m.low_watermark(1), Watermark::Ignored);
    assert_eq!(m.high_watermark(1, first), Ok(HighWatermark::Ignored));
    assert_eq!(m.rows(1, vec![]), Err(MergeError::UnknownChunk(1)));
}

#[test]
fn rows_pending_then_emit() {
    let mut m = M::new();
    m.start(1, "t").unwrap();
    let _ = m.low_watermark(1);
    m.changed(&"t", &2);
    assert_eq!(m.high_watermark(1, first), Ok(HighWatermark::RowsPending));
    assert_eq!(m.in_flight(), 1);
    m.rows(1, vec![(1, "a"), (2, "b")]).unwrap();
    let rows = vec![(1, "a")];
    assert_eq!(
        m.high_watermark(1, first),
        Ok(HighWatermark::Emit {
            table: "t",
            rows,
            dropped: 1
        })
    );
}

#[test]
fn misuse_is_a_typed_error() {
    let mut m = M::new();
    m.start(1, "t").unwrap();
    assert_eq!(m.start(1, "u"), Err(MergeError::ChunkInUse(1)));
    m.rows(1, vec![]).unwrap();
    assert_eq!(m.rows(1, vec![]), Err(MergeError::RowsAlreadyDelivered(1)));
    assert_eq!(m.rows(2, vec![]), Err(MergeError::UnknownChunk(2)));
    // HW before LW: the window is unknown, so the chunk is forgotten.
    assert_eq!(
        m.high_watermark(1, first),
        Err(MergeError::HighBeforeLow(1))
    );
    assert_eq!(m.in_flight(), 0);
    assert_eq!(m.low_watermark(1), Watermark::Ignored);
}

#[test]
fn abandon_all_returns_every_chunk_in_flight() {
    let mut m = M::new();
    for id in [5, 2, 9] {
        m.start(id, "t").unwrap();
    }
    let _ = m.low_watermark(2);
    m.changed(&"t", &1);
    assert_eq!(m.abandon_all(), vec![2, 5, 9]);
    assert_eq!(m.in_flight(), 0);
    assert!(m.windows.is_empty());
    assert_eq!(m.high_watermark(2, first), Ok(HighWatermark::Ignored));
    m.start(2, "t").unwrap(); // the id is free again
}

/// The acceptance test: random interleavings of chunk reads and
/// concurrent commits; the merged output equals the tables' final state.
mod model {
    use super::super::*;
    use super::first;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, VecDeque};
    use std::error::Error;

    /// splitmix64, so a seed replays the whole simulation.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n.max(1)
        }
        fn chance(&mut self, percent: u64) -> bool {
            self.below(100) < percent
        }
    }

    const TABLES: usize = 2;
    type Tables = [BTreeMap<i64, u64>; TABLES];
    /// Each chunk's read.
    type Reads = HashMap<ChunkId, Vec<(i64, u64)>>;

    #[derive(Debug)]
    enum Input {
        Start(ChunkId, usize),
        Low(ChunkId),
        High(ChunkId),
        Rows(ChunkId),
        /// (table, key, version or `None` for a delete, old key of a key-changing update)
        Change(usize, i64, Option<u64>, Option<i64>),
    }

    #[derive(Debug, Clone, Copy)]
    struct Params {
        seed: u64,
        keys: u64,
        chunk_size: u64,
        readers: usize,
        commits: usize,
    }

    /// Simulates readers and writers; returns the merger's input, each
    /// chunk's read, and the tables' final state.
    fn simulate(p: Params) -> (Vec<Input>, Reads, Tables) {
        let mut rng = Rng(p.seed);
        let mut tables: Tables = Default::default();
        let mut version = 0;
        for table in &mut tables {
            for key in 0..p.keys as i64 {
                if rng.chance(60) {
                    version += 1;
                    table.insert(key, version);
                }
            }
        }
        // One transaction of 1-3 inserts, updates, key changes or deletes.
        let mut commit = |rng: &mut Rng, tables: &mut Tables, log: &mut Vec<Input>| {
            let t = rng.below(TABLES as u64) as usize;
            for _ in 0..=rng.below(3) {
                let (key, new_key) = (rng.below(p.keys) as i64, rng.below(p.keys) as i64);
                version += 1;
                let (table, v) = (&mut tables[t], Some(version));
                let (key, v, old) = match (table.contains_key(&key), rng.below(3)) {
                    (true, 0) => (key, None, None),
                    (true, 1) if !table.contains_key(&new_key) => (new_key, v, Some(key)),
                    _ => (key, v, None),
                };
                if let Some(old) = old {
                    table.remove(&old);
                }
                match v {
                    Some(v) => table.insert(key, v),
                    None => table.remove(&key),
                };
                log.push(Input::Change(t, key, v, old));
            }
        };
        let mut queue: VecDeque<(usize, i64)> = (0..TABLES)
            .flat_map(|t| {
                (0..p.keys as i64)
                    .step_by(p.chunk_size as usize)
                    .map(move |lo| (t, lo))
            })
            .collect();
        // A reader's chunk: (id, table, first key, steps done: 0 started, 1 LW, 2 read).
        let mut readers: Vec<Option<(ChunkId, usize, i64, u8)>> = vec![None; p.readers];
        let (mut log, mut reads) = (Vec::new(), HashMap::new());
        let (mut next_id, mut commits) = (100, p.commits);
        while !queue.is_empty() || readers.iter().any(Option::is_some) {
            if commits > 0 && rng.chance(45) {
                commits -= 1;
                commit(&mut rng, &mut tables, &mut log);
                continue;
            }
            let r = rng.below(p.readers as u64) as usize;
            readers[r] = match readers[r].take() {
                None => queue.pop_front().map(|(t, lo)| {
                    next_id += 1;
                    log.push(Input::Start(next_id, t));
                    (next_id, t, lo, 0)
                }),
                Some((id, t, lo, 0)) => {
                    log.push(Input::Low(id));
                    Some((id, t, lo, 1))
                }
                Some((id, t, lo, 1)) => {
                    let hi = lo + p.chunk_size as i64;
                    reads.insert(id, tables[t].range(lo..hi).map(|(k, v)| (*k, *v)).collect());
                    Some((id, t, lo, 2))
                }
                Some((id, ..)) => {
                    log.push(Input::High(id));
                    None
                }
            };
        }
        for _ in 0..commits {
            commit(&mut rng, &mut tables, &mut log);
        }
        // Rows reach the merger anywhere after start: before LW, inside
        // the window, or only once HW was seen (the RowsPending path).
        for id in 101..=next_id {
            let find = |f: &dyn Fn(&Input) -> bool| log.iter().position(f).unwrap_or(0);
            let start = find(&|i| matches!(i, Input::Start(c, _) if *c == id));
            let high = find(&|i| matches!(i, Input::High(c) if *c == id));
            if !rng.chance(20) {
                let at = start + 1 + rng.below((high - start) as u64) as usize;
                log.insert(at, Input::Rows(id));
            }
        }
        (log, reads, tables)
    }

    /// Feeds the merger and applies its output to a sink. With
    /// `honour_changes` false the merger never hears of a change, which
    /// disables the merge rule.
    fn replay(
        log: &[Input],
        reads: &Reads,
        honour_changes: bool,
    ) -> Result<Tables, Box<dyn Error>> {
        let mut m: Merger<usize, i64, (i64, u64)> = Merger::new();
        let mut sink: Tables = Default::default();
        for input in log {
            match input {
                Input::Start(id, t) => m.start(*id, *t)?,
                Input::Low(id) => {
                    if m.low_watermark(*id) != Watermark::Opened {
                        return Err(format!("LW({id}) ignored").into());
                    }
                }
                Input::Rows(id) => m.rows(*id, reads[id].clone())?,
                Input::Change(t, key, version, old_key) => {
                    for k in old_key.iter().chain([key]).filter(|_| honour_changes) {
                        m.changed(t, k);
                    }
                    if let Some(old) = old_key {
                        sink[*t].remove(old);
                    }
                    match version {
                        Some(v) => sink[*t].insert(*key, *v),
                        None => sink[*t].remove(key),
                    };
                }
                Input::High(id) => {
                    let mut out = m.high_watermark(*id, first)?;
                    if out == HighWatermark::RowsPending {
                        m.rows(*id, reads[id].clone())?;
                        out = m.high_watermark(*id, first)?;
                    }
                    let HighWatermark::Emit { table, rows, .. } = out else {
                        return Err(format!("HW({id}): {out:?}").into());
                    };
                    sink[table].extend(rows);
                }
            }
        }
        match m.in_flight() {
            0 => Ok(sink),
            n => Err(format!("{n} chunks still in flight").into()),
        }
    }

    /// Runs one simulation; the error names the seed that replays it.
    fn run(p: Params, honour_changes: bool) -> Result<(), String> {
        let (log, reads, tables) = simulate(p);
        let sink = replay(&log, &reads, honour_changes)
            .map_err(|e| format!("seed {}: {e} ({p:?})", p.seed))?;
        if sink != tables {
            return Err(format!(
                "seed {}: merged {sink:?} != final {tables:?} ({p:?})",
                p.seed
            ));
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn merged_output_equals_final_tables(
            seed: u64, keys in 1u64..48, chunk_size in 1u64..12, readers in 1usize..=4, commits in 0usize..80,
        ) {
            let result = run(Params { seed, keys, chunk_size, readers, commits }, true);
            prop_assert!(result.is_ok(), "{}", result.err().unwrap_or_default());
        }
    }

    #[test]
    fn model_fails_without_the_merge_rule() {
        let params = |seed| Params {
            seed,
            keys: 32,
            chunk_size: 8,
            readers: 3,
            commits: 60,
        };
        let failing = (0..200)
            .filter(|&seed| run(params(seed), false).is_err())
            .count();
        assert!(
            failing > 20,
            "only {failing}/200 seeds caught a merger that never drops rows"
        );
        for seed in 0..200 {
            if let Err(e) = run(params(seed), true) {
                panic!("{e}");
            }
        }
    }
}

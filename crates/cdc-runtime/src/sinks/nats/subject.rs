//! Subjects: the template (`{prefix}.{schema}.{table}`), the escaping of
//! names into subject tokens, partitions by key, and whether a stream's
//! subjects cover the ones the sink publishes on.

use std::fmt::Write as _;

/// A parsed subject template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SubjectTemplate {
    parts: Vec<Part>,
    /// The prefix, for the subjects of records without a table.
    prefix: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Schema,
    Table,
    Partition,
}

/// Why a template cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("subject template {template:?}: {reason}")]
pub struct TemplateError {
    /// The template.
    pub template: String,
    /// What is wrong.
    pub reason: String,
}

impl SubjectTemplate {
    /// Parses `template` with `{prefix}` replaced by `prefix`. `partitions`
    /// is the number of partitions: `{partition}` needs more than one, and
    /// more than one needs `{partition}`.
    pub(crate) fn parse(
        template: &str,
        prefix: &str,
        partitions: u32,
    ) -> Result<Self, TemplateError> {
        let err = |reason: String| TemplateError {
            template: template.to_owned(),
            reason,
        };
        if prefix.is_empty() || !prefix.split('.').all(valid_literal_token) {
            return Err(err(format!(
                "the prefix {prefix:?} is not a NATS subject (dot-separated tokens without spaces, '*' or '>')"
            )));
        }
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = template;
        let mut has_partition = false;
        while let Some(open) = rest.find('{') {
            literal.push_str(&rest[..open]);
            let Some(close) = rest[open..].find('}') else {
                return Err(err("a '{' is not closed".into()));
            };
            let token = &rest[open + 1..open + close];
            rest = &rest[open + close + 1..];
            let part = match token {
                "prefix" => {
                    literal.push_str(prefix);
                    continue;
                }
                "schema" => Part::Schema,
                "table" => Part::Table,
                "partition" => {
                    has_partition = true;
                    Part::Partition
                }
                other => {
                    return Err(err(format!(
                        "unknown token {{{other}}}; the tokens are {{prefix}}, {{schema}}, {{table}} and {{partition}}"
                    )))
                }
            };
            if !literal.is_empty() {
                parts.push(Part::Literal(std::mem::take(&mut literal)));
            }
            parts.push(part);
        }
        literal.push_str(rest);
        if literal.contains('}') {
            return Err(err("a '}' has no '{'".into()));
        }
        if !literal.is_empty() {
            parts.push(Part::Literal(literal));
        }
        if partitions == 0 {
            return Err(err("partitions must be at least 1".into()));
        }
        if partitions > 1 && !has_partition {
            return Err(err(format!(
                "partitions = {partitions} needs a {{partition}} token in the subject"
            )));
        }
        let parsed = SubjectTemplate {
            parts,
            prefix: prefix.to_owned(),
        };
        // Every token must be non-empty and free of wildcards once rendered.
        let pattern = parsed.pattern();
        if !pattern
            .split('.')
            .all(|t| t == "*" || valid_literal_token(t))
        {
            return Err(err(format!(
                "it renders as {pattern:?}, which is not a NATS subject (dot-separated non-empty tokens, no spaces, and no '*' or '>' of its own)"
            )));
        }
        Ok(parsed)
    }

    /// The subject of a record of `schema.table` in `partition`.
    pub(crate) fn render(&self, schema: &str, table: &str, partition: u32, out: &mut String) {
        out.clear();
        for part in &self.parts {
            match part {
                Part::Literal(s) => out.push_str(s),
                Part::Schema => escape_token(schema, out),
                Part::Table => escape_token(table, out),
                Part::Partition => {
                    let _ = write!(out, "{partition}");
                }
            }
        }
    }

    /// The subject of transaction boundaries (`{prefix}.transaction`).
    pub(crate) fn transaction_subject(&self) -> String {
        format!("{}.transaction", self.prefix)
    }

    /// The subject of logical decoding messages (`{prefix}.message`).
    pub(crate) fn message_subject(&self) -> String {
        format!("{}.message", self.prefix)
    }

    /// The template as a subject pattern: each token that holds a name or
    /// a partition is `*`.
    pub(crate) fn pattern(&self) -> String {
        let mut s = String::new();
        for part in &self.parts {
            match part {
                Part::Literal(l) => s.push_str(l),
                // A marker byte that no literal token holds (literals are checked).
                _ => s.push('\u{1}'),
            }
        }
        s.split('.')
            .map(|t| if t.contains('\u{1}') { "*" } else { t })
            .collect::<Vec<_>>()
            .join(".")
    }

    /// Every subject pattern the sink publishes on: the template's, the
    /// prefix's `message` subject, and with `transactions` (Debezium's
    /// transaction metadata) its `transaction` subject.
    pub(crate) fn patterns(&self, transactions: bool) -> Vec<String> {
        let mut all = vec![self.pattern(), self.message_subject()];
        if transactions {
            all.push(self.transaction_subject());
        }
        all
    }
}

/// A literal subject token: non-empty, printable, no wildcards or spaces.
fn valid_literal_token(t: &str) -> bool {
    !t.is_empty() && t.bytes().all(|b| !needs_escape(b) || b == b'%')
}

fn needs_escape(b: u8) -> bool {
    matches!(b, b'.' | b'*' | b'>' | b'%' | b' ' | b'\t' | b'\r' | b'\n') || b < 0x20 || b == 0x7f
}

/// Appends `name` as one subject token: the bytes NATS gives a meaning to
/// or forbids (`.`, `*`, `>`, whitespace, control characters) and `%`
/// itself are percent-encoded (`my.table` → `my%2Etable`), so distinct
/// names stay distinct. An empty name (PostgreSQL has none) is `%00`, so
/// the token is never empty.
pub(crate) fn escape_token(name: &str, out: &mut String) {
    if name.is_empty() {
        out.push_str("%00");
        return;
    }
    for ch in name.chars() {
        if ch.is_ascii() && needs_escape(ch as u8) {
            let _ = write!(out, "%{:02X}", ch as u8);
        } else {
            out.push(ch);
        }
    }
}

/// Whether every subject `pattern` matches is matched by the stream
/// subject `filter` (NATS wildcards: `*` one token, `>` the rest).
pub(crate) fn covers(filter: &str, pattern: &str) -> bool {
    let mut f = filter.split('.');
    let mut p = pattern.split('.');
    loop {
        match (f.next(), p.next()) {
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(pt)) => {
                if pt == ">" {
                    return false;
                }
            }
            (Some(ft), Some(pt)) => {
                if ft != pt {
                    return false;
                }
            }
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// The partition of a record whose key serializes to `key` (Kafka's
/// default partitioner: murmur2 of the key bytes, made positive, modulo
/// the number of partitions), so a key keeps its partition, and so its
/// order, for as long as the number of partitions stays the same.
pub(crate) fn partition_of(key: &[u8], partitions: u32) -> u32 {
    if partitions <= 1 {
        return 0;
    }
    (murmur2(key) & 0x7fff_ffff) % partitions
}

/// MurmurHash2 (32-bit) with Kafka's seed, as `org.apache.kafka.common.utils.Utils.murmur2`.
fn murmur2(data: &[u8]) -> u32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let len = data.len();
    let mut h = SEED ^ (len as u32);
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if let Some(&b) = tail.first() {
        h ^= u32::from(b);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

#[cfg(test)]
mod tests;

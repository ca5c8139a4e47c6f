//! Where in `pgcdc.toml` a setting is: `file:line:column` and its key path
//! (`checkpoint.interval_ms`, `sinks[1].type`), for error messages.
//!
//! The key path comes from walking the parsed document's spans
//! ([`toml::de::DeTable`]) rather than from serde's error path: the TOML
//! parser already knows every key's byte range, so no second deserializer
//! wrapper is needed.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use toml::de::{DeTable, DeValue};
use toml::Spanned;

/// A position in the configuration file (1-based line and column, the column
/// counted in characters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file.
    pub path: PathBuf,
    /// Line, from 1.
    pub line: usize,
    /// Column, from 1, in characters.
    pub column: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.path.display(), self.line, self.column)
    }
}

/// The 1-based line and column (in characters) of byte `offset` of `text`;
/// an offset past the end is the end, one inside a character is that
/// character.
pub fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut line = 1;
    let mut column = 1;
    for (i, c) in text.char_indices() {
        if i >= offset {
            break;
        }
        if c == '\n' {
            line += 1;
            column = 1;
        } else {
            // A byte offset inside a multi-byte character lands on it.
            if i + c.len_utf8() > offset {
                break;
            }
            column += 1;
        }
    }
    (line, column)
}

impl Location {
    /// The location of byte `offset` of `text`, the contents of `path`.
    pub fn at(path: &Path, text: &str, offset: usize) -> Location {
        let (line, column) = line_column(text, offset);
        Location {
            path: path.to_owned(),
            line,
            column,
        }
    }
}

/// One step of a key path.
enum Step {
    Key(String),
    Index(usize),
}

fn render(steps: &[Step]) -> String {
    let mut out = String::new();
    for step in steps {
        match step {
            Step::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

fn contains(span: &Range<usize>, at: usize) -> bool {
    span.start <= at && at < span.end.max(span.start + 1)
}

/// The key path of the innermost key or value of `text` whose span holds
/// byte `at` (`None` when `at` is outside every key, e.g. in a comment, or
/// the text does not parse).
pub(super) fn key_path_at(text: &str, at: usize) -> Option<String> {
    let root = DeTable::parse(text).ok()?;
    let mut steps = Vec::new();
    walk_table(root.get_ref(), at, &mut steps);
    (!steps.is_empty()).then(|| render(&steps))
}

fn walk_table(table: &DeTable<'_>, at: usize, steps: &mut Vec<Step>) {
    for (key, value) in table.iter() {
        if contains(&key.span(), at) {
            steps.push(Step::Key(key.get_ref().to_string()));
            return;
        }
        if contains(&value.span(), at) {
            steps.push(Step::Key(key.get_ref().to_string()));
            walk_value(value, at, steps);
            return;
        }
    }
    // A `[table]` or `[[array]]` header's span need not hold its entries:
    // look inside every table for the innermost match.
    for (key, value) in table.iter() {
        let mut inner = vec![Step::Key(key.get_ref().to_string())];
        walk_value(value, at, &mut inner);
        if inner.len() > 1 {
            steps.extend(inner);
            return;
        }
    }
}

fn walk_value(value: &Spanned<DeValue<'_>>, at: usize, steps: &mut Vec<Step>) {
    match value.get_ref() {
        DeValue::Table(t) => walk_table(t, at, steps),
        DeValue::Array(a) => {
            for (i, item) in a.iter().enumerate() {
                let before = steps.len();
                steps.push(Step::Index(i));
                if contains(&item.span(), at) {
                    walk_value(item, at, steps);
                    return;
                }
                walk_value(item, at, steps);
                if steps.len() > before + 1 {
                    return;
                }
                steps.truncate(before);
            }
        }
        _ => {}
    }
}

/// The byte offset of the key `path` (dotted; `sinks.url` matches the first
/// `[[sinks]]` entry that has `url`) in `text`, if the file sets it. When
/// only a prefix is set (`pipeline` for `pipeline.batch_size`), the
/// longest such prefix.
pub(super) fn key_offset(text: &str, path: &str) -> Option<usize> {
    let root = DeTable::parse(text).ok()?;
    let keys: Vec<&str> = path.split('.').collect();
    find_in_table(root.get_ref(), &keys)
}

fn find_in_table(table: &DeTable<'_>, keys: &[&str]) -> Option<usize> {
    let (first, rest) = keys.split_first()?;
    let (key, value) = table.get_key_value(*first)?;
    if rest.is_empty() {
        return Some(key.span().start);
    }
    find_in_value(value, rest).or(Some(key.span().start))
}

fn find_in_value(value: &Spanned<DeValue<'_>>, keys: &[&str]) -> Option<usize> {
    match value.get_ref() {
        DeValue::Table(t) => find_in_table(t, keys),
        DeValue::Array(a) => a.iter().find_map(|item| find_in_value(item, keys)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_column_count_lines_and_characters() {
        let text = "a = 1\n# é\nbé = -5\n";
        assert_eq!(line_column(text, 0), (1, 1));
        assert_eq!(line_column(text, 4), (1, 5));
        // Line 3 starts after "a = 1\n# é\n" (6 + 5 bytes).
        let line3 = text.find("bé").unwrap();
        assert_eq!(line_column(text, line3), (3, 1));
        // "-5" follows "bé = ": 5 characters but 6 bytes.
        let value = text.find("-5").unwrap();
        assert_eq!(line_column(text, value), (3, 6));
        // Inside the two bytes of 'é': the column of 'é'.
        assert_eq!(line_column(text, line3 + 2), (3, 2));
        // Past the end: the end.
        assert_eq!(line_column(text, 1000), (4, 1));
    }

    const DOC: &str = "[source]\nport = 70000\n\n[[sinks]]\ntype = \"null\"\n\n[[sinks]]\ntype = \"file\"\npath = \"/x\"\n\n[checkpoint]\ninterval_ms = -5\n";

    #[test]
    fn key_path_of_an_offset_names_sections_arrays_and_keys() {
        let at = |needle: &str| DOC.find(needle).unwrap();
        assert_eq!(
            key_path_at(DOC, at("70000")).as_deref(),
            Some("source.port")
        );
        assert_eq!(
            key_path_at(DOC, at("-5")).as_deref(),
            Some("checkpoint.interval_ms")
        );
        assert_eq!(
            key_path_at(DOC, at("\"/x\"")).as_deref(),
            Some("sinks[1].path")
        );
        assert_eq!(
            key_path_at(DOC, at("interval_ms")).as_deref(),
            Some("checkpoint.interval_ms")
        );
    }

    #[test]
    fn key_offsets_find_keys_and_fall_back_to_the_section() {
        let offset = key_offset(DOC, "checkpoint.interval_ms").unwrap();
        assert_eq!(line_column(DOC, offset), (12, 1));
        let offset = key_offset(DOC, "sinks.path").unwrap();
        assert_eq!(line_column(DOC, offset), (9, 1));
        // Not set in the file: the section that would hold it.
        let offset = key_offset(DOC, "checkpoint.keep").unwrap();
        assert_eq!(line_column(DOC, offset), (11, 2));
        assert_eq!(key_offset(DOC, "snapshot.readers"), None);
    }
}

//! `hstore` as Debezium writes it: `hstore.handling.mode=json` a string
//! holding a JSON object (`"{\"a\":\"1\",\"b\":null}"`), `map` a JSON
//! object. The pairs come out in the order Debezium's `java.util.HashMap`
//! iterates them (by the bucket of Java's `String.hashCode`, then in
//! insertion order), so that the bytes match, not only the meaning.
//!
//! The server's text (`"a"=>"1", "b"=>NULL`) and binary forms are parsed
//! without trusting them: a malformed value is reported as `None`.

use super::super::json::write_str;
use crate::encoding::HstoreHandlingMode;

/// One key and its value (`None` for `NULL`).
pub(crate) type Pair = (String, Option<String>);

/// Parses `hstore_out` text: `"k"=>"v"` pairs separated by `, `, values
/// possibly `NULL`, `\` escaping inside quotes. Unquoted words are taken as
/// `hstore_in` takes them.
pub(crate) fn parse_text(text: &str) -> Option<Vec<Pair>> {
    let mut pairs = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let (key, after) = token(rest)?;
        let key = key?;
        let after = after.trim_start().strip_prefix("=>")?.trim_start();
        let (value, after) = token(after)?;
        pairs.push((key, value));
        rest = after.trim_start();
        if let Some(r) = rest.strip_prefix(',') {
            rest = r.trim_start();
            if rest.is_empty() {
                return None;
            }
        } else if !rest.is_empty() {
            return None;
        }
    }
    Some(pairs)
}

/// One key or value: quoted (with escapes), or a bare word; a bare `NULL`
/// is `None`.
fn token(s: &str) -> Option<(Option<String>, &str)> {
    if let Some(body) = s.strip_prefix('"') {
        let mut out = String::new();
        let mut chars = body.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => out.push(chars.next()?.1),
                '"' => return Some((Some(out), body.get(i + 1..)?)),
                c => out.push(c),
            }
        }
        return None;
    }
    let end = s
        .find(|c: char| c.is_whitespace() || c == ',' || c == '=' || c == '"')
        .unwrap_or(s.len());
    if end == 0 {
        return None;
    }
    let (word, rest) = s.split_at(end);
    if word.eq_ignore_ascii_case("null") {
        Some((None, rest))
    } else {
        Some((Some(word.to_owned()), rest))
    }
}

/// Parses the binary send format: an `int32` count, then per pair an
/// `int32` key length and key, an `int32` value length (-1 for `NULL`) and
/// value.
pub(crate) fn parse_binary(bytes: &[u8]) -> Option<Vec<Pair>> {
    let (count, mut rest) = read_i32(bytes)?;
    let count = usize::try_from(count).ok()?;
    let mut pairs = Vec::with_capacity(count.min(rest.len() / 8));
    for _ in 0..count {
        let (key, r) = read_str(rest)?;
        let (value, r) = read_str(r)?;
        pairs.push((key?, value));
        rest = r;
    }
    rest.is_empty().then_some(pairs)
}

fn read_i32(bytes: &[u8]) -> Option<(i32, &[u8])> {
    let (head, rest) = bytes.split_first_chunk::<4>()?;
    Some((i32::from_be_bytes(*head), rest))
}

fn read_str(bytes: &[u8]) -> Option<(Option<String>, &[u8])> {
    let (len, rest) = read_i32(bytes)?;
    if len < 0 {
        return Some((None, rest));
    }
    let len = usize::try_from(len).ok()?;
    let text = rest.get(..len)?;
    Some((
        Some(std::str::from_utf8(text).ok()?.to_owned()),
        rest.get(len..)?,
    ))
}

/// Java's `String.hashCode` (over UTF-16 code units).
fn java_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// The pairs in `java.util.HashMap` iteration order after inserting them
/// in the given order (a later duplicate key replaces the value in place).
pub(crate) fn java_hash_map_order(pairs: Vec<Pair>) -> Vec<Pair> {
    let mut unique: Vec<Pair> = Vec::with_capacity(pairs.len());
    for (k, v) in pairs {
        match unique.iter_mut().find(|(uk, _)| *uk == k) {
            Some(slot) => slot.1 = v,
            None => unique.push((k, v)),
        }
    }
    // Table size: 16, doubled while the size passes 3/4 of it.
    let mut capacity: u64 = 16;
    while unique.len() as u64 > capacity * 3 / 4 && capacity < 1 << 30 {
        capacity *= 2;
    }
    let bucket = |k: &str| {
        let h = java_hash(k) as u32;
        u64::from(h ^ (h >> 16)) & (capacity - 1)
    };
    // A stable sort keeps insertion order within a bucket.
    unique.sort_by_key(|(k, _)| bucket(k));
    unique
}

/// Writes the pairs per `mode`.
pub(crate) fn write_pairs(out: &mut Vec<u8>, pairs: Vec<Pair>, mode: HstoreHandlingMode) {
    let pairs = java_hash_map_order(pairs);
    match mode {
        HstoreHandlingMode::Map => {
            out.push(b'{');
            for (i, (k, v)) in pairs.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(out, k);
                out.push(b':');
                match v {
                    Some(v) => write_str(out, v),
                    None => out.extend_from_slice(b"null"),
                }
            }
            out.push(b'}');
        }
        HstoreHandlingMode::Json => write_str(out, &jackson_object(&pairs)),
    }
}

/// The JSON object Jackson's generator writes for the pairs (control
/// characters as `\u00XX` with upper-case hex).
fn jackson_object(pairs: &[Pair]) -> String {
    let mut s = String::from("{");
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        jackson_str(&mut s, k);
        s.push(':');
        match v {
            Some(v) => jackson_str(&mut s, v),
            None => s.push_str("null"),
        }
    }
    s.push('}');
    s
}

fn jackson_str(s: &mut String, text: &str) {
    s.push('"');
    for c in text.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            '\n' => s.push_str("\\n"),
            '\r' => s.push_str("\\r"),
            '\t' => s.push_str("\\t"),
            '\u{8}' => s.push_str("\\b"),
            '\u{c}' => s.push_str("\\f"),
            c if (c as u32) < 0x20 => s.push_str(&format!("\\u{:04X}", c as u32)),
            c => s.push(c),
        }
    }
    s.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(text: &str) -> Vec<Pair> {
        parse_text(text).unwrap()
    }

    fn written(text: &str, mode: HstoreHandlingMode) -> String {
        let mut out = Vec::new();
        write_pairs(&mut out, pairs(text), mode);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn parses_what_the_server_prints() {
        assert_eq!(
            pairs(r#""a"=>"1", "b"=>NULL, "q\"k"=>"v\\w""#),
            vec![
                ("a".to_owned(), Some("1".to_owned())),
                ("b".to_owned(), None),
                ("q\"k".to_owned(), Some("v\\w".to_owned())),
            ]
        );
        assert_eq!(pairs(""), vec![]);
        assert_eq!(pairs("a=>b"), vec![("a".to_owned(), Some("b".to_owned()))]);
        for bad in [
            r#""a"=>"#,
            r#""a"=>"1" "b""#,
            r#""a"=>"1","#,
            r#""a"#,
            "=>x",
            r#"NULL=>"1""#,
        ] {
            assert_eq!(parse_text(bad), None, "{bad}");
        }
    }

    #[test]
    fn binary_form() {
        let mut b = vec![0, 0, 0, 2];
        for (k, v) in [("a", Some("1")), ("b", None)] {
            b.extend_from_slice(&(k.len() as i32).to_be_bytes());
            b.extend_from_slice(k.as_bytes());
            match v {
                Some(v) => {
                    b.extend_from_slice(&(v.len() as i32).to_be_bytes());
                    b.extend_from_slice(v.as_bytes());
                }
                None => b.extend_from_slice(&(-1i32).to_be_bytes()),
            }
        }
        assert_eq!(parse_binary(&b), Some(pairs(r#""a"=>"1", "b"=>NULL"#)));
        assert_eq!(parse_binary(&b[..b.len() - 1]), None);
        assert_eq!(parse_binary(&[0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff]), None);
    }

    #[test]
    fn hash_map_order_like_java() {
        // "key" hashes to 106079, bucket 14 of 16; "b" is bucket 2; "Aa"
        // and "BB" both hash to 2112, bucket 0, in insertion order.
        assert_eq!(java_hash("key"), 106079);
        let text = r#""key"=>"x", "BB"=>"2", "b"=>"3", "Aa"=>"1""#;
        assert_eq!(
            written(text, HstoreHandlingMode::Map),
            r#"{"BB":"2","Aa":"1","b":"3","key":"x"}"#
        );
        assert_eq!(
            written("\"b\"=>NULL, \"a\"=>\"x\ty\"", HstoreHandlingMode::Json),
            r#""{\"a\":\"x\\ty\",\"b\":null}""#
        );
        assert_eq!(written("", HstoreHandlingMode::Json), r#""{}""#);
    }
}

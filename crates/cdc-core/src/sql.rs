//! Quoting of SQL identifiers and literals, shared by everything in pgcdc that
//! builds SQL or replication commands as text.
//!
//! Text only: no connection, no escaping rules beyond PostgreSQL's standard
//! ones (`standard_conforming_strings = on`, the default since 9.1).

/// `name` as a double-quoted identifier with every embedded `"` doubled, so
/// any name (spaces, quotes, upper case, keywords) is taken literally.
///
/// ```
/// assert_eq!(cdc_core::sql::quote_ident(r#"we"ird t"#), r#""we""ird t""#);
/// ```
pub fn quote_ident(name: &str) -> String {
    quote(name, '"')
}

/// `value` as a single-quoted literal with every embedded `'` doubled.
/// Backslashes have no special meaning in standard-conforming strings and in
/// replication commands.
///
/// ```
/// assert_eq!(cdc_core::sql::quote_literal("it's"), "'it''s'");
/// ```
pub fn quote_literal(value: &str) -> String {
    quote(value, '\'')
}

fn quote(text: &str, mark: char) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push(mark);
    for c in text.chars() {
        if c == mark {
            out.push(mark);
        }
        out.push(c);
    }
    out.push(mark);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_only_its_own_quote_mark() {
        assert_eq!(quote_ident(""), r#""""#);
        assert_eq!(quote_ident(r#"a"b'c"#), r#""a""b'c""#);
        assert_eq!(quote_literal(r#"a"b'c\"#), r#"'a"b''c\'"#);
        assert_eq!(quote_ident("Ünï cödé"), "\"Ünï cödé\"");
    }
}

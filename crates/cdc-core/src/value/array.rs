//! Arrays: the `{...}` text syntax and the `array_send` binary format.

use super::error::ValueError;
use super::{decode_binary, decode_text, types, Value};
use crate::Oid;

/// PostgreSQL's `MAXDIM`: arrays have at most six dimensions.
pub const MAX_DIMS: usize = 6;

/// One dimension of an [`Array`]: its length and the index of its first element.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ArrayDim {
    /// Number of elements along this dimension (at least 1).
    pub len: u32,
    /// Index of the first element (1 unless the server printed `[lb:ub]=`).
    pub lower_bound: i32,
}

/// A PostgreSQL array: dimensions plus the elements in row-major order.
///
/// An empty array (`{}`) has no dimensions and no elements. Elements may be
/// [`Value::Null`]. Elements borrow from the column bytes where the text form
/// needed no unescaping, and always in binary form.
#[derive(Debug, Clone, PartialEq)]
pub struct Array<'a> {
    element_type: Oid,
    dims: Vec<ArrayDim>,
    elements: Vec<Value<'a>>,
}

impl<'a> Array<'a> {
    /// An array of `element_type`; `None` unless the dimension lengths multiply to the
    /// element count, there are at most [`MAX_DIMS`] of them, and no upper bound overflows.
    pub fn new(element_type: Oid, dims: Vec<ArrayDim>, elements: Vec<Value<'a>>) -> Option<Self> {
        if dims.len() > MAX_DIMS || dims.iter().any(|d| d.len == 0 || upper(*d).is_none()) {
            return None;
        }
        let count = dims
            .iter()
            .try_fold(1usize, |acc, d| acc.checked_mul(d.len as usize))?;
        let ok = if dims.is_empty() {
            elements.is_empty()
        } else {
            count == elements.len()
        };
        ok.then_some(Array {
            element_type,
            dims,
            elements,
        })
    }

    /// The element type OID.
    pub const fn element_type(&self) -> Oid {
        self.element_type
    }

    /// The dimensions, outermost first; empty for `{}`.
    pub fn dims(&self) -> &[ArrayDim] {
        &self.dims
    }

    /// All elements in row-major order.
    pub fn elements(&self) -> &[Value<'a>] {
        &self.elements
    }

    /// Consume the array, keeping the elements.
    pub fn into_elements(self) -> Vec<Value<'a>> {
        self.elements
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.elements.is_empty()
    }

    /// The same array with no borrows.
    pub fn into_owned(self) -> Array<'static> {
        Array {
            element_type: self.element_type,
            dims: self.dims,
            elements: self.elements.into_iter().map(Value::into_owned).collect(),
        }
    }
}

/// The upper bound of a dimension, if it fits in an `i32`.
fn upper(d: ArrayDim) -> Option<i32> {
    i32::try_from(i64::from(d.lower_bound) + i64::from(d.len) - 1).ok()
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'\x0b' | b'\x0c')
}

struct TextParser<'a> {
    raw: &'a [u8],
    pos: usize,
    array_oid: Oid,
    element_oid: Oid,
    delim: u8,
    ndim: Option<usize>,
    lens: [Option<u32>; MAX_DIMS],
    elements: Vec<Value<'a>>,
}

/// Why text was rejected; element errors carry their own `ValueError`.
enum TextError {
    Syntax(&'static str),
    Element(usize, ValueError),
}

impl From<&'static str> for TextError {
    fn from(reason: &'static str) -> Self {
        TextError::Syntax(reason)
    }
}

impl<'a> TextParser<'a> {
    fn peek(&self) -> Option<u8> {
        self.raw.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while self.peek().is_some_and(is_space) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn int(&mut self) -> Result<i32, &'static str> {
        self.skip_ws();
        let start = self.pos;
        if matches!(self.peek(), Some(b'+' | b'-')) {
            self.pos += 1;
        }
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.pos += 1;
        }
        let s = self.raw.get(start..self.pos).unwrap_or_default();
        let r = std::str::from_utf8(s)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or("expected an array bound");
        self.skip_ws();
        r
    }

    /// `[lb:ub][lb:ub]...=`
    fn bounds(&mut self) -> Result<Vec<ArrayDim>, &'static str> {
        let mut dims = Vec::new();
        while self.eat(b'[') {
            if dims.len() == MAX_DIMS {
                return Err("more than 6 dimensions");
            }
            let first = self.int()?;
            let (lb, ub) = if self.eat(b':') {
                (first, self.int()?)
            } else {
                (1, first)
            };
            if !self.eat(b']') {
                return Err("expected ] after array bounds");
            }
            let len = i64::from(ub) - i64::from(lb) + 1;
            let len = u32::try_from(len)
                .ok()
                .filter(|l| *l > 0)
                .ok_or("upper bound less than lower bound")?;
            dims.push(ArrayDim {
                len,
                lower_bound: lb,
            });
            self.skip_ws();
        }
        if !self.eat(b'=') {
            return Err("expected = after array dimensions");
        }
        Ok(dims)
    }

    /// The contents of one `{...}` at `depth`; the opening brace is already consumed.
    fn level(&mut self, depth: usize) -> Result<(), TextError> {
        self.skip_ws();
        if self.eat(b'}') {
            return if depth == 0 {
                Ok(())
            } else {
                Err("empty sub-array".into())
            };
        }
        let mut count: u32 = 0;
        loop {
            self.skip_ws();
            if self.eat(b'{') {
                if depth + 1 >= MAX_DIMS || self.ndim.is_some_and(|n| depth + 1 >= n) {
                    return Err("unexpected { (nesting deeper than the array's dimensions)".into());
                }
                self.level(depth + 1)?;
            } else {
                if *self.ndim.get_or_insert(depth + 1) != depth + 1 {
                    return Err("element where a sub-array was expected".into());
                }
                self.element()?;
            }
            count = count.checked_add(1).ok_or("too many elements")?;
            self.skip_ws();
            match self.peek() {
                Some(b'}') => {
                    self.pos += 1;
                    break;
                }
                Some(b) if b == self.delim => self.pos += 1,
                Some(_) => return Err("expected a delimiter or }".into()),
                None => return Err("unterminated array".into()),
            }
        }
        let slot = self.lens.get_mut(depth).ok_or("more than 6 dimensions")?;
        match slot {
            None => *slot = Some(count),
            Some(n) if *n == count => {}
            Some(_) => return Err("sub-arrays with mismatched dimensions".into()),
        }
        Ok(())
    }

    /// One element: quoted and unquoted runs, backslash escapes, surrounding
    /// unquoted whitespace dropped, unquoted `NULL` (any case) is a NULL element.
    fn element(&mut self) -> Result<(), TextError> {
        let start = self.pos;
        // Unescaped content: `None` while it equals raw[start..pos].
        let mut buf: Option<Vec<u8>> = None;
        let mut keep = 0usize;
        let mut in_quotes = false;
        loop {
            let b = self.peek().ok_or("unterminated array element")?;
            if !in_quotes && (b == self.delim || b == b'}') {
                break;
            }
            match b {
                b'"' => {
                    buf.get_or_insert_with(|| {
                        self.raw.get(start..self.pos).unwrap_or_default().to_vec()
                    });
                    in_quotes = !in_quotes;
                    self.pos += 1;
                }
                b'\\' => {
                    let content = buf.get_or_insert_with(|| {
                        self.raw.get(start..self.pos).unwrap_or_default().to_vec()
                    });
                    let c = self
                        .raw
                        .get(self.pos + 1)
                        .copied()
                        .ok_or("unterminated escape in array element")?;
                    content.push(c);
                    keep = content.len();
                    self.pos += 2;
                }
                b'{' if !in_quotes => return Err("unexpected { in array element".into()),
                _ => {
                    self.pos += 1;
                    let len = match &mut buf {
                        Some(content) => {
                            content.push(b);
                            content.len()
                        }
                        None => self.pos - start,
                    };
                    if in_quotes || !is_space(b) {
                        keep = len;
                    }
                }
            }
        }
        let index = self.elements.len();
        let value = match buf {
            None => {
                let text = self.raw.get(start..start + keep).unwrap_or_default();
                if text.is_empty() {
                    return Err("empty unquoted array element".into());
                }
                if text.eq_ignore_ascii_case(b"NULL") {
                    Value::Null
                } else {
                    decode_text(self.element_oid, text).map_err(|e| TextError::Element(index, e))?
                }
            }
            Some(mut content) => {
                content.truncate(keep);
                decode_text(self.element_oid, &content)
                    .map(Value::into_owned)
                    .map_err(|e| TextError::Element(index, e))?
            }
        };
        self.elements.push(value);
        Ok(())
    }
}

/// Parse an array's text form (`{1,2}`, `{{"a","b"},{NULL,"c"}}`, `[0:1]={x,y}`).
///
/// `element_oid` decides how elements are decoded (any OID works: unknown element
/// types become [`Value::Other`]); `array_oid` only labels errors.
pub fn decode_text_array(
    array_oid: Oid,
    element_oid: Oid,
    raw: &[u8],
) -> Result<Array<'_>, ValueError> {
    let mut p = TextParser {
        raw,
        pos: 0,
        array_oid,
        element_oid,
        delim: types::array_delimiter(element_oid),
        ndim: None,
        lens: [None; MAX_DIMS],
        elements: Vec::new(),
    };
    let r = parse_text(&mut p);
    match r {
        Ok(array) => Ok(array),
        Err(TextError::Syntax(reason)) => Err(ValueError::text(p.array_oid, raw, reason)),
        Err(TextError::Element(index, source)) => Err(ValueError::ArrayElement {
            type_oid: p.array_oid,
            index,
            source: Box::new(source),
        }),
    }
}

fn parse_text<'a>(p: &mut TextParser<'a>) -> Result<Array<'a>, TextError> {
    p.skip_ws();
    let explicit = if p.peek() == Some(b'[') {
        Some(p.bounds()?)
    } else {
        None
    };
    p.skip_ws();
    if !p.eat(b'{') {
        return Err("expected {".into());
    }
    p.level(0)?;
    p.skip_ws();
    if p.pos != p.raw.len() {
        return Err("junk after closing }".into());
    }
    let ndim = p.ndim.unwrap_or(0);
    let lens = p.lens.get(..ndim).unwrap_or_default();
    let dims = match explicit {
        Some(dims) => {
            let same =
                dims.len() == lens.len() && dims.iter().zip(lens).all(|(d, l)| Some(d.len) == *l);
            if !same {
                return Err("dimensions do not match the array contents".into());
            }
            dims
        }
        None => lens
            .iter()
            .map(|l| ArrayDim {
                len: l.unwrap_or(0),
                lower_bound: 1,
            })
            .collect(),
    };
    let elements = std::mem::take(&mut p.elements);
    Array::new(p.element_oid, dims, elements).ok_or("inconsistent array dimensions".into())
}

/// Parse an array's binary form (`array_send`): `i32 ndim, i32 has_nulls, u32 element
/// oid, ndim x (i32 len, i32 lower bound)`, then per element `i32 len` (-1 for NULL)
/// and its bytes. The element OID on the wire must equal `element_oid`.
pub fn decode_binary_array(
    array_oid: Oid,
    element_oid: Oid,
    raw: &[u8],
) -> Result<Array<'_>, ValueError> {
    let bad = |reason| ValueError::binary(array_oid, raw, reason);
    let mut rest = raw;
    let mut i32_at = || -> Result<i32, ValueError> {
        let (head, tail) = rest
            .split_first_chunk::<4>()
            .ok_or_else(|| bad("truncated array"))?;
        rest = tail;
        Ok(i32::from_be_bytes(*head))
    };
    let ndim = i32_at()?;
    let flags = i32_at()?;
    let wire_element = i32_at()? as u32;
    let ndim = usize::try_from(ndim)
        .ok()
        .filter(|n| *n <= MAX_DIMS)
        .ok_or_else(|| bad("number of dimensions out of range 0..=6"))?;
    if flags != 0 && flags != 1 {
        return Err(bad("invalid flags"));
    }
    if wire_element != element_oid {
        return Err(bad("element type does not match the array type"));
    }
    let mut dims = Vec::with_capacity(ndim);
    let mut count: usize = 1;
    for _ in 0..ndim {
        let len = i32_at()?;
        let lower_bound = i32_at()?;
        let len = u32::try_from(len).map_err(|_| bad("negative dimension length"))?;
        let dim = ArrayDim { len, lower_bound };
        if len > 0 && upper(dim).is_none() {
            return Err(bad("array bounds overflow"));
        }
        count = count.saturating_mul(len as usize);
        dims.push(dim);
    }
    if ndim == 0 || count == 0 {
        if !rest.is_empty() {
            return Err(bad("trailing bytes after an empty array"));
        }
        return Ok(Array {
            element_type: element_oid,
            dims: Vec::new(),
            elements: Vec::new(),
        });
    }
    // Each element needs at least its 4-byte length: bounds the allocation.
    if count > rest.len() / 4 {
        return Err(bad("more elements than bytes"));
    }
    let mut elements = Vec::with_capacity(count);
    for index in 0..count {
        let (head, tail) = rest
            .split_first_chunk::<4>()
            .ok_or_else(|| bad("truncated array element"))?;
        let len = i32::from_be_bytes(*head);
        rest = tail;
        if len == -1 {
            elements.push(Value::Null);
            continue;
        }
        let len = usize::try_from(len).map_err(|_| bad("negative element length"))?;
        if len > rest.len() {
            return Err(bad("truncated array element"));
        }
        let (bytes, tail) = rest.split_at(len);
        rest = tail;
        let value = decode_binary(element_oid, bytes).map_err(|e| ValueError::ArrayElement {
            type_oid: array_oid,
            index,
            source: Box::new(e),
        })?;
        elements.push(value);
    }
    if !rest.is_empty() {
        return Err(bad("trailing bytes after the last element"));
    }
    Ok(Array {
        element_type: element_oid,
        dims,
        elements,
    })
}

//! # Bodies and "same body"
//!
//! CONTRACT.md section 1: "Same body" compares meaning, not text: JSON object key order is
//! ignored, numbers compare by value. [`canonical_json`] writes a JSON text in one canonical form
//! (object names sorted by their UTF-8 bytes, numbers as exact decimals with no redundant zeros, strings with minimal escapes, no white space), so two bodies
//! mean the same exactly when their canonical forms are equal. The reference server fingerprints
//! the same canonical form.
//!
//! The parser is small and our own so that the browser build carries no `serde_json`: it is
//! exact (numbers are compared as decimals, never through `f64`), limited in depth so that no
//! input can exhaust the stack, and every failure is a [`BodyError`] that says where.
//!
//! Form bodies (`application/x-www-form-urlencoded`) are kept as a flat JSON object of strings;
//! repeated names are arrays ([`form_encode`], [`form_decode`]).

use super::prelude::*;
use super::text::{concat, decimal, push_hex, quoted, LOWER_HEX};

/// How deep arrays and objects may nest before a body is refused.
pub const MAX_DEPTH: usize = 128;

/// A parsed JSON value, with numbers kept as exact canonical decimals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// `null`
    Null,
    /// `true` or `false`
    Bool(bool),
    /// A number in canonical form (see the module docs).
    Number(String),
    /// A string.
    String(String),
    /// An array.
    Array(Vec<Value>),
    /// An object; a name given twice keeps its last value, as `JSON.parse` does.
    Object(Fields),
}

/// An object's members, sorted by name (byte order, as the canonical form writes them) and
/// unique. A sorted list rather than a map: bodies hold a few fields, and a B-tree costs the
/// browser package kilobytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fields(Vec<(String, Value)>);

impl Fields {
    /// No members.
    pub fn new() -> Fields {
        Fields(Vec::new())
    }

    fn find(&self, name: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(n, _)| n.as_str().cmp(name))
    }

    /// Sets `name` to `value`, replacing (and returning) the value it had.
    pub fn insert(&mut self, name: String, value: Value) -> Option<Value> {
        match self.find(&name) {
            Ok(i) => Some(::core::mem::replace(&mut self.0[i].1, value)),
            Err(i) => {
                self.0.insert(i, (name, value));
                None
            }
        }
    }

    /// Adds `value` under `name` as a form does: a name given more than once becomes an array
    /// of its values, in the order given.
    pub fn append(&mut self, name: String, value: Value) {
        match self.get_mut(&name) {
            None => {
                self.insert(name, value);
            }
            Some(Value::Array(items)) => items.push(value),
            Some(slot) => {
                let first = ::core::mem::replace(slot, Value::Null);
                *slot = Value::Array(vec![first, value]);
            }
        }
    }

    /// The value of `name`.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.find(name).ok().map(|i| &self.0[i].1)
    }

    /// The value of `name`, to change it.
    pub fn get_mut(&mut self, name: &str) -> Option<&mut Value> {
        self.find(name).ok().map(|i| &mut self.0[i].1)
    }

    /// The members in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v))
    }

    /// How many members.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

// The members of an object in the order written, as `Fields` (a name given twice keeps its
// last value). Inserting each in place moves every member after it: members written in
// descending order cost a time quadratic in their number, a tenth of a second of CPU for one
// 64 KiB body, and minutes for a few megabytes. A server reads anyone's bodies, so there they
// are sorted once. In the browser the bodies are the page's own, and the standard library's
// sort would cost the package 2.4 KB gzipped (a hand-written merge sort, 0.8 KB): inserted.
// The core's unit tests run on both targets.
if_native! {
    /// An object's members as read: in the order written, sorted once at the end.
    type Members = Vec<(String, Value)>;

    fn add(members: &mut Members, name: String, value: Value) {
        members.push((name, value));
    }

    fn object(mut members: Members) -> Fields {
        // Stable: of equal names, the last written stays last and replaces the others.
        members.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out: Vec<(String, Value)> = Vec::with_capacity(members.len());
        for (name, value) in members {
            match out.last_mut() {
                Some(last) if last.0 == name => last.1 = value,
                _ => out.push((name, value)),
            }
        }
        Fields(out)
    }
}

if_native! {
    /// A form's pairs in the order written, as `Fields`: sorted once (stable), a name given
    /// more than once an array of its values in that order (see [`Fields::append`]).
    fn form_fields(mut pairs: Vec<(String, Value)>) -> Fields {
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out: Vec<(String, Value)> = Vec::with_capacity(pairs.len());
        for (name, value) in pairs {
            match out.last_mut() {
                Some((last, Value::Array(items))) if *last == name => items.push(value),
                Some((last, slot)) if *last == name => {
                    let first = ::core::mem::replace(slot, Value::Null);
                    *slot = Value::Array(vec![first, value]);
                }
                _ => out.push((name, value)),
            }
        }
        Fields(out)
    }
}

if_wasm! {
    fn form_fields(pairs: Vec<(String, Value)>) -> Fields {
        let mut out = Fields::new();
        for (name, value) in pairs {
            out.append(name, value);
        }
        out
    }
}

if_wasm! {
    /// An object's members as read: each inserted in place.
    type Members = Fields;

    fn add(members: &mut Members, name: String, value: Value) {
        members.insert(name, value);
    }

    fn object(members: Members) -> Fields {
        members
    }
}

/// Why a body cannot be read or written.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BodyError {
    /// The text is not JSON.
    Syntax {
        /// What was expected or found.
        message: String,
        /// Byte offset in the text.
        at: usize,
    },
    /// Arrays and objects nest deeper than [`MAX_DEPTH`].
    TooDeep,
    /// A form body must be an object of strings, numbers, booleans or arrays of those.
    NotFlat {
        /// The field that is not flat (empty when the body is not an object at all).
        field: String,
    },
    /// A form body that is not UTF-8 after percent-decoding.
    NotUtf8,
}

impl BodyError {
    /// What [`Display`](::core::fmt::Display) writes (built without `fmt`, see `core::text`).
    pub fn message(&self) -> String {
        match self {
            BodyError::Syntax { message, at } => concat(&[
                "the body is not valid JSON: ",
                message,
                " at byte ",
                &decimal(*at as u64),
            ]),
            BodyError::TooDeep => concat(&[
                "the body nests arrays or objects deeper than ",
                &decimal(MAX_DEPTH as u64),
                " levels",
            ]),
            BodyError::NotFlat { field } if field.is_empty() => {
                "a form body must be an object of fields".to_owned()
            }
            BodyError::NotFlat { field } => concat(&[
                "the form field ",
                &quoted(field),
                " holds an object or a nested array; form fields take strings, numbers, booleans or lists of those",
            ]),
            BodyError::NotUtf8 => "the form body is not UTF-8 text".to_owned(),
        }
    }
}

/// The canonical form of a JSON text (see the module docs).
pub fn canonical_json(text: &str) -> Result<String, BodyError> {
    Ok(parse(text)?.to_canonical())
}

/// Parses a JSON text.
pub fn parse(text: &str) -> Result<Value, BodyError> {
    read(text, true)
}

/// Checks that `text` is JSON that [`parse`] takes, with the same error, building nothing.
pub(crate) fn check(text: &str) -> Result<(), BodyError> {
    read(text, false).map(drop)
}

/// Reads a JSON text; `keep`: builds its value, else only checks it (answering `Null`).
fn read(text: &str, keep: bool) -> Result<Value, BodyError> {
    let mut p = Parser {
        text,
        s: text.as_bytes(),
        i: 0,
        keep,
    };
    p.ws();
    let v = p.value(0)?;
    p.ws();
    if p.i != p.s.len() {
        return Err(p.err("unexpected text after the value"));
    }
    Ok(v)
}

impl Value {
    /// The canonical JSON text of this value.
    pub fn to_canonical(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut String) {
        match self {
            Value::Null => out.push_str("null"),
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Number(n) => out.push_str(n),
            Value::String(s) => write_string(s, out),
            Value::Array(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    v.write(out);
                }
                out.push(']');
            }
            Value::Object(map) => {
                out.push('{');
                for (i, (k, v)) in map.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_string(k, out);
                    out.push(':');
                    v.write(out);
                }
                out.push('}');
            }
        }
    }

    /// The value as a string, when it is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }
}

pub(crate) fn write_string(s: &str, out: &mut String) {
    out.reserve(s.len() + 2);
    out.push('"');
    // Runs that need no escape are copied whole: every byte escaped is ASCII, so each run ends
    // on a character boundary. One table lookup a byte, as the parser's scan does.
    let mut run = 0;
    for (i, &b) in s.as_bytes().iter().enumerate() {
        let escape = ESCAPES[usize::from(b)];
        if escape == 0 {
            continue;
        }
        out.push_str(s.get(run..i).unwrap_or_default());
        out.push('\\');
        out.push(char::from(escape));
        if escape == b'u' {
            out.push_str("00");
            push_hex(out, b, LOWER_HEX);
        }
        run = i + 1;
    }
    out.push_str(s.get(run..).unwrap_or_default());
    out.push('"');
}

/// For each byte, how a JSON string writes it: 0 as itself, else the letter after its
/// backslash (`u` for `\u00XX`, the control characters that have no letter of their own). The
/// parser's scan of a string stops at the same bytes.
const ESCAPES: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = b'u';
        b += 1;
    }
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table[b'\n' as usize] = b'n';
    table[b'\r' as usize] = b'r';
    table[b'\t' as usize] = b't';
    table[0x08] = b'b';
    table[0x0c] = b'f';
    table
};

struct Parser<'a> {
    /// The text, and its bytes.
    text: &'a str,
    s: &'a [u8],
    i: usize,
    /// Whether values are built, or only checked (no allocation; every value read is `Null`).
    keep: bool,
}

impl Parser<'_> {
    fn err(&self, message: &str) -> BodyError {
        BodyError::Syntax {
            message: message.to_owned(),
            at: self.i,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    fn literal(&mut self, word: &str, v: Value) -> Result<Value, BodyError> {
        if self.s[self.i..].starts_with(word.as_bytes()) {
            self.i += word.len();
            Ok(v)
        } else {
            Err(self.err("expected a value"))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, BodyError> {
        if depth > MAX_DEPTH {
            return Err(BodyError::TooDeep);
        }
        match self.peek() {
            None => Err(self.err("unexpected end of text")),
            Some(b'n') => self.literal("null", Value::Null),
            Some(b't') => self.literal("true", Value::Bool(true)),
            Some(b'f') => self.literal("false", Value::Bool(false)),
            Some(b'"') => Ok(match self.string()? {
                Some(s) => Value::String(s),
                None => Value::Null,
            }),
            Some(b'[') => {
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.peek() == Some(b']') {
                    self.i += 1;
                    return Ok(Value::Array(items));
                }
                loop {
                    self.ws();
                    let item = self.value(depth + 1)?;
                    if self.keep {
                        items.push(item);
                    }
                    self.ws();
                    match self.peek() {
                        Some(b',') => self.i += 1,
                        Some(b']') => {
                            self.i += 1;
                            return Ok(Value::Array(items));
                        }
                        _ => return Err(self.err("expected ',' or ']'")),
                    }
                }
            }
            Some(b'{') => {
                self.i += 1;
                let mut members = Members::default();
                self.ws();
                if self.peek() == Some(b'}') {
                    self.i += 1;
                    return Ok(Value::Object(Fields::new()));
                }
                loop {
                    self.ws();
                    if self.peek() != Some(b'"') {
                        return Err(self.err("expected a string as the object's name"));
                    }
                    let k = self.string()?;
                    self.ws();
                    if self.peek() != Some(b':') {
                        return Err(self.err("expected ':'"));
                    }
                    self.i += 1;
                    self.ws();
                    let v = self.value(depth + 1)?;
                    if let Some(k) = k {
                        add(&mut members, k, v);
                    }
                    self.ws();
                    match self.peek() {
                        Some(b',') => self.i += 1,
                        Some(b'}') => {
                            self.i += 1;
                            return Ok(Value::Object(object(members)));
                        }
                        _ => return Err(self.err("expected ',' or '}'")),
                    }
                }
            }
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.err("expected a value")),
        }
    }

    fn hex4(&mut self) -> Result<u32, BodyError> {
        let digits = self
            .s
            .get(self.i..self.i + 4)
            .ok_or_else(|| self.err("unfinished \\u escape"))?;
        let text = ::core::str::from_utf8(digits).map_err(|_| self.err("bad \\u escape"))?;
        let v = u32::from_str_radix(text, 16).map_err(|_| self.err("bad \\u escape"))?;
        if !digits.iter().all(u8::is_ascii_hexdigit) {
            return Err(self.err("bad \\u escape"));
        }
        self.i += 4;
        Ok(v)
    }

    /// A string, or `None` when only checking.
    fn string(&mut self) -> Result<Option<String>, BodyError> {
        self.i += 1; // the opening quote
        let mut out = String::new();
        // Only checking: decoded characters go nowhere (pushing to an empty string that is
        // never grown would still allocate).
        let keep = self.keep;
        let push = |out: &mut String, c: char| {
            if keep {
                out.push(c);
            }
        };
        loop {
            let start = self.i;
            let rest = self.s.get(start..).unwrap_or_default();
            self.i += rest
                .iter()
                .position(|&b| ESCAPES[usize::from(b)] != 0)
                .unwrap_or(rest.len());
            if keep {
                // The scan stopped at an ASCII byte or the end: a character boundary of the
                // text, so this slice is never `None`.
                out.push_str(self.text.get(start..self.i).unwrap_or_default());
            }
            match self.peek() {
                None => return Err(self.err("unfinished string")),
                Some(b'"') => {
                    self.i += 1;
                    return Ok(keep.then_some(out));
                }
                Some(b'\\') => {
                    self.i += 1;
                    let e = self.peek().ok_or_else(|| self.err("unfinished escape"))?;
                    self.i += 1;
                    match e {
                        b'"' => push(&mut out, '"'),
                        b'\\' => push(&mut out, '\\'),
                        b'/' => push(&mut out, '/'),
                        b'b' => push(&mut out, '\u{8}'),
                        b'f' => push(&mut out, '\u{c}'),
                        b'n' => push(&mut out, '\n'),
                        b'r' => push(&mut out, '\r'),
                        b't' => push(&mut out, '\t'),
                        b'u' => {
                            let hi = self.hex4()?;
                            let c = if (0xD800..0xDC00).contains(&hi) {
                                if self.s.get(self.i..self.i + 2) != Some(b"\\u") {
                                    return Err(self.err("lone surrogate in \\u escape"));
                                }
                                self.i += 2;
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return Err(self.err("lone surrogate in \\u escape"));
                                }
                                char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))
                            } else {
                                char::from_u32(hi)
                            };
                            let c = c.ok_or_else(|| self.err("lone surrogate in \\u escape"))?;
                            push(&mut out, c);
                        }
                        _ => return Err(self.err("unknown escape")),
                    }
                }
                Some(_) => return Err(self.err("control character in string")),
            }
        }
    }

    fn digits(&mut self) -> &[u8] {
        let start = self.i;
        while let Some(b'0'..=b'9') = self.peek() {
            self.i += 1;
        }
        &self.s[start..self.i]
    }

    fn number(&mut self) -> Result<Value, BodyError> {
        let negative = self.peek() == Some(b'-');
        if negative {
            self.i += 1;
        }
        let int_at = self.i;
        let int_len = self.digits().len();
        if int_len == 0 {
            return Err(self.err("expected a digit"));
        }
        if int_len > 1 && self.s[int_at] == b'0' {
            return Err(self.err("leading zero in a number"));
        }
        let (mut frac_at, mut frac_len) = (self.i, 0);
        if self.peek() == Some(b'.') {
            self.i += 1;
            frac_at = self.i;
            frac_len = self.digits().len();
            if frac_len == 0 {
                return Err(self.err("expected a digit after '.'"));
            }
        }
        let mut exp: i64 = 0;
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            let exp_negative = match self.peek() {
                Some(b'-') => {
                    self.i += 1;
                    true
                }
                Some(b'+') => {
                    self.i += 1;
                    false
                }
                _ => false,
            };
            let digits = self.digits();
            if digits.is_empty() {
                return Err(self.err("expected a digit in the exponent"));
            }
            for d in digits {
                exp = exp.saturating_mul(10).saturating_add(i64::from(d - b'0'));
            }
            if exp_negative {
                exp = -exp;
            }
        }
        if !self.keep {
            return Ok(Value::Null);
        }
        let (int, frac) = (
            &self.s[int_at..int_at + int_len],
            &self.s[frac_at..frac_at + frac_len],
        );
        Ok(Value::Number(canonical_number(negative, int, frac, exp)))
    }
}

/// `[-]digits × 10^exp` in one form: no leading or trailing zeros in the digits, integers
/// written out up to 21 digits, small fractions as decimals, the rest in exponent form.
fn canonical_number(negative: bool, int: &[u8], frac: &[u8], exp: i64) -> String {
    let mut digits: Vec<u8> = int.iter().chain(frac).copied().collect();
    // Kept within ±i64::MAX, as the parser keeps a written exponent, so that the canonical
    // form reads back as itself.
    let mut exp = exp.saturating_sub(frac.len() as i64).max(-i64::MAX);
    let lead = digits.iter().take_while(|d| **d == b'0').count();
    digits.drain(..lead);
    if digits.is_empty() {
        return "0".to_owned(); // -0 and 0.000 are 0
    }
    while digits.last() == Some(&b'0') {
        digits.pop();
        exp = exp.saturating_add(1);
    }
    let n = digits.len() as i64;
    let mut out = String::from(if negative { "-" } else { "" });
    let push_digits = |out: &mut String, digits: &[u8]| {
        out.extend(digits.iter().map(|&d| char::from(d)));
    };
    // Where the decimal point falls, counted from the digits' start (saturated: an exponent
    // from a body or a record may be anywhere in i64's range).
    let point = exp.saturating_add(n);
    if (0..=21).contains(&point) && exp >= 0 {
        push_digits(&mut out, &digits);
        out.push_str(&"0".repeat(exp as usize));
    } else if exp < 0 && point > -7 {
        if point > 0 {
            let (whole, fraction) = digits.split_at(point as usize);
            push_digits(&mut out, whole);
            out.push('.');
            push_digits(&mut out, fraction);
        } else {
            out.push_str("0.");
            out.push_str(&"0".repeat((-point) as usize));
            push_digits(&mut out, &digits);
        }
    } else {
        push_digits(&mut out, &digits);
        out.push('e');
        if exp < 0 {
            out.push('-');
        }
        out.push_str(&decimal(exp.unsigned_abs()));
    }
    out
}

/// Encodes a flat JSON object as `application/x-www-form-urlencoded`: names in the object's
/// (sorted) order, arrays as repeated names, `null` as an empty value.
pub fn form_encode(json: &str) -> Result<String, BodyError> {
    let Value::Object(map) = parse(json)? else {
        return Err(BodyError::NotFlat {
            field: String::new(),
        });
    };
    let mut out = String::new();
    let mut pair = |name: &str, value: &Value| -> Result<(), BodyError> {
        let text = match value {
            Value::Null => "",
            Value::Bool(true) => "true",
            Value::Bool(false) => "false",
            Value::Number(n) => n,
            Value::String(s) => s,
            _ => {
                return Err(BodyError::NotFlat {
                    field: name.to_owned(),
                })
            }
        };
        if !out.is_empty() {
            out.push('&');
        }
        percent_encode(name, &mut out);
        out.push('=');
        percent_encode(text, &mut out);
        Ok(())
    };
    for (name, value) in map.iter() {
        match value {
            Value::Array(items) => {
                for item in items {
                    pair(name, item)?;
                }
            }
            v => pair(name, v)?,
        }
    }
    Ok(out)
}

/// Decodes an `application/x-www-form-urlencoded` body into the canonical JSON text of a flat
/// object of strings; a name given more than once becomes an array in the order given.
pub fn form_decode(form: &str) -> Result<String, BodyError> {
    let mut pairs = Vec::new();
    for part in form.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = part.split_once('=').unwrap_or((part, ""));
        pairs.push((percent_decode(name)?, Value::String(percent_decode(value)?)));
    }
    Ok(Value::Object(form_fields(pairs)).to_canonical())
}

fn percent_encode(s: &str, out: &mut String) {
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'*' | b'-' | b'.' | b'_' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            b => {
                out.push('%');
                push_hex(out, b, b"0123456789ABCDEF");
            }
        }
    }
}

fn percent_decode(s: &str) -> Result<String, BodyError> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                // Two hex digits, nothing else: from_str_radix alone would take "+1" for 1.
                let hex = b
                    .get(i + 1..i + 3)
                    .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
                    .and_then(|h| ::core::str::from_utf8(h).ok());
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(v) => {
                        out.push(v);
                        i += 2;
                    }
                    // As browsers do: a '%' that starts no escape is kept.
                    None => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| BodyError::NotUtf8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_order_and_white_space_do_not_matter() {
        let a =
            canonical_json(r#"{"subject": "Printer", "email":"a@b.c", "n": [1, {"y":1,"x":2}]}"#);
        let b = canonical_json(r#"{"n":[1,{"x":2,"y":1}],"email":"a@b.c","subject":"Printer"}"#);
        assert_eq!(a, b);
        assert_eq!(
            a.unwrap(),
            r#"{"email":"a@b.c","n":[1,{"x":2,"y":1}],"subject":"Printer"}"#
        );
    }

    #[test]
    fn exponents_at_the_ends_of_the_range_are_kept_without_overflow() {
        // A body (or a stored record) may carry any exponent: the parser saturates it to i64's
        // range, and writing it out again must not overflow (a panic in a debug build).
        let max = i64::MAX;
        for (text, canonical) in [
            (format!("1e{max}"), format!("1e{max}")),
            (format!("123e{max}"), format!("123e{max}")),
            ("1e99999999999999999999999".to_owned(), format!("1e{max}")),
            (format!("-1e-{max}"), format!("-1e-{max}")),
            (format!("12.5e-{max}"), format!("125e-{max}")),
            (
                format!("[0.5e{max}, 5e-99999999999999999999]"),
                format!("[5e{},5e-{max}]", max - 1),
            ),
        ] {
            let once = canonical_json(&text);
            assert_eq!(once.as_deref(), Ok(canonical.as_str()), "{text}");
            // And the canonical form is its own canonical form.
            assert_eq!(
                canonical_json(&canonical).as_deref(),
                Ok(canonical.as_str())
            );
        }
    }

    #[test]
    fn numbers_compare_by_value() {
        let same = [
            ("1", "1.0"),
            ("1", "1e0"),
            ("100", "1e2"),
            ("0.5", "5e-1"),
            ("0", "-0"),
            ("0", "0.000"),
            ("12345678901234567890123", "1.2345678901234567890123e22"),
            ("-1.25", "-125e-2"),
        ];
        for (a, b) in same {
            assert_eq!(canonical_json(a), canonical_json(b), "{a} vs {b}");
        }
        assert_ne!(
            canonical_json("1"),
            canonical_json("1.0000000000000000000001")
        );
        // Exact: beyond f64's precision, still told apart.
        assert_ne!(
            canonical_json("9007199254740993"),
            canonical_json("9007199254740992")
        );
        assert_eq!(canonical_json("1.5").unwrap(), "1.5");
        assert_eq!(canonical_json("0.000015").unwrap(), "0.000015");
        assert_eq!(canonical_json("1e-30").unwrap(), "1e-30");
        assert_eq!(canonical_json("1e400").unwrap(), "1e400");
        // The canonical form is itself JSON and canonical.
        for n in ["1e-30", "1e400", "-0.000015", "123e20"] {
            let c = canonical_json(n).unwrap();
            assert_eq!(canonical_json(&c).unwrap(), c);
        }
    }

    /// Every ASCII character, given as a `\u` escape, is written with the shortest escape JSON
    /// has for it (or none), and reads back as itself.
    #[test]
    fn each_ascii_character_is_written_minimally() {
        for c in 0u8..0x80 {
            let expected = match c {
                b'"' => "\\\"".to_owned(),
                b'\\' => "\\\\".to_owned(),
                b'\n' => "\\n".to_owned(),
                b'\r' => "\\r".to_owned(),
                b'\t' => "\\t".to_owned(),
                0x08 => "\\b".to_owned(),
                0x0c => "\\f".to_owned(),
                0..=0x1f => format!("\\u{c:04x}"),
                _ => char::from(c).to_string(),
            };
            let given = format!("\"a\\u{c:04x}é\"");
            let written = canonical_json(&given).unwrap();
            assert_eq!(written, format!("\"a{expected}é\""), "character {c:#04x}");
            assert_eq!(
                parse(&written).unwrap(),
                Value::String(format!("a{}é", char::from(c))),
                "character {c:#04x}"
            );
        }
    }

    #[test]
    fn strings_keep_their_meaning() {
        assert_eq!(canonical_json(r#""\u00e9\/""#).unwrap(), "\"é/\"");
        assert_eq!(canonical_json(r#""\ud83d\ude00""#).unwrap(), "\"😀\"");
        assert_eq!(canonical_json("\"a\\u0001\"").unwrap(), "\"a\\u0001\"");
        assert!(canonical_json(r#""\ud83d""#).is_err());
        assert!(canonical_json("\"a\nb\"").is_err());
        // Escapes next to characters of several bytes, at either end and in between.
        assert_eq!(
            canonical_json(r#""\"é\\😀\u0001x\n""#).unwrap(),
            r#""\"é\\😀\u0001x\n""#
        );
        assert_eq!(canonical_json(r#""éü""#).unwrap(), r#""éü""#);
    }

    /// Texts that are not JSON, each wrong in its own place.
    const BAD_JSON: [&str; 11] = [
        "",
        "{",
        "[1,]",
        "{\"a\" 1}",
        "01",
        "1.",
        "-",
        "nul",
        "[1] 2",
        "{a:1}",
        "\"\\x\"",
    ];

    #[test]
    fn bad_json_names_the_place() {
        for bad in BAD_JSON {
            match canonical_json(bad) {
                Err(BodyError::Syntax { .. }) => {}
                other => panic!("{bad:?} gave {other:?}"),
            }
        }
        let message = canonical_json("[1, 2,, 3]").unwrap_err().to_string();
        assert!(message.contains("at byte 6"), "{message}");
    }

    /// `check` (Request::check's, building nothing) takes exactly what `parse` takes and
    /// refuses the rest with the same error, the same byte included: over hand-picked texts and
    /// every one-byte deletion, and insertion of a few bytes, in a body with each kind of value.
    #[test]
    fn checking_agrees_with_parsing() {
        let sample = r#" {"s":"a\"b\u00e9\ud83d\ude00\n","n":[-0.5e+3,10,0,1E2],"t":true,"f":false,"z":null,"o":{"x":{}}, "é":[]} "#;
        let mut texts: Vec<String> = BAD_JSON
            .iter()
            .chain(&[
                "\"\\ud800\"",
                "\"\\ud800\\u0041\"",
                "\"\\u12\"",
                "\"a\u{1}\"",
                "1e",
                "-01",
                "[[[]]]",
            ])
            .map(|t| (*t).to_owned())
            .collect();
        texts.push("[".repeat(MAX_DEPTH + 2));
        texts.push(sample.to_owned());
        for (i, _) in sample.char_indices() {
            let mut cut = sample.to_owned();
            cut.remove(i);
            texts.push(cut);
            for extra in ["\"", ",", "}", "0", "\\", "-"] {
                let mut more = sample.to_owned();
                more.insert_str(i, extra);
                texts.push(more);
            }
        }
        assert!(parse(sample).is_ok());
        for text in &texts {
            assert_eq!(check(text), parse(text).map(drop), "{text:?}");
        }
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let deep = "[".repeat(100_000);
        assert_eq!(canonical_json(&deep), Err(BodyError::TooDeep));
        let ok = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(canonical_json(&ok).is_ok());
    }

    #[test]
    fn last_duplicate_name_wins_like_json_parse() {
        assert_eq!(canonical_json(r#"{"a":1,"a":2}"#).unwrap(), r#"{"a":2}"#);
        assert_eq!(
            canonical_json(r#"{"b":1,"a":[2],"b":{"y":3,"x":4,"y":5},"a":6}"#).unwrap(),
            r#"{"a":6,"b":{"x":4,"y":5}}"#
        );
        // Descending, with repeats far apart: sorted once, the last of each name kept.
        assert_eq!(
            canonical_json(r#"{"c":1,"b":2,"a":3,"c":4,"b":5,"c":6,"a":7,"b":8}"#).unwrap(),
            r#"{"a":7,"b":8,"c":6}"#
        );
    }

    #[test]
    fn names_sort_in_byte_order() {
        // Upper case before lower case, and a non-ASCII name after both, as the bytes compare.
        assert_eq!(
            canonical_json(r#"{"é":1,"b":2,"Z":3,"a":4,"":5}"#).unwrap(),
            r#"{"":5,"Z":3,"a":4,"b":2,"é":1}"#
        );
        let Ok(Value::Object(fields)) = parse(r#"{"b":1,"a":2}"#) else {
            panic!("an object")
        };
        assert_eq!(fields.len(), 2);
        assert_eq!(fields.get("a"), Some(&Value::Number("2".into())));
        assert_eq!(fields.get("c"), None);
        let names: Vec<&str> = fields.iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn forms_round_trip() {
        let json = r#"{"subject":"Hi & bye","email":"a+b@c.d","tags":["x","y z"],"n":2,"ok":true}"#;
        let form = form_encode(json).unwrap();
        assert_eq!(
            form,
            "email=a%2Bb%40c.d&n=2&ok=true&subject=Hi+%26+bye&tags=x&tags=y+z"
        );
        assert_eq!(
            form_decode(&form).unwrap(),
            r#"{"email":"a+b@c.d","n":"2","ok":"true","subject":"Hi & bye","tags":["x","y z"]}"#
        );
        assert_eq!(
            form_decode("a=%E2%82%AC&b&c=100%").unwrap(),
            r#"{"a":"€","b":"","c":"100%"}"#
        );
        assert_eq!(form_decode("a=%FF"), Err(BodyError::NotUtf8));
        // Names in descending order, repeated far apart: each name's values in the order given.
        assert_eq!(
            form_decode("c=1&b=2&a=3&c=4&b=5&c=6").unwrap(),
            r#"{"a":"3","b":["2","5"],"c":["1","4","6"]}"#
        );
        // A sign is no hex digit: "%+1" is a kept '%', a space and a 1, as browsers read it.
        assert_eq!(
            form_decode("a=%+1&b=%-1").unwrap(),
            r#"{"a":"% 1","b":"%-1"}"#
        );
        assert_eq!(
            form_encode(r#"{"a":{"b":1}}"#),
            Err(BodyError::NotFlat { field: "a".into() })
        );
        assert!(form_encode("[1]").is_err());
    }
}

//! # Text without `fmt`
//!
//! The core builds its messages, keys and records by hand, with these few helpers, and never
//! through `format!`, `write!` or `{}`-style `Display`: `core::fmt`'s machinery (the formatter,
//! padding, the integer and float printers) costs the browser package kilobytes of wasm. Errors
//! build their text in a `message()` method, and
//! [`display_by_message!`] gives them `Display` and `Error` from it, so native callers lose
//! nothing.

use super::prelude::*;

/// `Display` (and `Error`) for errors that build their text in `message()`.
macro_rules! display_by_message {
    ($($error:ty),*) => {$(
        impl ::core::fmt::Display for $error {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.write_str(&self.message())
            }
        }

        impl ::core::error::Error for $error {}
    )*};
}

/// `s` as a JSON string literal, quoted and escaped: how messages show a name or a value.
pub(crate) fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    super::body::write_string(s, &mut out);
    out
}

/// The parts one after the other: `[..].concat()` without its generic machinery, which costs
/// the browser package a kilobyte.
pub(crate) fn concat(parts: &[&str]) -> String {
    let mut out = String::new();
    for part in parts {
        out.push_str(part);
    }
    out
}

/// The hex digits of JSON escapes and keys.
pub(crate) const LOWER_HEX: &[u8; 16] = b"0123456789abcdef";

/// `byte` as two hex digits from `digits` (upper case for percent-encoding).
pub(crate) fn push_hex(out: &mut String, byte: u8, digits: &[u8; 16]) {
    out.push(char::from(digits[usize::from(byte >> 4)]));
    out.push(char::from(digits[usize::from(byte & 15)]));
}

/// `n` in decimal.
pub(crate) fn decimal(n: u64) -> String {
    let mut out = String::new();
    push_decimal(&mut out, n);
    out
}

/// Writes `n` in decimal at the end of `out`.
pub(crate) fn push_decimal(out: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // ASCII digits: written in one go, not a character at a time.
    out.push_str(::core::str::from_utf8(&digits[at..]).unwrap_or_default());
}

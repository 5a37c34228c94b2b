//! # Keys
//!
//! One key per intended submission (CONTRACT.md section 1). A key is made once, when the
//! submission begins, from 16 random bytes the driver draws from the platform CSPRNG
//! ([`Key::from_random_bytes`], a UUID v4), or derived from a durable id the caller already owns
//! ([`Key::derive`], a UUID v5), so that a restart recomputes the same key. A key the caller brings
//! is checked by [`Key::parse`]: 1 to 255 visible ASCII characters.
//!
//! On the wire the key is a header value, bare (`Idempotency-Key: 8e03...`, what Stripe and most
//! APIs take) or an RFC 8941 string (`"8e03..."`, what the IETF draft says); see [`KeyFormat`].
//! The draft's key is a string Item, which may carry parameters (`"8e03...";p=1`): a server
//! reading one ([`Key::from_header_value`]) accepts well-formed parameters and ignores them.

use super::prelude::*;
use ::core::fmt;

use super::text::{concat, decimal, quoted, LOWER_HEX};

/// The longest key oncekey sends or accepts, in bytes.
pub const MAX_KEY_LEN: usize = 255;

/// The header that carries the key unless configured otherwise.
pub const DEFAULT_KEY_HEADER: &str = "Idempotency-Key";

/// An idempotency key: 1 to 255 visible ASCII characters (`!` to `~`).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(KeyText);

// A key's text. A submission hands its key to every attempt, state change and settlement: on a
// server (many submissions at once) each is a share of one text, not a copy of it; in the
// browser package a plain string, whose code is already there.
if_native! {
    type KeyText = alloc::sync::Arc<str>;
}
if_wasm! {
    type KeyText = String;
}

/// Why a string is not a usable key.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyError {
    /// The key is empty.
    Empty,
    /// The key is longer than [`MAX_KEY_LEN`] bytes.
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// The key holds a character that is not visible ASCII (a space, a control character,
    /// anything outside `!`..=`~`).
    BadCharacter {
        /// The offending character.
        found: char,
        /// Its position, in characters from the start.
        at: usize,
    },
    /// A header value that opens an RFC 8941 string (`"`) but is not a well-formed string Item:
    /// the string, then nothing but parameters (`;key` or `;key=value`).
    BadQuoting,
}

impl KeyError {
    /// What [`Display`](fmt::Display) writes (built without `fmt`, see `core::text`).
    pub fn message(&self) -> String {
        match self {
            KeyError::Empty => "the idempotency key is empty".to_owned(),
            KeyError::TooLong { len } => concat(&[
                "the idempotency key is ",
                &decimal(*len as u64),
                " bytes long; at most ",
                &decimal(MAX_KEY_LEN as u64),
                " are allowed",
            ]),
            KeyError::BadCharacter { found, at } => concat(&[
                "the idempotency key has ",
                &quoted(found.encode_utf8(&mut [0; 4])),
                " at position ",
                &decimal(*at as u64),
                "; only visible ASCII characters (! to ~) are allowed",
            ]),
            KeyError::BadQuoting => {
                "the idempotency key header opens a quoted string (RFC 8941) that is not a well-formed string item"
                    .to_owned()
            }
        }
    }
}

/// How the key is written into its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyFormat {
    /// The key as it is: `Idempotency-Key: 8e03...`. What Stripe and most APIs take.
    #[default]
    Bare,
    /// An RFC 8941 structured-field string: `Idempotency-Key: "8e03..."`. What the IETF
    /// Idempotency-Key draft specifies.
    SfString,
}

impl KeyFormat {
    /// Reads `bare` or `sf-string`.
    pub fn parse(s: &str) -> Option<KeyFormat> {
        match s {
            "bare" => Some(KeyFormat::Bare),
            "sf-string" => Some(KeyFormat::SfString),
            _ => None,
        }
    }
}

impl Key {
    /// A fresh UUID v4 key from 16 bytes of the platform CSPRNG (the version and variant bits
    /// are set here, so any 16 bytes will do).
    pub fn from_random_bytes(bytes: [u8; 16]) -> Key {
        // Written out by hand: uuid's own formatting would bring the formatting machinery into
        // the browser package.
        // Into one array of ASCII bytes first, then one string: a new key is made per send.
        let uuid = uuid::Builder::from_random_bytes(bytes).into_uuid();
        let mut text = [b'-'; 36];
        let mut at = 0;
        for (i, b) in uuid.as_bytes().iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                at += 1;
            }
            // `get_mut`, not an index that could panic (its message would land in the package).
            if let Some([high, low]) = text.get_mut(at..at + 2) {
                *high = LOWER_HEX[usize::from(b >> 4)];
                *low = LOWER_HEX[usize::from(b & 15)];
            }
            at += 2;
        }
        Key(KeyText::from(
            ::core::str::from_utf8(&text).unwrap_or_default(),
        ))
    }

    /// A key derived from a namespace and a durable id the caller owns (UUID v5), so that a
    /// restart computes the same key for the same intended submission.
    pub fn derive(namespace: &uuid::Uuid, id: &str) -> Key {
        Key(KeyText::from(
            uuid::Uuid::new_v5(namespace, id.as_bytes())
                .hyphenated()
                .to_string(),
        ))
    }

    /// Checks a key the caller brings: 1 to 255 visible ASCII characters.
    pub fn parse(s: &str) -> Result<Key, KeyError> {
        if s.is_empty() {
            return Err(KeyError::Empty);
        }
        if let Some((at, found)) = s.chars().enumerate().find(|(_, c)| !is_visible_ascii(*c)) {
            return Err(KeyError::BadCharacter { found, at });
        }
        if s.len() > MAX_KEY_LEN {
            return Err(KeyError::TooLong { len: s.len() });
        }
        Ok(Key(KeyText::from(s)))
    }

    /// Reads a key from a received header value, bare or as an RFC 8941 string Item (the
    /// string, and any parameters, which are checked and ignored), with the surrounding optional
    /// white space of an HTTP field value removed. This is the server's side of [`KeyFormat`].
    pub fn from_header_value(value: &str) -> Result<Key, KeyError> {
        let value = value.trim_matches([' ', '\t']);
        match value.strip_prefix('"') {
            None => Key::parse(value),
            Some(rest) => match sf_string(rest) {
                Some((key, params)) if sf_parameters(params) => Key::parse(&key),
                _ => Err(KeyError::BadQuoting),
            },
        }
    }

    /// The key as a header value in the given format.
    pub fn header_value(&self, format: KeyFormat) -> String {
        match format {
            KeyFormat::Bare => String::from(&*self.0),
            KeyFormat::SfString => {
                let mut out = String::with_capacity(self.0.len() + 2);
                out.push('"');
                for c in self.0.chars() {
                    if c == '"' || c == '\\' {
                        out.push('\\');
                    }
                    out.push(c);
                }
                out.push('"');
                out
            }
        }
    }

    /// The key itself.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first 8 characters, for logs: enough to tell keys apart, not enough to replay one.
    pub fn short(&self) -> &str {
        // Keys are ASCII, so any byte index is a character boundary; `get` all the same, as
        // slicing that could panic brings its messages into the browser package.
        self.0.get(..8).unwrap_or(&self.0)
    }
}

fn is_visible_ascii(c: char) -> bool {
    ('!'..='~').contains(&c)
}

/// An RFC 8941 string whose opening quote is read: its content, unescaped, and what follows its
/// closing quote.
fn sf_string(s: &str) -> Option<(String, &str)> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some((_, e @ ('"' | '\\'))) => out.push(e),
                _ => return None,
            },
            '"' => return Some((out, s.get(at + 1..)?)),
            c => out.push(c),
        }
    }
    None
}

/// `s` split after its leading bytes that `ok` takes (ASCII ones: the split is a character
/// boundary).
fn split_while(s: &str, ok: impl Fn(u8) -> bool) -> (&str, &str) {
    let n = s.bytes().take_while(|b| ok(*b)).count();
    (s.get(..n).unwrap_or(""), s.get(n..).unwrap_or(""))
}

/// Whether `s` is all RFC 8941 parameters (section 3.1.2): `;key` or `;key=value`, a key
/// `(lcalpha / "*") *(lcalpha / DIGIT / "_" / "-" / "." / "*")`, a value a bare item.
fn sf_parameters(mut s: &str) -> bool {
    while let Some(rest) = s.strip_prefix(';') {
        let rest = rest.trim_start_matches(' ');
        let (key, rest) = split_while(rest, |b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-.*".contains(&b)
        });
        if !key.starts_with(|c: char| c.is_ascii_lowercase() || c == '*') {
            return false;
        }
        s = match rest.strip_prefix('=') {
            Some(value) => match sf_bare_item(value) {
                Some(rest) => rest,
                None => return false,
            },
            None => rest,
        };
    }
    s.is_empty()
}

/// What follows the RFC 8941 bare item `s` starts with (section 4.2.3.1): an integer, a
/// decimal, a string, a token, a byte sequence or a boolean; `None` when it starts with none.
fn sf_bare_item(s: &str) -> Option<&str> {
    let tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    match s.bytes().next()? {
        b'-' | b'0'..=b'9' => {
            let (int, rest) = split_while(s.strip_prefix('-').unwrap_or(s), |b| b.is_ascii_digit());
            match rest.strip_prefix('.') {
                None => (1..=15).contains(&int.len()).then_some(rest),
                Some(fraction) => {
                    let (fraction, rest) = split_while(fraction, |b| b.is_ascii_digit());
                    let fits = (1..=12).contains(&int.len()) && (1..=3).contains(&fraction.len());
                    fits.then_some(rest)
                }
            }
        }
        b'"' => {
            let (text, rest) = sf_string(s.get(1..)?)?;
            text.chars()
                .all(|c| (' '..='~').contains(&c))
                .then_some(rest)
        }
        b'A'..=b'Z' | b'a'..=b'z' | b'*' => {
            Some(split_while(s, |b| tchar(b) || b == b':' || b == b'/').1)
        }
        b':' => {
            let (_, rest) = split_while(s.get(1..)?, |b| {
                b.is_ascii_alphanumeric() || b"+/=".contains(&b)
            });
            rest.strip_prefix(':')
        }
        b'?' => s.strip_prefix("?0").or_else(|| s.strip_prefix("?1")),
        _ => None,
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({:?})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key's 128 bits, after checking its text: 32 lowercase hex digits in groups of 8-4-4-4-12,
    /// version 4 (the 13th digit), the RFC 9562 variant (the 17th digit is 8, 9, a or b).
    fn v4_bits(key: &Key) -> u128 {
        let text = key.as_str().as_bytes();
        assert_eq!(text.len(), 36, "{key}");
        let mut bits = 0u128;
        for (i, c) in text.iter().enumerate() {
            let nibble = match c {
                b'-' if matches!(i, 8 | 13 | 18 | 23) => continue,
                b'0'..=b'9' if !matches!(i, 8 | 13 | 18 | 23) => c - b'0',
                b'a'..=b'f' if !matches!(i, 8 | 13 | 18 | 23) => c - b'a' + 10,
                _ => panic!("{key}: {:?} at {i}", *c as char),
            };
            bits = bits << 4 | u128::from(nibble);
        }
        assert_eq!(text[14], b'4', "version 4: {key}");
        assert!(
            matches!(text[19], b'8' | b'9' | b'a' | b'b'),
            "variant: {key}"
        );
        bits
    }

    #[test]
    fn random_bytes_make_a_v4_uuid_whatever_the_bytes() {
        let ones = Key::from_random_bytes([0xff; 16]);
        let zeros = Key::from_random_bytes([0; 16]);
        for key in [&ones, &zeros] {
            let uuid = uuid::Uuid::parse_str(key.as_str()).unwrap();
            assert_eq!(uuid.get_version_num(), 4);
            assert_eq!(uuid.get_variant(), uuid::Variant::RFC4122);
        }
        assert_eq!(v4_bits(&ones), 0xffff_ffff_ffff_4fff_bfff_ffff_ffff_ffff);
        assert_eq!(v4_bits(&zeros), 0x0000_0000_0000_4000_8000_0000_0000_0000);
        assert_ne!(zeros, ones);
    }

    /// A million keys from the platform CSPRNG, drawn as the native driver draws them
    /// (getrandom): every one v4 with the RFC variant, no two alike; every one of the 122 random
    /// bits is 0 in some keys and 1 in others, and in the first 10,000 keys each is set in 45 % to
    /// 55 % of them (one standard deviation is 0.5 %): a byte left out or a bit stuck would show.
    #[test]
    #[cfg(not(all(target_arch = "wasm32", any(target_os = "unknown", target_os = "none"))))]
    fn a_million_keys_from_the_csprng_are_v4_and_never_repeat() {
        const DRAWS: usize = 1_000_000;
        const SAMPLE: usize = 10_000;
        // The version (4) and variant (0b10) bits: where they are, and what they hold.
        const FIXED: u128 = 0x0000_0000_0000_f000_c000_0000_0000_0000;
        const VALUE: u128 = 0x0000_0000_0000_4000_8000_0000_0000_0000;
        let mut seen = std::collections::HashSet::with_capacity(DRAWS);
        let (mut any_one, mut all_ones) = (0u128, u128::MAX);
        let mut ones = [0u32; 128];
        let mut bytes = vec![0u8; 16 * 4096];
        while seen.len() < DRAWS {
            getrandom::fill(&mut bytes).unwrap();
            for chunk in bytes.chunks_exact(16).take(DRAWS - seen.len()) {
                let bits = v4_bits(&Key::from_random_bytes(chunk.try_into().unwrap()));
                assert!(
                    seen.insert(bits),
                    "a key repeated after {} draws",
                    seen.len()
                );
                (any_one, all_ones) = (any_one | bits, all_ones & bits);
                if seen.len() <= SAMPLE {
                    for (bit, count) in ones.iter_mut().enumerate() {
                        *count += (bits >> bit & 1) as u32;
                    }
                }
            }
        }
        assert_eq!(any_one, !FIXED | VALUE, "bits never set: {:032x}", !any_one);
        assert_eq!(all_ones, VALUE, "bits always set: {all_ones:032x}");
        for (bit, count) in ones.iter().enumerate() {
            if FIXED >> bit & 1 == 0 {
                let share = f64::from(*count) / SAMPLE as f64;
                assert!(
                    (0.45..0.55).contains(&share),
                    "bit {bit} is set in {share} of the keys"
                );
            }
        }
    }

    #[test]
    fn derived_keys_are_stable_and_distinct() {
        let ns = uuid::Uuid::from_u128(0x1234);
        assert_eq!(
            Key::derive(&ns, "withdrawal-77"),
            Key::derive(&ns, "withdrawal-77")
        );
        assert_ne!(
            Key::derive(&ns, "withdrawal-77"),
            Key::derive(&ns, "withdrawal-78")
        );
        let other = uuid::Uuid::from_u128(0x5678);
        assert_ne!(
            Key::derive(&ns, "withdrawal-77"),
            Key::derive(&other, "withdrawal-77")
        );
    }

    #[test]
    fn caller_keys_are_checked() {
        assert_eq!(Key::parse(""), Err(KeyError::Empty));
        assert_eq!(
            Key::parse("a b"),
            Err(KeyError::BadCharacter { found: ' ', at: 1 })
        );
        assert_eq!(
            Key::parse("ké"),
            Err(KeyError::BadCharacter { found: 'é', at: 1 })
        );
        assert_eq!(
            Key::parse(&"k".repeat(256)),
            Err(KeyError::TooLong { len: 256 })
        );
        assert!(Key::parse(&"k".repeat(255)).is_ok());
        assert!(Key::parse("order_77:attempt!").is_ok());
        let message = Key::parse("a\nb").unwrap_err().to_string();
        assert!(message.contains("position 1"), "{message}");
    }

    #[test]
    fn header_values_round_trip_in_both_formats() {
        for raw in ["8e03978e-40d5-43e8-bc93-6894a57f9324", "we\"ird\\key"] {
            let key = Key::parse(raw).unwrap();
            for format in [KeyFormat::Bare, KeyFormat::SfString] {
                let value = key.header_value(format);
                if format == KeyFormat::SfString {
                    assert!(value.starts_with('"') && value.ends_with('"'));
                }
                if raw.contains('"') && format == KeyFormat::Bare {
                    continue; // a bare value that starts without a quote reads back bare
                }
                assert_eq!(Key::from_header_value(&value).unwrap(), key, "{value}");
            }
        }
        assert_eq!(Key::from_header_value(" \"abc\" ").unwrap().as_str(), "abc");
    }

    #[test]
    fn malformed_header_values_are_errors() {
        assert_eq!(Key::from_header_value("\"abc"), Err(KeyError::BadQuoting));
        assert_eq!(
            Key::from_header_value("\"a\"b\""),
            Err(KeyError::BadQuoting)
        );
        assert_eq!(
            Key::from_header_value("\"a\\nb\""),
            Err(KeyError::BadQuoting)
        );
        assert_eq!(Key::from_header_value("\"\""), Err(KeyError::Empty));
        assert_eq!(Key::from_header_value("   "), Err(KeyError::Empty));
    }

    #[test]
    fn a_string_key_may_carry_parameters_which_are_ignored() {
        for value in [
            "\"k-param\";p=1",
            "\"k-param\";p",
            "\"k-param\"; p=1;q;*r.s_t-9=?0",
            "\"k-param\";a=-42;b=3.141;c=-0.5;d=\"x \\\"y\\\\\";e=tok:en/x;f=:aGk=:;g=?1 ",
            "\"k-param\";n=999999999999999;m=123456789012.123",
        ] {
            assert_eq!(
                Key::from_header_value(value).map(|k| k.as_str().to_owned()),
                Ok("k-param".to_owned()),
                "{value}"
            );
        }
    }

    #[test]
    fn anything_but_parameters_after_a_string_key_is_an_error() {
        for value in [
            "\"k\"x",
            "\"k\" ;p=1",
            "\"k\";",
            "\"k\";P=1",
            "\"k\";1p=1",
            "\"k\";p=",
            "\"k\";p=1;",
            "\"k\";p=1 q",
            "\"k\";p==1",
            "\"k\";p=1234567890123456",
            "\"k\";p=1.2345",
            "\"k\";p=1234567890123.1",
            "\"k\";p=1.",
            "\"k\";p=-",
            "\"k\";p=\"open",
            "\"k\";p=\"é\"",
            "\"k\";p=:aGk=",
            "\"k\";p=:a!:",
            "\"k\";p=?2",
            "\"k\";p=%x",
            "\"k\",\"l\"",
        ] {
            assert_eq!(
                Key::from_header_value(value),
                Err(KeyError::BadQuoting),
                "{value}"
            );
        }
    }

    #[test]
    fn short_form_is_a_prefix() {
        let key = Key::parse("abcdefghijkl").unwrap();
        assert_eq!(key.short(), "abcdefgh");
        assert_eq!(Key::parse("ab").unwrap().short(), "ab");
    }
}

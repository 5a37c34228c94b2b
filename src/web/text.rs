//! # The record as JSON text, through the core's own JSON
//!
//! The stored record is the core's [`Record`] with its serde shape; this module is only a data
//! format for it: serialized into the core's JSON [`Value`] and written with
//! [`Value::to_canonical`], read back with [`body::parse`]. The browser build already carries
//! that parser for "same body", so records need no second one: no `serde_json`, and no
//! serde-wasm-bindgen either, whose number handling pulls in Rust's float formatting (about
//! 14 KB of wasm, measured). The error type answers serde's questions without formatting
//! `serde::de::Unexpected` for the same reason. Every rule about the record (version, fields,
//! checks) stays in the core's `TryFrom<Wire>`.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, IntoDeserializer, Visitor};
use serde::ser::{self, Serialize};
use serde::{forward_to_deserialize_any, Deserialize};

use crate::core::body::{self, Value};
use crate::core::Record;

/// Why a record could not be written or read.
#[derive(Debug)]
pub(crate) struct FormatError(String);

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FormatError {}

impl ser::Error for FormatError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        FormatError(msg.to_string())
    }
}

impl de::Error for FormatError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        FormatError(msg.to_string())
    }
    fn invalid_type(_: de::Unexpected<'_>, exp: &dyn de::Expected) -> Self {
        FormatError(format!("a field has the wrong type; expected {exp}"))
    }
    fn invalid_value(_: de::Unexpected<'_>, exp: &dyn de::Expected) -> Self {
        FormatError(format!("a field has a wrong value; expected {exp}"))
    }
    fn invalid_length(len: usize, exp: &dyn de::Expected) -> Self {
        FormatError(format!("a list has {len} items; expected {exp}"))
    }
    fn unknown_variant(variant: &str, _: &'static [&'static str]) -> Self {
        FormatError(format!("unknown value {variant:?}"))
    }
    fn unknown_field(field: &str, _: &'static [&'static str]) -> Self {
        FormatError(format!("unknown field {field:?}"))
    }
    fn missing_field(field: &'static str) -> Self {
        FormatError(format!("it has no {field:?}"))
    }
    fn duplicate_field(field: &'static str) -> Self {
        FormatError(format!("it has {field:?} twice"))
    }
}

/// The record as JSON text.
pub(crate) fn encode(record: &Record) -> Result<String, FormatError> {
    Ok(record.serialize(ToValue)?.to_canonical())
}

/// The record in a JSON text, checked by the core.
pub(crate) fn decode(text: &str) -> Result<Record, FormatError> {
    let value = body::parse(text).map_err(|e| FormatError(format!("it is not JSON ({e})")))?;
    Record::deserialize(FromValue(value))
}

// ---- Serializing into a Value: only what a record holds (strings, integers, lists, structs,
// unit variants, options); anything else is an error, never a guess.

struct ToValue;

fn unsupported<T>(what: &str) -> Result<T, FormatError> {
    Err(FormatError(format!("a record cannot hold {what}")))
}

impl ser::Serializer for ToValue {
    type Ok = Value;
    type Error = FormatError;
    type SerializeSeq = Items;
    type SerializeTuple = Items;
    type SerializeTupleStruct = ser::Impossible<Value, FormatError>;
    type SerializeTupleVariant = ser::Impossible<Value, FormatError>;
    type SerializeMap = ser::Impossible<Value, FormatError>;
    type SerializeStruct = Fields;
    type SerializeStructVariant = ser::Impossible<Value, FormatError>;

    fn serialize_bool(self, v: bool) -> Result<Value, FormatError> {
        Ok(Value::Bool(v))
    }
    fn serialize_i8(self, v: i8) -> Result<Value, FormatError> {
        self.serialize_i64(v.into())
    }
    fn serialize_i16(self, v: i16) -> Result<Value, FormatError> {
        self.serialize_i64(v.into())
    }
    fn serialize_i32(self, v: i32) -> Result<Value, FormatError> {
        self.serialize_i64(v.into())
    }
    fn serialize_i64(self, v: i64) -> Result<Value, FormatError> {
        Ok(Value::Number(v.to_string()))
    }
    fn serialize_u8(self, v: u8) -> Result<Value, FormatError> {
        self.serialize_u64(v.into())
    }
    fn serialize_u16(self, v: u16) -> Result<Value, FormatError> {
        self.serialize_u64(v.into())
    }
    fn serialize_u32(self, v: u32) -> Result<Value, FormatError> {
        self.serialize_u64(v.into())
    }
    fn serialize_u64(self, v: u64) -> Result<Value, FormatError> {
        Ok(Value::Number(v.to_string()))
    }
    fn serialize_f32(self, _: f32) -> Result<Value, FormatError> {
        unsupported("a fraction")
    }
    fn serialize_f64(self, _: f64) -> Result<Value, FormatError> {
        unsupported("a fraction")
    }
    fn serialize_char(self, v: char) -> Result<Value, FormatError> {
        Ok(Value::String(v.into()))
    }
    fn serialize_str(self, v: &str) -> Result<Value, FormatError> {
        Ok(Value::String(v.into()))
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<Value, FormatError> {
        unsupported("bytes")
    }
    fn serialize_none(self) -> Result<Value, FormatError> {
        Ok(Value::Null)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<Value, FormatError> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<Value, FormatError> {
        Ok(Value::Null)
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<Value, FormatError> {
        Ok(Value::Null)
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<Value, FormatError> {
        Ok(Value::String(variant.into()))
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<Value, FormatError> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<Value, FormatError> {
        unsupported("an enum with data")
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Items, FormatError> {
        Ok(Items(Vec::with_capacity(len.unwrap_or(0))))
    }
    fn serialize_tuple(self, len: usize) -> Result<Items, FormatError> {
        Ok(Items(Vec::with_capacity(len)))
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, FormatError> {
        unsupported("a tuple struct")
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, FormatError> {
        unsupported("an enum with data")
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, FormatError> {
        unsupported("a map")
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Fields, FormatError> {
        Ok(Fields(BTreeMap::new()))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, FormatError> {
        unsupported("an enum with data")
    }
}

struct Items(Vec<Value>);

impl ser::SerializeSeq for Items {
    type Ok = Value;
    type Error = FormatError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), FormatError> {
        self.0.push(v.serialize(ToValue)?);
        Ok(())
    }
    fn end(self) -> Result<Value, FormatError> {
        Ok(Value::Array(self.0))
    }
}

impl ser::SerializeTuple for Items {
    type Ok = Value;
    type Error = FormatError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), FormatError> {
        ser::SerializeSeq::serialize_element(self, v)
    }
    fn end(self) -> Result<Value, FormatError> {
        ser::SerializeSeq::end(self)
    }
}

struct Fields(BTreeMap<String, Value>);

impl ser::SerializeStruct for Fields {
    type Ok = Value;
    type Error = FormatError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        v: &T,
    ) -> Result<(), FormatError> {
        let v = v.serialize(ToValue)?;
        // An absent optional field is left out, as serde_json would write it as null.
        if v != Value::Null {
            self.0.insert(key.to_owned(), v);
        }
        Ok(())
    }
    fn end(self) -> Result<Value, FormatError> {
        Ok(Value::Object(self.0))
    }
}

// ---- Deserializing from a Value.

struct FromValue(Value);

impl<'de> IntoDeserializer<'de, FormatError> for FromValue {
    type Deserializer = FromValue;
    fn into_deserializer(self) -> FromValue {
        self
    }
}

impl<'de> de::Deserializer<'de> for FromValue {
    type Error = FormatError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FormatError> {
        match self.0 {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(b),
            Value::Number(n) => match (n.parse::<u64>(), n.parse::<i64>()) {
                (Ok(u), _) => visitor.visit_u64(u),
                (_, Ok(i)) => visitor.visit_i64(i),
                _ => Err(FormatError(format!(
                    "the number {n} is not a whole number a record holds"
                ))),
            },
            Value::String(s) => visitor.visit_string(s),
            Value::Array(items) => visitor.visit_seq(de::value::SeqDeserializer::new(
                items.into_iter().map(FromValue),
            )),
            Value::Object(map) => visitor.visit_map(de::value::MapDeserializer::new(
                map.into_iter().map(|(k, v)| (k, FromValue(v))),
            )),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FormatError> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, FormatError> {
        match self.0 {
            Value::String(s) => visitor.visit_enum(s.into_deserializer()),
            _ => Err(FormatError("an enum value must be a string".into())),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value, FormatError> {
        visitor.visit_newtype_struct(self)
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map struct identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{Encoding, Key, Request, Timestamp};
    use wasm_bindgen_test::{wasm_bindgen_test as test, wasm_bindgen_test_configure};

    wasm_bindgen_test_configure!(run_in_browser);

    #[test]
    fn a_record_round_trips_through_text() {
        let record = Record {
            name: "new-ticket".into(),
            key: Key::parse("8e03978e-40d5-43e8-bc93-6894a57f9324").unwrap(),
            request: Request::new(
                "POST",
                "/api/tickets",
                r#"{"a":"\u00e9\n"}"#,
                Encoding::Form,
            )
            .unwrap()
            .header("X-Tenant", "acme")
            .unwrap(),
            started_at: Timestamp::from_millis(1_796_126_400_000),
            attempts: 2,
            round_started_at: Timestamp::from_millis(1_796_126_400_123),
            round_attempts: 1,
        };
        let text = encode(&record).unwrap();
        assert!(text.contains(r#""v":1"#), "{text}");
        assert!(
            text.contains(r#""headers":[["X-Tenant","acme"]]"#),
            "{text}"
        );
        assert!(text.contains(r#""encoding":"form""#), "{text}");
        assert_eq!(decode(&text).unwrap(), record);
    }

    #[test]
    fn unreadable_texts_say_why() {
        for (text, expected) in [
            ("{oops", "not JSON"),
            ("[1,2]", "wrong type"),
            (r#"{"v":2}"#, "version 2"),
            (r#"{"v":1.5}"#, "not a whole number"),
            (
                r#"{"v":1,"name":"n","key":"k","method":"POST","url":"/x","body":"{}","startedAt":"1","attempts":1}"#,
                "wrong type",
            ),
            (
                r#"{"v":1,"name":"n","key":"k","method":"POST","url":"/x","body":"{}","startedAt":1,"attempts":1,"encoding":"xml"}"#,
                "unknown value \"xml\"",
            ),
        ] {
            let err = decode(text).unwrap_err().to_string();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }
}

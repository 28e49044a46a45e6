//! JSON values read from YAML or JSON, stricter than `serde_json::Value`'s own reading: a
//! mapping that names a key twice is an error (both parsers keep the last one silently, so a
//! reviewer reading the first one would be misled), and so is a number JSON cannot carry
//! (NaN, infinity, integers past 64 bits), which the API server would refuse.

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::fmt;

/// Deserializes one value, strictly (see the module).
#[derive(Clone, Copy)]
pub struct Strict;

impl<'de> DeserializeSeed<'de> for Strict {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(Strict)
    }
}

/// A whole value, strictly, for `Deserializer::into_iter` and `from_str`.
pub struct StrictValue(pub Value);

impl<'de> de::Deserialize<'de> for StrictValue {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Strict.deserialize(d).map(StrictValue)
    }
}

/// The error for a key seen twice in one mapping.
pub fn duplicate<E: de::Error>(key: &str) -> E {
    E::custom(format!("duplicate key {key:?} in one mapping"))
}

fn float<E: de::Error>(v: f64) -> Result<Value, E> {
    Number::from_f64(v).map(Value::Number).ok_or_else(|| {
        E::custom(format!(
            "number {v} is out of range (JSON has no NaN or infinity)"
        ))
    })
}

impl<'de> Visitor<'de> for Strict {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a YAML or JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Value, E> {
        i64::try_from(v)
            .map(Value::from)
            .map_err(|_| E::custom(format!("number {v} is out of range (64 bits)")))
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Value, E> {
        u64::try_from(v)
            .map(Value::from)
            .map_err(|_| E::custom(format!("number {v} is out of range (64 bits)")))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        float(v)
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Strict.deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(v) = seq.next_element_seed(Strict)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(duplicate(&key));
            }
            let value = map.next_value_seed(Strict)?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_and_unrepresentable_numbers_are_refused() {
        let yaml = |t: &str| serde_norway::from_str::<StrictValue>(t).map(|v| v.0);
        let json = |t: &str| serde_json::from_str::<StrictValue>(t).map(|v| v.0);
        assert!(yaml("a: {b: 1, b: 2}").is_err());
        assert!(json(r#"{"a": [{"b": 1, "b": 1}]}"#).is_err());
        assert!(yaml("a: .nan").is_err());
        assert!(yaml("a: -.inf").is_err());
        assert!(json(r#"{"a": 1e400}"#).is_err());
        assert!(yaml("a: 99999999999999999999999").is_err());
        assert!(json(r#"{"a": 99999999999999999999999}"#).is_ok_and(|v| v["a"].is_f64()));
        assert_eq!(
            yaml("a: [1, -2, 2.5, x, null, true]").expect("plain values"),
            serde_json::json!({"a": [1, -2, 2.5, "x", null, true]})
        );
    }
}

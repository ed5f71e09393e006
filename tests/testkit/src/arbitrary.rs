//! Input generators for the property tests of Stead's parsers (`proptest`): arbitrary JSON
//! values, and JSON objects that look like what a parser expects (the right keys with values
//! of any kind), which reach deeper than random text.

use proptest::prelude::*;
use serde_json::{Map, Value};

/// Any JSON value, nested up to four levels, with strings that include control characters,
/// NULs and non-ASCII text.
pub fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        ".{0,24}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::vec((".{0,12}", inner), 0..8)
                .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A JSON object over `keys` (each present or not) with arbitrary values, plus an occasional
/// unknown key.
pub fn object_with(keys: &'static [&'static str]) -> impl Strategy<Value = Value> {
    (
        prop::collection::vec(prop::option::of(json()), keys.len()),
        prop::option::of((".{1,8}", json())),
    )
        .prop_map(move |(values, extra)| {
            let mut object = Map::new();
            for (key, value) in keys.iter().zip(values) {
                if let Some(value) = value {
                    object.insert((*key).to_string(), value);
                }
            }
            if let Some((key, value)) = extra {
                object.insert(key, value);
            }
            Value::Object(object)
        })
}

/// One of `choices`, or any string.
pub fn one_of_or_any(choices: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(choices).prop_map(str::to_string),
        1 => ".{0,16}",
    ]
}

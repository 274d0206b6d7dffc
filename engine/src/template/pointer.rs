//! One value of a JSON document by RFC 6901 pointer, read without building the document: the
//! objects and arrays on the pointer's path are walked entry by entry, everything else is
//! parsed and dropped as it goes (still checked: a document that is not JSON is an error).
//! For a key split by `{json./POINTER}` this runs once per message; building a
//! `serde_json::Value` of a 1 KiB payload allocates every string and map of it.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// What the pointer found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// A string, or a number or boolean as JSON writes it.
    Scalar(String),
    /// `null`, an object or an array.
    NotScalar,
    /// Nothing there.
    Missing,
}

/// The value at `pointer` in `json`; an error when `json` is not one JSON document.
pub fn find(json: &[u8], pointer: &str) -> Result<Found, serde_json::Error> {
    let tokens: Vec<String> = if pointer.is_empty() {
        Vec::new()
    } else {
        pointer
            .strip_prefix('/')
            .unwrap_or(pointer)
            .split('/')
            .map(|t| t.replace("~1", "/").replace("~0", "~"))
            .collect()
    };
    let mut de = serde_json::Deserializer::from_slice(json);
    let found = Walk { rest: &tokens }.deserialize(&mut de)?;
    de.end()?;
    Ok(found)
}

/// Reads one value, following `rest`.
struct Walk<'a> {
    rest: &'a [String],
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = Found;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Found, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = Found;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Found, E> {
        Ok(self.leaf(|| v.to_string()))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Found, E> {
        Ok(self.leaf(|| v.to_string()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Found, E> {
        Ok(self.leaf(|| v.to_string()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Found, E> {
        // As serde_json writes a float (`Value`'s Display): the shortest text that reads back.
        Ok(self
            .leaf(|| serde_json::Number::from_f64(v).map_or_else(String::new, |n| n.to_string())))
    }

    fn visit_str<E>(self, v: &str) -> Result<Found, E> {
        Ok(self.leaf(|| v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Found, E> {
        Ok(self.leaf(|| v))
    }

    fn visit_unit<E>(self) -> Result<Found, E> {
        Ok(if self.rest.is_empty() {
            Found::NotScalar
        } else {
            Found::Missing
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Found, A::Error> {
        let Some((want, rest)) = self.rest.split_first() else {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(Found::NotScalar);
        };
        // A key given twice: the last one counts (as in `serde_json::Value`).
        let mut found = Found::Missing;
        while let Some(key) = map.next_key::<Key<'_>>()? {
            if key.0 == *want {
                found = map.next_value_seed(Walk { rest })?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Found, A::Error> {
        let Some((want, rest)) = self.rest.split_first() else {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            return Ok(Found::NotScalar);
        };
        // An index as RFC 6901 writes one: digits, no leading zero.
        let index = (want == "0" || !want.starts_with('0'))
            .then(|| want.parse::<usize>().ok())
            .flatten()
            .filter(|_| want.bytes().all(|b| b.is_ascii_digit()));
        let mut found = Found::Missing;
        let mut i = 0;
        loop {
            if Some(i) == index {
                match seq.next_element_seed(Walk { rest })? {
                    Some(f) => found = f,
                    None => break,
                }
            } else if seq.next_element::<IgnoredAny>()?.is_none() {
                break;
            }
            i += 1;
        }
        Ok(found)
    }
}

impl Walk<'_> {
    /// A scalar: found when the pointer ends here.
    fn leaf(&self, text: impl FnOnce() -> String) -> Found {
        if self.rest.is_empty() {
            Found::Scalar(text())
        } else {
            Found::Missing
        }
    }
}

/// An object key, borrowed where the document allows (no escapes).
struct Key<'de>(std::borrow::Cow<'de, str>);

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// What `serde_json::Value::pointer` finds, in the same terms.
    fn by_value(json: &[u8], pointer: &str) -> Option<Found> {
        let v: serde_json::Value = serde_json::from_slice(json).ok()?;
        Some(match v.pointer(pointer) {
            Some(serde_json::Value::String(s)) => Found::Scalar(s.clone()),
            Some(n @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_))) => {
                Found::Scalar(n.to_string())
            }
            Some(_) => Found::NotScalar,
            None => Found::Missing,
        })
    }

    #[test]
    fn finds_what_the_document_holds_at_the_pointer() {
        let doc =
            br#"{"a":{"b":[10,{"c~/d":"x"},true]},"n":-1.5,"s":"\u00e9\"","z":null,"a2":1,"a2":2}"#;
        for (pointer, want) in [
            ("/a/b/0", Found::Scalar("10".into())),
            ("/a/b/1/c~0~1d", Found::Scalar("x".into())),
            ("/a/b/2", Found::Scalar("true".into())),
            ("/n", Found::Scalar("-1.5".into())),
            ("/s", Found::Scalar("é\"".into())),
            ("/z", Found::NotScalar),
            ("/a", Found::NotScalar),
            ("/a/b/3", Found::Missing),
            ("/a/b/01", Found::Missing),
            ("/a/x", Found::Missing),
            ("/n/x", Found::Missing),
            ("/a2", Found::Scalar("2".into())),
            ("", Found::NotScalar),
        ] {
            assert_eq!(find(doc, pointer).unwrap(), want, "{pointer}");
            assert_eq!(by_value(doc, pointer), Some(want), "{pointer} by Value");
        }
        assert!(find(b"{\"a\":1} x", "/a").is_err(), "trailing text");
        assert!(find(b"{\"a\":1", "/a").is_err(), "cut short");
        assert!(
            find(b"{\"a\":1,\"b\":[}", "/a").is_err(),
            "broken after the value"
        );
    }

    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        use serde_json::Value;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-1e12f64..1e12).prop_map(Value::from),
            "[a-c~/é\"]{0,4}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec(("[a-c~/]{0,2}", inner), 0..4)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Differential: for any document and any pointer of its alphabet, the walk finds what
        /// `serde_json::Value::pointer` finds.
        #[test]
        fn agrees_with_serde_json_value(
            v in json_value(),
            tokens in prop::collection::vec(prop_oneof![Just("0".to_owned()), Just("1".to_owned()), "[a-c~/]{0,2}"], 0..4),
        ) {
            let json = serde_json::to_vec(&v).unwrap();
            let pointer: String = tokens
                .iter()
                .map(|t| format!("/{}", t.replace('~', "~0").replace('/', "~1")))
                .collect();
            prop_assert_eq!(Some(find(&json, &pointer).unwrap()), by_value(&json, &pointer));
        }
    }
}

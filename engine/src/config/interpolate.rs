//! `${VAR}` in config values: replaced by the environment variable before the config is
//! read into its types.
//!
//! Only string values are interpolated (keys and the TOML structure are not: a variable can
//! never add a key or change a value's type). The forms:
//! - `${NAME}`: the variable's value; a config that names an unset variable does not load,
//!   and the error names the key and the variable (never a value);
//! - `${NAME:-fallback}`: the fallback when the variable is unset or empty;
//! - `$${`: a literal `${`.
//!
//! `NAME` is letters, digits and `_`, not starting with a digit.

use toml::{Table, Value};

/// Replaces every `${...}` in the string values of `table`, with `env` as the environment.
/// On a problem: the key (as `sink[0].mqtt.address`) and what is wrong.
pub fn interpolate(
    table: &mut Table,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), (String, String)> {
    for (k, v) in table.iter_mut() {
        walk(v, k.clone(), env)?;
    }
    Ok(())
}

fn walk(
    value: &mut Value,
    key: String,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), (String, String)> {
    match value {
        Value::String(s) => {
            if s.contains('$') {
                *s = expand(s, env).map_err(|e| (key, e))?;
            }
            Ok(())
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                walk(item, format!("{key}[{i}]"), env)?;
            }
            Ok(())
        }
        Value::Table(t) => {
            for (k, v) in t.iter_mut() {
                walk(v, format!("{key}.{k}"), env)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// `text` with its `${...}` replaced.
fn expand(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix("${") {
            // `$${`: a literal `${`.
            out.push_str("${");
            rest = tail;
            continue;
        }
        let Some(body) = after.strip_prefix('{') else {
            // A `$` not followed by `{` is itself.
            out.push('$');
            rest = after;
            continue;
        };
        let Some(end) = body.find('}') else {
            return Err(format!(
                "`${{` without its closing `}}` in {text:?}: write `${{NAME}}`, or `$${{` for a \
                 literal `${{`"
            ));
        };
        let inner = &body[..end];
        let (name, fallback) = match inner.split_once(":-") {
            Some((name, fallback)) => (name, Some(fallback)),
            None => (inner, None),
        };
        if !valid_name(name) {
            return Err(format!(
                "`${{{inner}}}`: {name:?} is not an environment variable name (letters, digits \
                 and `_`, not starting with a digit)"
            ));
        }
        match (env(name), fallback) {
            (Some(v), Some(f)) if v.is_empty() => out.push_str(f),
            (Some(v), _) => out.push_str(&v),
            (None, Some(f)) => out.push_str(f),
            (None, None) => {
                return Err(format!(
                    "`${{{name}}}`: the environment variable {name} is not set (give a fallback \
                     with `${{{name}:-...}}`)"
                ));
            }
        }
        rest = &body[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn valid_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "HOST" => Some("broker.lan".to_owned()),
            "EMPTY" => Some(String::new()),
            "_X1" => Some("x".to_owned()),
            _ => None,
        }
    }

    #[test]
    fn variables_fallbacks_and_escapes() {
        assert_eq!(expand("${HOST}:1883", &env).unwrap(), "broker.lan:1883");
        assert_eq!(expand("a${_X1}b${_X1}", &env).unwrap(), "axbx");
        assert_eq!(expand("${NOPE:-local}", &env).unwrap(), "local");
        assert_eq!(expand("${EMPTY:-local}", &env).unwrap(), "local");
        assert_eq!(expand("${HOST:-local}", &env).unwrap(), "broker.lan");
        assert_eq!(expand("${NOPE:-}", &env).unwrap(), "");
        assert_eq!(expand("${EMPTY}", &env).unwrap(), "");
        assert_eq!(expand("$${HOST}", &env).unwrap(), "${HOST}");
        assert_eq!(expand("cost $5 and $", &env).unwrap(), "cost $5 and $");
        assert_eq!(expand("{sink}/{shard}", &env).unwrap(), "{sink}/{shard}");
    }

    #[test]
    fn an_unset_variable_or_a_bad_name_is_an_error_that_names_it() {
        let e = expand("${MQTT_HOST}:1883", &env).unwrap_err();
        assert!(e.contains("MQTT_HOST is not set"), "{e}");
        let e = expand("${1X}", &env).unwrap_err();
        assert!(
            e.contains("\"1X\" is not an environment variable name"),
            "{e}"
        );
        let e = expand("${}", &env).unwrap_err();
        assert!(e.contains("is not an environment variable name"), "{e}");
        let e = expand("${HOST", &env).unwrap_err();
        assert!(e.contains("without its closing"), "{e}");
    }

    #[test]
    fn only_string_values_are_touched_and_errors_name_the_key() {
        let mut t: Table = r#"
            a = "${HOST}"
            n = 5
            [[sink]]
            name = "x"
            [sink.mqtt]
            topics = ["t/${HOST}", "plain"]
            address = "${GONE}"
        "#
        .parse()
        .unwrap();
        let e = interpolate(&mut t.clone(), &env).unwrap_err();
        assert_eq!(e.0, "sink[0].mqtt.address");
        t["sink"].as_array_mut().unwrap()[0]["mqtt"]
            .as_table_mut()
            .unwrap()
            .remove("address");
        interpolate(&mut t, &env).unwrap();
        assert_eq!(t["a"].as_str(), Some("broker.lan"));
        assert_eq!(t["n"].as_integer(), Some(5));
        let topics = t["sink"][0]["mqtt"]["topics"].as_array().unwrap();
        assert_eq!(topics[0].as_str(), Some("t/broker.lan"));
        assert_eq!(topics[1].as_str(), Some("plain"));
    }
}

//! The one template engine of the config: every templated string (MQTT topics, S3 object
//! keys, client ids, will topics, file paths) is parsed here once, when the config is read, into
//! literal runs and placeholders; the sinks only render what config holds.
//!
//! Syntax, the same everywhere: `{name}` is a placeholder, `{{` and `}}` are literal braces,
//! `{header.NAME}` reads an Iggy user header and `{json./POINTER}` (or `{json.a.b}`) a field of
//! a JSON payload where the kind of string allows them. Each kind has its [`Vocabulary`]; a
//! placeholder outside it is refused with the list of those it takes.
//!
//! The kinds: [`topic::TopicTemplate`], [`key::KeyTemplate`] (with [`key::KeyZone`]),
//! [`name::NameTemplate`] and [`name::PathTemplate`].

pub mod key;
pub mod name;
pub mod pointer;
pub mod topic;

/// A placeholder with no argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Name {
    /// The stream's name.
    Stream,
    /// The topic's name.
    Topic,
    /// The partition id.
    Partition,
    /// The message's offset.
    Offset,
    /// The message id.
    Id,
    /// `YYYY-MM-DD` of a time.
    Date,
    /// `YYYY` of a time.
    Year,
    /// `MM` (month) of a time.
    Month,
    /// `DD` of a time.
    Day,
    /// `HH` of a time.
    Hour,
    /// `MM` (minutes) of a time.
    Minute,
    /// A time in µs since the Unix epoch.
    Timestamp,
    /// An object's first offset.
    FirstOffset,
    /// An object's last offset.
    LastOffset,
    /// The file extension of an object's format.
    Ext,
    /// The sink's name.
    Sink,
    /// The shard's number.
    Shard,
    /// The connection's number on its shard.
    Conn,
    /// The process id.
    Pid,
    /// The host name.
    Host,
}

/// One placeholder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    /// `{name}`.
    Named(Name),
    /// `{header.NAME}`.
    Header(String),
    /// `{json./POINTER}`: an RFC 6901 pointer (`{json.a.b}` is read as `/a/b`).
    Json(String),
}

/// A piece of a parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Text copied as it is (braces already unescaped).
    Lit(String),
    /// A value put in when rendering.
    Field(Field),
}

/// The placeholders one kind of templated string takes.
#[derive(Debug)]
pub struct Vocabulary {
    /// `{name}` placeholders by their name.
    pub names: &'static [(&'static str, Name)],
    /// Whether `{header.NAME}` is allowed.
    pub header: bool,
    /// Whether `{json.POINTER}` is allowed.
    pub json: bool,
}

impl Vocabulary {
    /// The placeholders, listed for an error message.
    pub fn listed(&self) -> String {
        let mut all: Vec<String> = self.names.iter().map(|(n, _)| format!("{{{n}}}")).collect();
        if self.header {
            all.push("{header.NAME}".to_owned());
        }
        if self.json {
            all.push("{json./POINTER} or {json.a.b}".to_owned());
        }
        match all.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            Some((last, _)) => last.clone(),
            None => "no placeholders".to_owned(),
        }
    }
}

/// A parsed template: its text (for messages) and its pieces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    text: String,
    pieces: Vec<Piece>,
}

impl Template {
    /// Parses `text` with the placeholders of `vocab`; the error names what is wrong and where.
    pub fn parse(text: &str, vocab: &Vocabulary) -> Result<Template, String> {
        let mut pieces = Vec::new();
        let mut lit = String::new();
        let mut rest = text;
        while let Some(i) = rest.find(['{', '}']) {
            lit.push_str(&rest[..i]);
            let tail = &rest[i..];
            if let Some(after) = tail.strip_prefix("{{") {
                lit.push('{');
                rest = after;
                continue;
            }
            if let Some(after) = tail.strip_prefix("}}") {
                lit.push('}');
                rest = after;
                continue;
            }
            if tail.starts_with('}') {
                return Err(format!(
                    "unmatched '}}' in {text:?} (write '}}}}' for a literal brace)"
                ));
            }
            let Some(end) = tail.find('}') else {
                return Err(format!("unclosed '{{' in {text:?}"));
            };
            let name = &tail[1..end];
            let field = field(name, vocab).ok_or_else(|| {
                format!(
                    "unknown placeholder {{{name}}} in {text:?}; use {}",
                    vocab.listed()
                )
            })?;
            if !lit.is_empty() {
                pieces.push(Piece::Lit(std::mem::take(&mut lit)));
            }
            pieces.push(Piece::Field(field));
            rest = &tail[end + 1..];
        }
        lit.push_str(rest);
        if !lit.is_empty() {
            pieces.push(Piece::Lit(lit));
        }
        Ok(Template {
            text: text.to_owned(),
            pieces,
        })
    }

    /// The text it was parsed from.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Its pieces, in order.
    pub fn pieces(&self) -> &[Piece] {
        &self.pieces
    }

    /// Whether it uses `{name}`.
    pub fn has(&self, name: Name) -> bool {
        self.pieces.contains(&Piece::Field(Field::Named(name)))
    }

    /// No placeholders at all.
    pub fn is_static(&self) -> bool {
        self.pieces.iter().all(|p| matches!(p, Piece::Lit(_)))
    }

    /// The literal text (of a static template: what it renders to).
    pub fn literal(&self) -> String {
        let mut s = String::new();
        for p in &self.pieces {
            if let Piece::Lit(l) = p {
                s.push_str(l);
            }
        }
        s
    }

    /// Appends the rendering to `out`: literals as they are, each placeholder through `value`
    /// (which appends it, or says why it cannot).
    pub fn render_into<E>(
        &self,
        out: &mut String,
        mut value: impl FnMut(&Field, &mut String) -> Result<(), E>,
    ) -> Result<(), E> {
        for p in &self.pieces {
            match p {
                Piece::Lit(l) => out.push_str(l),
                Piece::Field(f) => value(f, out)?,
            }
        }
        Ok(())
    }
}

/// Appends the value at `pointer` of a JSON payload: a string as it is, a number or boolean
/// as JSON writes it; anything else (missing, null, an object, an array) is an error naming
/// the pointer.
pub fn json_field_into(
    json: &serde_json::Value,
    pointer: &str,
    out: &mut String,
) -> Result<(), String> {
    use std::fmt::Write as _;
    match json.pointer(pointer) {
        Some(serde_json::Value::String(s)) => out.push_str(s),
        Some(v @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_))) => {
            let _ = write!(out, "{v}");
        }
        Some(_) => {
            return Err(format!(
                "the payload's {pointer} is not a string, number or boolean"
            ));
        }
        None => return Err(format!("the payload has no field {pointer}")),
    }
    Ok(())
}

fn field(name: &str, vocab: &Vocabulary) -> Option<Field> {
    if let Some((_, n)) = vocab.names.iter().find(|(text, _)| *text == name) {
        return Some(Field::Named(*n));
    }
    if vocab.header
        && let Some(h) = name.strip_prefix("header.").filter(|h| !h.is_empty())
    {
        return Some(Field::Header(h.to_owned()));
    }
    if vocab.json
        && let Some(p) = name.strip_prefix("json.").filter(|p| !p.is_empty())
    {
        return Some(Field::Json(if p.starts_with('/') {
            p.to_owned()
        } else {
            format!("/{}", p.replace('.', "/"))
        }));
    }
    None
}

/// Deserializes a template kind from its text through `parse`.
macro_rules! from_text {
    ($ty:ty) => {
        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = String::deserialize(d)?;
                <$ty>::parse(&text).map_err(serde::de::Error::custom)
            }
        }
    };
}
pub(crate) use from_text;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const V: Vocabulary = Vocabulary {
        names: &[("a", Name::Stream), ("b", Name::Offset)],
        header: true,
        json: true,
    };

    #[test]
    fn parses_literals_placeholders_and_escapes() {
        let t = Template::parse("x{{/{a}-{b}}}/{header.k}/{json.d.e}{json./f}", &V).unwrap();
        assert_eq!(
            t.pieces(),
            [
                Piece::Lit("x{/".into()),
                Piece::Field(Field::Named(Name::Stream)),
                Piece::Lit("-".into()),
                Piece::Field(Field::Named(Name::Offset)),
                Piece::Lit("}/".into()),
                Piece::Field(Field::Header("k".into())),
                Piece::Lit("/".into()),
                Piece::Field(Field::Json("/d/e".into())),
                Piece::Field(Field::Json("/f".into())),
            ]
        );
        assert!(t.has(Name::Offset) && !t.has(Name::Shard));
        assert!(!t.is_static());
        let s = Template::parse("a{{b}}", &V).unwrap();
        assert!(s.is_static());
        assert_eq!(s.literal(), "a{b}");
        assert_eq!(s.text(), "a{{b}}");
    }

    #[test]
    fn refuses_what_the_kind_does_not_take() {
        let e = Template::parse("{c}", &V).unwrap_err();
        assert!(
            e.contains("{c}") && e.contains("{a}, {b}, {header.NAME}"),
            "{e}"
        );
        let none = Vocabulary {
            names: &[("a", Name::Stream)],
            header: false,
            json: false,
        };
        assert!(Template::parse("{header.k}", &none).is_err());
        assert!(Template::parse("{json.k}", &none).is_err());
        assert!(Template::parse("{header.}", &V).is_err());
        assert!(Template::parse("{a", &V).unwrap_err().contains("unclosed"));
        assert!(
            Template::parse("a}b", &V)
                .unwrap_err()
                .contains("unmatched")
        );
        assert_eq!(none.listed(), "{a}");
    }

    #[test]
    fn renders_through_the_value_function() {
        let t = Template::parse("s={a};o={b}", &V).unwrap();
        let mut out = String::from(">");
        t.render_into(&mut out, |f, out| {
            match f {
                Field::Named(Name::Stream) => out.push_str("st"),
                Field::Named(Name::Offset) => out.push('9'),
                _ => return Err(()),
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(out, ">s=st;o=9");
        let t = Template::parse("{header.k}", &V).unwrap();
        assert!(t.render_into(&mut out, |_, _| Err("no")).is_err());
    }
}

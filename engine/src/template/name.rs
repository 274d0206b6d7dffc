//! Names made per sink, shard and connection: MQTT client ids and will topics
//! ([`NameTemplate`]), file sink paths ([`PathTemplate`]).

use std::fmt::Write as _;
use std::path::PathBuf;

use super::{Field, Name, Template, Vocabulary};

/// What a client id or will topic takes.
pub const VOCABULARY: Vocabulary = Vocabulary {
    names: &[
        ("sink", Name::Sink),
        ("shard", Name::Shard),
        ("conn", Name::Conn),
        ("pid", Name::Pid),
        ("host", Name::Host),
    ],
    header: false,
    json: false,
};

/// What a file path takes (a file belongs to a shard, not to a connection).
pub const PATH_VOCABULARY: Vocabulary = Vocabulary {
    names: &[
        ("sink", Name::Sink),
        ("shard", Name::Shard),
        ("pid", Name::Pid),
        ("host", Name::Host),
    ],
    header: false,
    json: false,
};

/// The default `mqtt.client_id`.
pub const DEFAULT_CLIENT_ID: &str = "spillway-{host}-{pid}-{sink}-{shard}-{conn}";

/// Where a name is made.
#[derive(Debug, Clone, Copy)]
pub struct Place<'a> {
    /// The sink's name.
    pub sink: &'a str,
    /// The shard.
    pub shard: usize,
    /// The connection on the shard (0 where there is none).
    pub conn: usize,
}

/// A parsed client id or will topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameTemplate(Template);

super::from_text!(NameTemplate);

impl NameTemplate {
    /// Parses `text`.
    pub fn parse(text: &str) -> Result<NameTemplate, String> {
        Template::parse(text, &VOCABULARY).map(NameTemplate)
    }

    /// The template itself.
    pub fn template(&self) -> &Template {
        &self.0
    }

    /// Whether it uses `{name}`.
    pub fn has(&self, name: Name) -> bool {
        self.0.has(name)
    }

    /// The name at `place`.
    pub fn render(&self, place: Place<'_>) -> String {
        render(&self.0, place)
    }
}

impl Default for NameTemplate {
    fn default() -> Self {
        match NameTemplate::parse(DEFAULT_CLIENT_ID) {
            Ok(t) => t,
            // A constant that the tests parse.
            Err(e) => unreachable!("the default client id does not parse: {e}"),
        }
    }
}

/// A parsed file sink path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathTemplate(Template);

super::from_text!(PathTemplate);

impl PathTemplate {
    /// Parses `text`.
    pub fn parse(text: &str) -> Result<PathTemplate, String> {
        Template::parse(text, &PATH_VOCABULARY).map(PathTemplate)
    }

    /// `-`: standard output.
    pub fn is_stdout(&self) -> bool {
        self.0.text() == "-"
    }

    /// The template itself.
    pub fn template(&self) -> &Template {
        &self.0
    }

    /// The path at `place`.
    pub fn render(&self, place: Place<'_>) -> PathBuf {
        PathBuf::from(render(&self.0, place))
    }
}

fn render(t: &Template, place: Place<'_>) -> String {
    let mut out = String::new();
    let rendered: Result<(), std::convert::Infallible> = t.render_into(&mut out, |f, out| {
        match f {
            Field::Named(Name::Sink) => out.push_str(place.sink),
            Field::Named(Name::Shard) => {
                let _ = write!(out, "{}", place.shard);
            }
            Field::Named(Name::Conn) => {
                let _ = write!(out, "{}", place.conn);
            }
            Field::Named(Name::Pid) => {
                let _ = write!(out, "{}", std::process::id());
            }
            Field::Named(Name::Host) => out.push_str(host_name()),
            _ => {}
        }
        Ok(())
    });
    let Ok(()) = rendered;
    out
}

/// This host's name for `{host}` (`gethostname`; `localhost` when it cannot be read or is not
/// UTF-8). Read once.
pub fn host_name() -> &'static str {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        let mut buf = [0u8; 256];
        // SAFETY: gethostname writes at most `buf.len()` bytes into our buffer.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        match std::str::from_utf8(&buf[..end]) {
            Ok(name) if rc == 0 && !name.is_empty() => name.to_owned(),
            _ => "localhost".to_owned(),
        }
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const AT: Place<'static> = Place {
        sink: "out",
        shard: 3,
        conn: 1,
    };

    #[test]
    fn names_render_per_place() {
        let t = NameTemplate::parse("id-{sink}-{shard}-{conn}-{pid}-{host}").unwrap();
        assert_eq!(
            t.render(AT),
            format!("id-out-3-1-{}-{}", std::process::id(), host_name())
        );
        assert!(t.has(Name::Conn) && t.has(Name::Shard));
        let d = NameTemplate::default();
        assert_eq!(d.template().text(), DEFAULT_CLIENT_ID);
        assert!(d.has(Name::Conn) && d.has(Name::Shard) && d.has(Name::Host));
        assert!(
            NameTemplate::parse("{stream}")
                .unwrap_err()
                .contains("{sink}")
        );
    }

    #[test]
    fn paths_render_per_shard() {
        let p = PathTemplate::parse("/tmp/out-{sink}-{shard}.jsonl").unwrap();
        assert_eq!(p.render(AT), PathBuf::from("/tmp/out-out-3.jsonl"));
        assert!(PathTemplate::parse("-").unwrap().is_stdout());
        assert!(
            PathTemplate::parse("/tmp/{conn}")
                .unwrap_err()
                .contains("{conn}")
        );
    }

    #[test]
    fn the_host_name_is_the_kernels() {
        let name = host_name();
        assert!(!name.is_empty());
        if let Ok(kernel) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
            assert_eq!(name, kernel.trim());
        }
    }
}

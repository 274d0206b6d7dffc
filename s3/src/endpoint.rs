//! Where requests go: the endpoint, the region, and path-style or virtual-hosted-style
//! addressing; and the URI encoding S3 and SigV4 use.

use std::fmt;

use crate::error::Error;
use crate::request::{Method, Request};

/// `http` or `https`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    Http,
    Https,
}

/// How the bucket is named in a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressingStyle {
    /// `https://host/bucket/key`: custom endpoints (MinIO, Ceph, Garage …).
    Path,
    /// `https://bucket.host/key`: AWS.
    VirtualHosted,
}

/// Encodes `s` the way SigV4 and S3 expect (RFC 3986: unreserved characters kept, everything
/// else `%XX` upper case); `/` is kept unless `encode_slash`.
pub fn uri_encode(s: &str, encode_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b'/' if !encode_slash => out.push('/'),
            _ => {
                out.push('%');
                out.push(char::from(HEX[(b >> 4) as usize]));
                out.push(char::from(HEX[(b & 0xf) as usize]));
            }
        }
    }
    out
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// An S3 endpoint.
#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub scheme: Scheme,
    /// Host name or IP, without the port.
    pub host: String,
    pub port: u16,
    pub region: String,
    pub style: AddressingStyle,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Endpoint({}://{}:{} {} {:?})",
            match self.scheme {
                Scheme::Http => "http",
                Scheme::Https => "https",
            },
            self.host,
            self.port,
            self.region,
            self.style
        )
    }
}

impl Scheme {
    /// The default port of the scheme: 80 for http, 443 for https.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

impl Endpoint {
    /// AWS S3 in `region`: `https://s3.{region}.amazonaws.com`, virtual-hosted-style.
    ///
    /// The region is not checked here (it cannot fail); [`Endpoint::parse`] checks it.
    pub fn aws(region: &str) -> Endpoint {
        Endpoint {
            scheme: Scheme::Https,
            host: format!("s3.{region}.amazonaws.com"),
            port: 443,
            region: region.to_string(),
            style: AddressingStyle::VirtualHosted,
        }
    }

    /// Parses `http[s]://host[:port][/]` into an endpoint in `region`.
    ///
    /// The port defaults to 80 or 443. Without `style`, AWS hosts (`*.amazonaws.com`,
    /// `*.amazonaws.com.cn`) get virtual-hosted-style addressing and every other host (MinIO,
    /// Ceph, R2, B2, Garage …) path-style. An endpoint with a path, a query, a fragment or
    /// credentials in it is refused, as is a region that cannot go in a SigV4 scope.
    pub fn parse(
        url: &str,
        region: &str,
        style: Option<AddressingStyle>,
    ) -> Result<Endpoint, Error> {
        let bad = |why: &str| Error::Config(format!("endpoint {url:?}: {why}"));
        let (scheme, rest) = match url.split_once("://") {
            Some((s, rest)) if s.eq_ignore_ascii_case("https") => (Scheme::Https, rest),
            Some((s, rest)) if s.eq_ignore_ascii_case("http") => (Scheme::Http, rest),
            Some(_) => return Err(bad("scheme must be http or https")),
            None => return Err(bad("scheme must be http or https (e.g. https://host:port)")),
        };
        let authority = match rest.find(['/', '?', '#']) {
            Some(i) => {
                let tail = &rest[i..];
                if tail != "/" {
                    return Err(bad(
                        "must not have a path, query or fragment (the bucket is given apart)",
                    ));
                }
                &rest[..i]
            }
            None => rest,
        };
        if authority.contains('@') {
            return Err(bad(
                "must not contain credentials; give them as access key and secret",
            ));
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let Some((h, after)) = v6.split_once(']') else {
                return Err(bad("IPv6 address lacks its closing ']'"));
            };
            let port = match after {
                "" => None,
                p => match p.strip_prefix(':') {
                    Some(p) => Some(p),
                    None => return Err(bad("unexpected text after the IPv6 address")),
                },
            };
            if h.is_empty()
                || !h
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
            {
                return Err(bad("invalid IPv6 address"));
            }
            (h.to_ascii_lowercase(), port)
        } else {
            let (h, port) = match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            };
            if h.is_empty() {
                return Err(bad("host is empty"));
            }
            if !h
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
            {
                return Err(bad(
                    "host may contain only letters, digits, '-', '.' and '_'",
                ));
            }
            (h.to_ascii_lowercase(), port)
        };
        let port = match port {
            None => scheme.default_port(),
            Some(p) => match p.parse::<u16>() {
                Ok(0) | Err(_) => return Err(bad("port must be a number from 1 to 65535")),
                Ok(p) => p,
            },
        };
        check_region(region)?;
        let style = style.unwrap_or(if is_aws_host(&host) {
            AddressingStyle::VirtualHosted
        } else {
            AddressingStyle::Path
        });
        Ok(Endpoint {
            scheme,
            host,
            port,
            region: region.to_string(),
            style,
        })
    }

    /// Whether the port is the scheme's default (then it is left out of `Host`).
    pub fn has_default_port(&self) -> bool {
        self.port == self.scheme.default_port()
    }

    /// Whether this is an AWS S3 endpoint (`*.amazonaws.com` or `*.amazonaws.com.cn`).
    pub fn is_aws(&self) -> bool {
        is_aws_host(&self.host)
    }

    /// `host[:port]` of the endpoint itself (IPv6 addresses in brackets), port only when not
    /// the default.
    pub fn authority(&self) -> String {
        let mut a = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if !self.has_default_port() {
            a.push(':');
            a.push_str(&self.port.to_string());
        }
        a
    }

    /// The addressing style used for `bucket`: the configured one, except that a bucket whose
    /// name cannot be a DNS label under this endpoint (upper case, `_`, dots over https, where
    /// the wildcard certificate would not match, or an IP-address endpoint) falls back to
    /// path-style.
    pub fn style_for(&self, bucket: &str) -> AddressingStyle {
        match self.style {
            AddressingStyle::Path => AddressingStyle::Path,
            AddressingStyle::VirtualHosted => {
                if virtual_host_ok(bucket, self.scheme) && !self.host_is_ip() {
                    AddressingStyle::VirtualHosted
                } else {
                    AddressingStyle::Path
                }
            }
        }
    }

    fn host_is_ip(&self) -> bool {
        self.host.contains(':') || self.host.parse::<std::net::Ipv4Addr>().is_ok()
    }

    /// The `Host` header for a request on `bucket` (`bucket.host` in virtual-hosted style),
    /// with `:port` when the port is not the scheme's default.
    pub fn host_header(&self, bucket: &str) -> String {
        match self.style_for(bucket) {
            AddressingStyle::VirtualHosted => format!("{bucket}.{}", self.authority()),
            AddressingStyle::Path => self.authority(),
        }
    }

    /// A request on `bucket` (and on `key` in it, when given): method, `Host` and the
    /// percent-encoded path (`/bucket/key` or `/key`; a key keeps its `/`). Nothing else is
    /// set; the actions add query, headers and body.
    ///
    /// The bucket name is not checked here; [`Endpoint::check_bucket`] does that once, at
    /// configuration time.
    pub fn request(&self, method: Method, bucket: &str, key: Option<&str>) -> Request {
        let mut path =
            String::with_capacity(2 + bucket.len() + key.map_or(0, |k| k.len() + k.len() / 2));
        if self.style_for(bucket) == AddressingStyle::Path {
            path.push('/');
            path.push_str(&uri_encode(bucket, true));
        }
        match key {
            Some(k) => {
                path.push('/');
                path.push_str(&uri_encode(k, false));
            }
            None if path.is_empty() => path.push('/'),
            None => {}
        }
        Request::new(method, self.host_header(bucket), path)
    }

    /// Checks that `bucket` can be addressed at all and says which style will be used.
    ///
    /// Refused: an empty name, one longer than 255 bytes, or one with characters that cannot
    /// be a bucket name anywhere (anything but letters, digits, `.`, `-`, `_`). AWS's stricter
    /// rules (3–63 lower-case characters) are not enforced, since custom stores and legacy
    /// buckets differ; names that cannot be virtual-hosted fall back to path-style.
    pub fn check_bucket(&self, bucket: &str) -> Result<AddressingStyle, Error> {
        if bucket.is_empty() {
            return Err(Error::Config("bucket name is empty".into()));
        }
        if bucket.len() > 255 {
            return Err(Error::Config(format!(
                "bucket name {bucket:?} is longer than 255 bytes"
            )));
        }
        if let Some(c) = bucket
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')))
        {
            return Err(Error::Config(format!(
                "bucket name {bucket:?} contains {c:?}; bucket names have only letters, digits, '.', '-' and '_'"
            )));
        }
        Ok(self.style_for(bucket))
    }
}

/// Whether a bucket name works as a DNS label in front of the endpoint's host: lower-case
/// letters, digits, `-` and `.` (dots only over http: `a.b.s3.amazonaws.com` does not match the
/// `*.s3.amazonaws.com` certificate), 3 to 63 characters, starting and ending with a letter or
/// digit, no empty label.
pub fn virtual_host_ok(bucket: &str, scheme: Scheme) -> bool {
    let b = bucket.as_bytes();
    (3..=63).contains(&b.len())
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'.')
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
        && !bucket.contains("..")
        && !(scheme == Scheme::Https && bucket.contains('.'))
}

fn is_aws_host(host: &str) -> bool {
    host == "amazonaws.com"
        || host.ends_with(".amazonaws.com")
        || host.ends_with(".amazonaws.com.cn")
}

/// A region goes into the SigV4 credential scope: it must be non-empty and free of `/` and
/// spaces. Custom stores use names like `us-east-1`, `garage` or `auto` (R2).
pub fn check_region(region: &str) -> Result<(), Error> {
    if region.is_empty() {
        return Err(Error::Config(
            "region is empty (AWS needs the bucket's region; MinIO and others accept us-east-1)"
                .into(),
        ));
    }
    if !region
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err(Error::Config(format!(
            "region {region:?} may contain only letters, digits, '-', '_' and '.'"
        )));
    }
    Ok(())
}

//! Topic names and topic filters (§4.7 of both specifications).

/// Checks a topic name that a PUBLISH carries: not empty (MQTT-4.7.3-1) and no wildcard
/// characters (MQTT-3.3.2-2). UTF-8 and U+0000 are checked with the string itself.
pub fn check_topic_name(topic: &[u8]) -> Result<(), &'static str> {
    if topic.is_empty() {
        return Err("empty topic name");
    }
    if topic.iter().any(|&b| b == b'+' || b == b'#') {
        return Err("wildcard character in a topic name");
    }
    Ok(())
}

/// True when `topic` is a non-empty run of printable ASCII without `+`, `#` or U+0000: a
/// valid topic name with nothing more to check. Written as one branch-free pass (it
/// vectorises); `false` only means the full checks must decide.
#[inline]
pub fn is_plain_topic_name(topic: &[u8]) -> bool {
    !topic.is_empty()
        && topic.iter().fold(true, |ok, &b| {
            ok & (b != 0) & (b < 0x80) & (b != b'+') & (b != b'#')
        })
}

/// Checks a topic filter: not empty, `#` only as the whole last level, `+` only as a whole
/// level (§4.7.1.2, §4.7.1.3).
pub fn check_topic_filter(filter: &[u8]) -> Result<(), &'static str> {
    if filter.is_empty() {
        return Err("empty topic filter");
    }
    let levels = filter.split(|&b| b == b'/');
    let count = filter.iter().filter(|&&b| b == b'/').count() + 1;
    for (i, level) in levels.enumerate() {
        if level.contains(&b'#') && (level.len() != 1 || i + 1 != count) {
            return Err("`#` must be the whole last level");
        }
        if level.contains(&b'+') && level.len() != 1 {
            return Err("`+` must be a whole level");
        }
    }
    Ok(())
}

/// MQTT 5 §4.8.2: a topic filter starting with `$share/` is a shared subscription, and must
/// go on with a ShareName of at least one character without `/`, `+` or `#`, then `/` and a
/// topic filter (MQTT-4.8.2-1, MQTT-4.8.2-2). Returns whether `filter` is a shared
/// subscription. MQTT 3.1.1 gives `$share` no meaning, so this applies to MQTT 5 only.
pub fn check_shared_filter(filter: &[u8]) -> Result<bool, &'static str> {
    let Some(rest) = filter.strip_prefix(b"$share/") else {
        return Ok(false);
    };
    let Some(slash) = rest.iter().position(|&b| b == b'/') else {
        return Err("shared subscription without a topic filter after the share name");
    };
    let (name, inner) = (&rest[..slash], &rest[slash + 1..]);
    if name.is_empty() {
        return Err("empty share name");
    }
    if name.iter().any(|&b| b == b'+' || b == b'#') {
        return Err("wildcard character in a share name");
    }
    check_topic_filter(inner)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_filters() {
        assert!(check_topic_name(b"a/b").is_ok());
        assert!(check_topic_name(b"/").is_ok());
        assert!(check_topic_name(b"").is_err());
        assert!(check_topic_name(b"a/+").is_err());
        assert!(check_topic_name(b"a/#").is_err());
        for ok in [
            "#",
            "+",
            "a/#",
            "a/+/b",
            "+/+",
            "/#",
            "$share/g/a/#",
            "sport/tennis/+",
        ] {
            assert!(check_topic_filter(ok.as_bytes()).is_ok(), "{ok}");
        }
        for bad in ["", "a#", "a/#/b", "a+", "a/b+/c", "##"] {
            assert!(check_topic_filter(bad.as_bytes()).is_err(), "{bad}");
        }
        assert_eq!(check_shared_filter(b"a/b"), Ok(false));
        assert_eq!(check_shared_filter(b"$share/g/a/#"), Ok(true));
        for bad in [
            "$share/g",
            "$share//a",
            "$share/+/a",
            "$share/g#/a",
            "$share/g/",
        ] {
            assert!(check_shared_filter(bad.as_bytes()).is_err(), "{bad}");
        }
    }
}

//! The store's clock against this host's: S3 refuses a request signed more than 15 minutes
//! off its own clock (`RequestTimeTooSkewed`, or a bodiless 403 to a HEAD), which otherwise reads
//! like wrong keys. Every response carries the store's `Date` (RFC 9110 IMF-fixdate); an error
//! answered while the two clocks are [`SKEW_NOTED`] or more apart says so. Sans-IO.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Clock differences at or above this are named in an error (S3 allows 15 minutes).
pub const SKEW_NOTED: Duration = Duration::from_secs(5 * 60);

/// Parses an IMF-fixdate, `Sun, 06 Nov 1994 08:49:37 GMT`. `None` for anything else.
pub fn parse_http_date(s: &str) -> Option<SystemTime> {
    let s = s.trim();
    let rest = s.get(5..)?; // "Sun, "
    if !s.get(3..5)?.eq(", ") {
        return None;
    }
    let mut it = rest.split(' ');
    let day: u32 = it.next()?.parse().ok()?;
    let month = match it.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: i64 = it.next()?.parse().ok()?;
    let mut hms = it.next()?.split(':');
    let h: u64 = hms.next()?.parse().ok()?;
    let m: u64 = hms.next()?.parse().ok()?;
    let sec: u64 = hms.next()?.parse().ok()?;
    if it.next()? != "GMT" || it.next().is_some() || hms.next().is_some() {
        return None;
    }
    if !(1..=31).contains(&day) || h > 23 || m > 59 || sec > 60 || !(1970..=9999).contains(&year) {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let secs = u64::try_from(days).ok()? * 86_400 + h * 3_600 + m * 60 + sec;
    UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (i64::from(month) + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// How far this host's clock (`local`, when the request was signed) is ahead of the store's
/// `Date` (negative: behind), in seconds; `None` without a readable `Date`.
pub fn skew_secs(date: Option<&str>, local: SystemTime) -> Option<i64> {
    let store = parse_http_date(date?)?;
    let secs = |t: SystemTime| -> Option<i64> {
        i64::try_from(t.duration_since(UNIX_EPOCH).ok()?.as_secs()).ok()
    };
    Some(secs(local)? - secs(store)?)
}

/// The sentence an error gets when the clocks are [`SKEW_NOTED`] or more apart.
pub fn skew_note(skew: i64) -> Option<String> {
    let abs = skew.unsigned_abs();
    if abs < SKEW_NOTED.as_secs() {
        return None;
    }
    let (h, m, s) = (abs / 3_600, abs % 3_600 / 60, abs % 60);
    let way = if skew > 0 { "ahead of" } else { "behind" };
    Some(format!(
        "this host's clock is {h}h {m:02}m {s:02}s {way} the store's (its Date header); S3 \
         refuses requests signed more than 15 minutes off its clock, which reads like wrong \
         keys: set this host's clock right (NTP)"
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn imf_fixdates_parse_and_others_do_not() {
        let t = parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert_eq!(t.duration_since(UNIX_EPOCH).unwrap().as_secs(), 784_111_777);
        let t = parse_http_date("Sun, 06 Dec 2026 10:00:00 GMT").unwrap();
        assert_eq!(
            t.duration_since(UNIX_EPOCH).unwrap().as_secs(),
            1_796_551_200
        );
        let t = parse_http_date("Thu, 29 Feb 2024 23:59:59 GMT").unwrap();
        assert_eq!(
            t.duration_since(UNIX_EPOCH).unwrap().as_secs(),
            1_709_251_199
        );
        for bad in [
            "",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 32 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 24:49:37 GMT",
            "Sun, 06 Nov 1994 08:49 GMT",
            "Sun, 06 Nov 1994 08:49:37 GMT extra",
            "Sun, 06 Nov 99999999999999999999 08:49:37 GMT",
        ] {
            assert_eq!(parse_http_date(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_skew_of_five_minutes_or_more_is_named_with_its_direction() {
        let store = "Sun, 06 Dec 2026 10:00:00 GMT";
        let local = UNIX_EPOCH + Duration::from_secs(1_796_551_200 + 2 * 3_600 + 3);
        let skew = skew_secs(Some(store), local).unwrap();
        assert_eq!(skew, 7_203);
        let note = skew_note(skew).unwrap();
        assert!(note.contains("2h 00m 03s ahead of"), "{note}");
        assert!(skew_note(-400).unwrap().contains("0h 06m 40s behind"));
        assert_eq!(skew_note(299), None);
        assert_eq!(skew_note(-299), None);
        assert_eq!(skew_secs(None, local), None);
        assert_eq!(skew_secs(Some("garbage"), local), None);
    }
}

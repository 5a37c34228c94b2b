//! # Time, handed in
//!
//! The core never reads a clock. Drivers pass `now` as a [`Timestamp`]: wall-clock milliseconds
//! since the Unix epoch, because the time budget of a submission counts from its first attempt
//! across reloads and restarts (CONTRACT.md section 2), and `Retry-After` may name an HTTP-date.

use super::prelude::*;
use ::core::fmt;
use ::core::ops::Add;
use ::core::time::Duration;

/// Wall-clock time in milliseconds since the Unix epoch, as the driver read it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The time `ms` milliseconds after the Unix epoch.
    pub const fn from_millis(ms: u64) -> Timestamp {
        Timestamp(ms)
    }

    /// Milliseconds since the Unix epoch.
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// How long after `earlier` this is; zero when it is not after it.
    pub fn saturating_since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Timestamp {
    type Output = Timestamp;
    fn add(self, d: Duration) -> Timestamp {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Timestamp(self.0.saturating_add(ms))
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t+{}ms", self.0)
    }
}

/// Reads an HTTP-date (RFC 9110 section 5.6.7): the IMF-fixdate form
/// (`Sun, 06 Nov 1994 08:49:37 GMT`) and the two obsolete forms recipients must still accept
/// (`Sunday, 06-Nov-94 08:49:37 GMT` and `Sun Nov  6 08:49:37 1994`).
pub fn parse_http_date(s: &str) -> Option<Timestamp> {
    let s = s.trim();
    let words: Vec<&str> = s.split_ascii_whitespace().collect();
    let (day, month, year, clock) = match words.as_slice() {
        // IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT
        [wd, d, m, y, t, "GMT"] if wd.ends_with(',') => (*d, *m, y.parse::<i64>().ok()?, *t),
        // RFC 850: Sunday, 06-Nov-94 08:49:37 GMT
        [wd, dmy, t, "GMT"] if wd.ends_with(',') => {
            let mut parts = dmy.split('-');
            let (d, m, y) = (parts.next()?, parts.next()?, parts.next()?);
            if parts.next().is_some() || y.len() != 2 {
                return None;
            }
            let y: i64 = y.parse().ok()?;
            // Two-digit years: RFC 9110 says to read them as within 50 years from now; with no
            // clock here, 70 and above are 19xx, the rest 20xx.
            (d, m, if y >= 70 { 1900 + y } else { 2000 + y }, *t)
        }
        // asctime: Sun Nov  6 08:49:37 1994
        [_, m, d, t, y] => (*d, *m, y.parse::<i64>().ok()?, *t),
        _ => return None,
    };
    let day: i64 = day.parse().ok()?;
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .iter()
    .position(|m| *m == month)? as i64
        + 1;
    let mut hms = clock.split(':').map(|p| p.parse::<i64>().ok());
    let (h, mi, sec) = (hms.next()??, hms.next()??, hms.next()??);
    if hms.next().is_some()
        || !(1..=31).contains(&day)
        || !(0..24).contains(&h)
        || !(0..60).contains(&mi)
        || !(0..=60).contains(&sec)
        || !(1970..=9999).contains(&year)
    {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec;
    u64::try_from(secs)
        .ok()
        .map(|s| Timestamp::from_millis(s * 1000))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_http_date_forms_agree() {
        let expected = Timestamp::from_millis(784_111_777_000);
        assert_eq!(
            parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(expected)
        );
        assert_eq!(
            parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"),
            Some(expected)
        );
        assert_eq!(parse_http_date("Sun Nov  6 08:49:37 1994"), Some(expected));
        assert_eq!(
            parse_http_date("Tue, 01 Dec 2026 12:00:00 GMT"),
            Some(Timestamp::from_millis(1_796_126_400_000))
        );
    }

    #[test]
    fn malformed_dates_are_none() {
        for bad in [
            "",
            "tomorrow",
            "Sun, 06 Nov 1994 08:49:37 PST",
            "Sun, 32 Nov 1994 08:49:37 GMT",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 25:49:37 GMT",
            "Sun, 06 Nov 1994 08:49 GMT",
            "Sun, 06 Nov 1994 08:49:37:01 GMT",
            "Sun, 06 Nov 99999999999999999999 08:49:37 GMT",
        ] {
            assert_eq!(parse_http_date(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn adding_saturates() {
        let t = Timestamp::from_millis(u64::MAX - 1) + Duration::from_secs(10);
        assert_eq!(t.as_millis(), u64::MAX);
        assert_eq!(
            Timestamp::from_millis(5).saturating_since(Timestamp::from_millis(9)),
            Duration::ZERO
        );
    }
}

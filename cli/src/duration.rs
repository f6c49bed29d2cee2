//! Durations on the command line, in the library's grammar: `500ms`, `30s`, `2m`, `1h`,
//! `1m30s`.

use std::time::Duration;

/// Parses a duration in the library's grammar
/// ([`parse_duration`](ydb_coordination::config::parse_duration): `500ms`, `30s`, `2m`,
/// `1h`, `1.5s`, `1m30s`, `1d`; a bare number only `0`), at most [`LONGEST`].
pub(crate) fn parse(input: &str) -> Result<Duration, String> {
    let total = ydb_coordination::config::parse_duration(input).map_err(|_| {
        let bare_number =
            !input.is_empty() && input.chars().all(|c| c.is_ascii_digit() || c == '.');
        if bare_number && input.parse::<f64>().is_ok() {
            format!("duration {input:?} needs a unit (ms, s, m, h or d)")
        } else {
            format!("invalid duration {input:?} (expected e.g. 500ms, 30s, 2m, 1h)")
        }
    })?;
    if total > LONGEST {
        return Err(format!(
            "duration {input:?} is longer than {} days; give a shorter one",
            LONGEST.as_secs() / 86_400
        ));
    }
    Ok(total)
}

/// The longest duration [`parse`] accepts: ten thousand days, so that every deadline made of
/// one is an instant the clock can hold.
const LONGEST: Duration = Duration::from_secs(10_000 * 86_400);

/// Formats a duration the way [`parse`] reads it (`1h2m3s`, `1.5s`, `250ms`).
pub(crate) fn format(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".to_string();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    if !ms.is_multiple_of(1000) && ms < 60_000 {
        return format!("{}s", d.as_secs_f64());
    }
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || out.is_empty() {
        out.push_str(&format!("{s}s"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_a_duration_no_deadline_could_hold() {
        assert_eq!(parse("10000d"), Ok(LONGEST));
        assert!(parse("10001d").is_err());
        assert!(parse("200000000000000d").is_err());
    }

    #[test]
    fn parses_common_units() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "", "abc", "10", "10x", "s", "-1s", "1..5s", ".s", "1e3s", "5 s", " 5s",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn formats_round_trip() {
        for d in ["250ms", "1.5s", "30s", "2m", "1h", "1h2m3s"] {
            let parsed = parse(d).ok();
            assert_eq!(parsed.map(format).as_deref(), Some(d));
        }
    }
}

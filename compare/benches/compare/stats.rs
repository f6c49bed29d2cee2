//! Sample statistics and number formatting for the comparison table.

use std::time::Duration;

/// The median and 90th percentile of a set of durations (nearest rank).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Summary {
    pub(crate) median: Duration,
    pub(crate) p90: Duration,
}

impl Summary {
    /// Summarizes `samples`; `None` when there are none.
    pub(crate) fn of(samples: &[Duration]) -> Option<Self> {
        if samples.is_empty() {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        Some(Self {
            median: nearest_rank(&sorted, 0.5),
            p90: nearest_rank(&sorted, 0.9),
        })
    }

    /// `median (p90 …)` for the table.
    pub(crate) fn cell(&self) -> String {
        format!(
            "{} (p90 {})",
            fmt_duration(self.median),
            fmt_duration(self.p90)
        )
    }
}

/// The `q` quantile of `sorted` (ascending) by nearest rank; zero when it is empty.
pub(crate) fn nearest_rank(sorted: &[Duration], q: f64) -> Duration {
    let n = sorted.len();
    let i = ((q * n as f64).ceil() as usize).clamp(1, n.max(1)) - 1;
    sorted.get(i).copied().unwrap_or_default()
}

/// The `q` quantile of `samples` (in any order) by nearest rank; zero when there are none.
pub(crate) fn quantile(samples: &[Duration], q: f64) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    nearest_rank(&sorted, q)
}

/// A duration in µs below 10 ms, in ms below 10 s, else in s.
pub(crate) fn fmt_duration(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 10_000.0 {
        format!("{us:.0} µs")
    } else if us < 10_000_000.0 {
        format!("{:.1} ms", us / 1e3)
    } else {
        format!("{:.2} s", us / 1e6)
    }
}

/// A rate with thousands separators, e.g. `12,345/s`.
pub(crate) fn fmt_rate(per_second: f64) -> String {
    format!("{}/s", group(per_second.round() as u64))
}

/// Bytes with thousands separators, e.g. `1,234 B`.
pub(crate) fn fmt_bytes(bytes: f64) -> String {
    if bytes < 0.0 {
        return format!("-{}", fmt_bytes(-bytes));
    }
    format!("{} B", group(bytes.round() as u64))
}

/// `12345` as `12,345`.
pub(crate) fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `a / b` as a ratio string (`1.23×`), or `n/a`.
pub(crate) fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 && a.is_finite() && b.is_finite() {
        format!("{:.2}×", a / b)
    } else {
        "n/a".to_string()
    }
}

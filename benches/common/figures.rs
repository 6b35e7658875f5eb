//! What the side-by-side benches share when they print: a median of rounds,
//! a median with its middle 80%, and a rate with thousands separators.
//! Included with `#[path]`.

// Each bench takes what it prints with.
#![allow(dead_code)]

/// The median of `v` (the mean of the middle two for an even count).
pub(crate) fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// `r` rounded, with commas between thousands: `12,345`.
pub(crate) fn fmt_rate(r: f64) -> String {
    let s = format!("{:.0}", r.max(0.0));
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// The values of `v` at 50%, 10% and 90% of the way up, as `(median, low,
/// high)`: a median and the middle 80% around it, by index (no averaging).
pub(crate) fn middle_80(v: &[f64]) -> (f64, f64, f64) {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let at = |percent: usize| v[(v.len() - 1) * percent / 100];
    (at(50), at(10), at(90))
}

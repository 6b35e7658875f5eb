//! What the side-by-side benches share when they print: a median of rounds
//! and a rate with thousands separators. Included with `#[path]`.

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

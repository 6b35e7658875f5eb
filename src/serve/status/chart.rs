//! The status page's chart of one limit's last hour: an inline SVG, drawn
//! here (no script, nothing fetched), a bar a minute with the attempts
//! allowed at its foot and those limited stacked above in another colour.
//! Its `<title>` and `aria-label` say the hour's totals, each bar's `<title>`
//! its minute's.

use std::fmt::Write as _;

use limit_store::limits::LastHour;
use limit_store::Millis;

use super::escape;

/// Pixels a minute takes: a bar of [`BAR`] and a gap of 1.
const STEP: usize = 3;
const BAR: usize = 2;
/// The bars' height at the busiest minute.
const HEIGHT: u64 = 30;
/// Where the bars stand, from the top (room above for the scale's label).
const BASE: u64 = 11 + HEIGHT;
/// Colours: allowed (blue) and limited (orange) apart for every kind of
/// colour sight; the page's legend uses the same.
pub(super) const ALLOWED: &str = "#3b6ea5";
pub(super) const LIMITED: &str = "#e8590c";

/// The chart of limit `name`'s `hour`.
pub(super) fn last_hour(name: &str, hour: &LastHour) -> String {
    let minutes = hour.allowed.len();
    let width = minutes * STEP;
    let said = format!(
        "{}: {} allowed, {} limited in the last hour",
        escape(name),
        hour.allowed.iter().sum::<u64>(),
        hour.limited.iter().sum::<u64>()
    );
    let busiest = hour.allowed.iter().zip(&hour.limited).map(|(a, l)| a + l).max().unwrap_or(0);
    let mut svg = String::with_capacity(2048);
    let _ = write!(
        svg,
        "<svg class=\"last-hour\" role=\"img\" aria-label=\"{said}\" width=\"{width}\" height=\"{h}\" \
         viewBox=\"0 0 {width} {h}\" xmlns=\"http://www.w3.org/2000/svg\"><title>{said}</title>\
         <text x=\"0\" y=\"8\" class=\"scale\">{scale}</text>\
         <line x1=\"0\" y1=\"{BASE}\" x2=\"{width}\" y2=\"{BASE}\" stroke=\"#bbb\"/>",
        h = BASE + 11,
        scale = if busiest == 0 { "none".to_owned() } else { format!("{busiest}/min at most") },
    );
    for (i, (&allowed, &limited)) in hour.allowed.iter().zip(&hour.limited).enumerate() {
        if allowed + limited == 0 {
            continue;
        }
        let x = i * STEP;
        let low = bar(allowed, busiest);
        let high = bar(allowed + limited, busiest) - low;
        let at = clock_time(hour.first_minute + Millis::try_from(i).unwrap_or(0) * 60_000);
        let _ = write!(svg, "<g><title>{at} UTC: {allowed} allowed, {limited} limited</title>");
        if low > 0 {
            let _ = write!(
                svg,
                "<rect class=\"allowed\" x=\"{x}\" y=\"{}\" width=\"{BAR}\" height=\"{low}\" fill=\"{ALLOWED}\"/>",
                BASE - low
            );
        }
        if high > 0 {
            let _ = write!(
                svg,
                "<rect class=\"limited\" x=\"{x}\" y=\"{}\" width=\"{BAR}\" height=\"{high}\" fill=\"{LIMITED}\"/>",
                BASE - low - high
            );
        }
        svg.push_str("</g>");
    }
    let _ = write!(
        svg,
        "<text x=\"0\" y=\"{y}\" class=\"scale\">-60 min</text>\
         <text x=\"{width}\" y=\"{y}\" class=\"scale\" text-anchor=\"end\">now</text></svg>",
        y = BASE + 10,
    );
    svg
}

/// A bar's height for `count` when `busiest` fills the chart: at least a
/// pixel for any count, so a single attempt shows.
fn bar(count: u64, busiest: u64) -> u64 {
    if count == 0 {
        return 0;
    }
    (count * HEIGHT).div_ceil(busiest.max(1)).clamp(1, HEIGHT)
}

/// `hh:mm` of `at` (ms since the Unix epoch), in UTC.
fn clock_time(at: Millis) -> String {
    let minutes = at.div_euclid(60_000).rem_euclid(24 * 60);
    format!("{:02}:{:02}", minutes / 60, minutes % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hour(allowed: &[(usize, u64)], limited: &[(usize, u64)]) -> LastHour {
        // The hour up to 1_700_000_000_000 (22:13:20 UTC), as a limit that
        // counted nothing has it, then filled in.
        let limits = limit_store::Limits::builder().single_instance(true).build().expect("the presets build");
        let mut hour = limits.last_hour("sign-in", 1_700_000_000_000).expect("a preset");
        assert_eq!(hour.first_minute, (1_700_000_000_000 / 60_000 - 59) * 60_000);
        for &(i, n) in allowed {
            hour.allowed[i] = n;
        }
        for &(i, n) in limited {
            hour.limited[i] = n;
        }
        hour
    }

    /// The label says the hour's totals, each minute with attempts gets its
    /// bars (limited above allowed, in its own colour), and the busiest
    /// minute fills the height.
    #[test]
    fn the_chart_says_and_draws_the_hour() {
        let svg = last_hour("sign-in", &hour(&[(3, 10), (59, 2)], &[(59, 2)]));
        let said = "sign-in: 12 allowed, 2 limited in the last hour";
        assert!(svg.contains(&format!("aria-label=\"{said}\"")) && svg.contains(&format!("<title>{said}</title>")));
        assert_eq!(svg.matches("<rect class=\"allowed\"").count(), 2, "{svg}");
        assert_eq!(svg.matches("<rect class=\"limited\"").count(), 1, "{svg}");
        assert!(svg.contains(&format!("x=\"9\" y=\"11\" width=\"2\" height=\"30\" fill=\"{ALLOWED}\"")), "{svg}");
        assert!(svg.contains(&format!("x=\"177\" y=\"35\" width=\"2\" height=\"6\" fill=\"{ALLOWED}\"")), "{svg}");
        assert!(svg.contains(&format!("x=\"177\" y=\"29\" width=\"2\" height=\"6\" fill=\"{LIMITED}\"")), "{svg}");
        assert!(svg.contains(">10/min at most<"), "{svg}");
        assert!(!svg.contains("<script"), "{svg}");
    }

    /// Each bar's title names its minute, in UTC.
    #[test]
    fn a_bar_says_its_minute() {
        let h = hour(&[(59, 1)], &[]);
        let svg = last_hour("api", &h);
        let at = clock_time(h.first_minute + 59 * 60_000);
        assert_eq!(at, "22:13", "1_700_000_000_000 is 22:13:20 UTC");
        assert!(svg.contains("<title>22:13 UTC: 1 allowed, 0 limited</title>"), "{svg}");
    }

    /// A limit's name is the site's own: it cannot write markup into the page.
    #[test]
    fn a_name_cannot_inject_markup() {
        let svg = last_hour("<script>alert(1)</script>\" onload=\"x", &hour(&[], &[]));
        assert!(!svg.contains("<script") && !svg.contains("\" onload"), "{svg}");
        assert!(svg.contains("&lt;script&gt;alert(1)&lt;/script&gt;&quot; onload=&quot;x: 0 allowed"), "{svg}");
    }

    /// One attempt in a busy hour still shows; none draws nothing.
    #[test]
    fn a_bar_is_at_least_a_pixel() {
        assert_eq!((bar(0, 1_000), bar(1, 1_000), bar(1_000, 1_000), bar(1, 0)), (0, 1, HEIGHT, HEIGHT));
    }
}

//! `GET /`: the status page, server-rendered HTML with no script: the limits
//! with their budgets, windows and policies, what each answered since start
//! and, beside it, a chart of its last hour a minute at a time, the store's
//! fill against its bound, the unavailable answers by reason, and the
//! version and uptime.

use std::fmt::Write as _;
use std::sync::OnceLock;
use std::time::Duration;

use base64::prelude::{Engine as _, BASE64_STANDARD};
use sha2::{Digest, Sha256};

use limit_store::clock::{Clock, SystemClock};

use super::App;

mod chart;

/// The page's one stylesheet, inline.
fn style() -> String {
    format!("{STYLE}th span.allowed{{color:{}}}th span.limited{{color:{}}}", chart::ALLOWED, chart::LIMITED)
}

/// What the page may load, as its `Content-Security-Policy`: its own inline
/// style, named by its SHA-256, and nothing else (no script, no request
/// out); no page may frame it.
pub fn policy() -> &'static str {
    static POLICY: OnceLock<String> = OnceLock::new();
    POLICY.get_or_init(|| {
        let hash = BASE64_STANDARD.encode(Sha256::digest(style()));
        format!(
            "default-src 'none'; style-src 'sha256-{hash}'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
        )
    })
}

/// The page, as it stands now.
pub fn render(app: &App) -> String {
    let mut html = String::with_capacity(8 * 1024);
    let _ = write!(
        html,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>limit-store</title>\
         <meta name=\"viewport\" content=\"width=device-width\"><style>{}</style></head><body>\
         <h1>limit-store <small id=\"version\">{}</small></h1><p id=\"uptime\">up {}</p>",
        style(),
        env!("CARGO_PKG_VERSION"),
        uptime(app.started.elapsed()),
    );
    let limits = app.limits.current();
    html.push_str("<h2>Limits</h2><table id=\"limits\"><thead><tr><th>limit</th><th>part</th><th>budget</th><th>window</th><th>policy</th><th>allowed</th><th>limited</th><th>degraded</th><th>shadow</th><th>last hour<br><small><span class=\"allowed\">allowed</span> <span class=\"limited\">limited</span></small></th></tr></thead><tbody>");
    // Minutes by this host's clock: the store's for the memory store, and
    // within a few seconds of a shared store's.
    let now = SystemClock.now();
    for name in limits.names() {
        let (Some(limit), Some(c), Some(hour)) =
            (limits.limit(&name), limits.counters(&name), limits.last_hour(&name, now))
        else {
            continue;
        };
        for (i, part) in limit.parts().iter().enumerate() {
            let first = i == 0;
            let _ = write!(
                html,
                "<tr data-limit=\"{n}\"><td>{n}</td><td>{p}</td><td class=\"budget\">{b}</td><td>{w}</td><td>{pol}</td>",
                n = if first { escape(&name) } else { String::new() },
                p = escape(part.name()),
                b = part.algorithm().budget(),
                w = window(part.algorithm().window()),
                pol = if first { limit.unavailable_policy().to_string() } else { String::new() },
            );
            if first {
                let _ = write!(
                    html,
                    "<td class=\"allowed\">{}</td><td class=\"limited\">{}</td><td class=\"degraded\">{}</td><td>{}</td>\
                     <td class=\"chart\" rowspan=\"{}\">{}</td></tr>",
                    c.allowed,
                    c.limited,
                    c.degraded,
                    c.shadow_refused,
                    limit.parts().len(),
                    chart::last_hour(&name, &hour),
                );
            } else {
                html.push_str("<td></td><td></td><td></td><td></td></tr>");
            }
        }
    }
    html.push_str("</tbody></table><h2>Store</h2>");
    match limit_store::LimitStore::stats(&**app.limits.store()) {
        Some(s) => {
            #[allow(clippy::cast_precision_loss)] // a percentage for people
            let fill = s.held as f64 * 100.0 / s.max_entries.max(1) as f64;
            let _ = write!(
                html,
                "<p id=\"store\"><span id=\"live\">{}</span> live entries of a bound of <span id=\"bound\">{}</span> \
                 (<span id=\"fill\">{fill:.1}%</span> full); {} sweeps removed {} expired entries.</p>",
                s.held, s.max_entries, s.sweeps, s.swept
            );
        }
        None => html.push_str("<p id=\"store\">The store keeps no count of its entries.</p>"),
    }
    html.push_str("<h2>Unavailable answers</h2><table id=\"unavailable\"><thead><tr><th>reason</th><th>answers</th></tr></thead><tbody>");
    for (reason, n) in app.metrics.unavailable_by_reason() {
        let _ = write!(html, "<tr><td>{reason}</td><td>{n}</td></tr>");
    }
    html.push_str("</tbody></table></body></html>");
    html
}

const STYLE: &str = "body{font:15px/1.4 system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse}\
td,th{padding:.25em .8em;border-bottom:1px solid #ddd;text-align:left}small{color:#777}\
td.chart{vertical-align:top;padding-top:.4em}.scale{font-size:9px;fill:#777}";

fn window(ms: i64) -> String {
    match ms {
        ms if ms % 86_400_000 == 0 => format!("{} d", ms / 86_400_000),
        ms if ms % 3_600_000 == 0 => format!("{} h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{} min", ms / 60_000),
        ms if ms % 1_000 == 0 => format!("{} s", ms / 1_000),
        ms => format!("{ms} ms"),
    }
}

fn uptime(d: Duration) -> String {
    let s = d.as_secs();
    format!("{}h {}m {}s", s / 3600, s / 60 % 60, s % 60)
}

/// Text for HTML: limit and part names are the app's own.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

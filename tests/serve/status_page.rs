//! The status page in a real browser: headless Chromium (Debian's) renders
//! `GET /`, and the DOM holds the limits, their budgets and the counts since
//! start, each limit's chart of its last hour (an SVG that says its counts),
//! the store's fill and the version, and no script. A screenshot is kept in
//! `target/serve-status.png`.

use std::path::Path;
use std::process::Command;

use crate::common::serve::Serve;

const CHROMIUM: &str = "/usr/bin/chromium";

fn chromium(url: &str, what: &[&str]) -> std::process::Output {
    let profile = std::env::temp_dir().join(format!("limit-store-chromium-{}", std::process::id()));
    let out = Command::new(CHROMIUM)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"])
        .args(["--disable-component-update", "--disable-sync", "--disable-quic"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(what)
        .arg(url)
        .output()
        .expect("run chromium");
    let _ = std::fs::remove_dir_all(profile);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_shows_the_limits_and_their_figures() {
    if !Path::new(CHROMIUM).exists() {
        // .ci/run installs Debian's chromium and fails if it can't.
        eprintln!("{CHROMIUM} is not installed: skipping the browser test (apt-get install chromium)");
        return;
    }
    let serve = Serve::start(None, &[], &[]).await;
    let body = r#"{"keys": {"account": "page@example.com", "ip": "192.0.2.50"}}"#;
    for _ in 0..7 {
        serve.post("/v1/limits/sign-in/attempt", body).await;
    }
    let url = format!("http://{}/", serve.addr);
    let dom = chromium(&url, &["--dump-dom", "--enable-logging=stderr", "--v=0"]);
    assert!(dom.status.success(), "{}", String::from_utf8_lossy(&dom.stderr));
    let console = String::from_utf8_lossy(&dom.stderr);
    assert!(!console.contains("Content Security Policy"), "the page's policy allows its own style:\n{console}");
    let dom = String::from_utf8_lossy(&dom.stdout);
    for limit in ["sign-in", "password-reset", "code-sent", "code-verify", "api"] {
        assert!(dom.contains(&format!("<tr data-limit=\"{limit}\"><td>{limit}</td>")), "{limit} missing:\n{dom}");
    }
    let sign_in = dom.split("<tr data-limit=\"sign-in\">").nth(1).unwrap();
    assert!(sign_in.contains("<td class=\"budget\">5</td><td>15 min</td><td>deny</td>"), "{sign_in}");
    assert!(sign_in.contains("<td class=\"allowed\">5</td><td class=\"limited\">2</td>"), "{sign_in}");
    assert!(dom.contains("<span id=\"live\">2</span>") && dom.contains("<span id=\"bound\">100000</span>"), "{dom}");
    assert!(dom.contains(env!("CARGO_PKG_VERSION")), "{dom}");

    // Beside the figures, each limit's last hour: sign-in's says its 5 and 2
    // and draws them (in the last minute or two: the attempts may straddle
    // one), the others say none and draw none.
    let said = "sign-in: 5 allowed, 2 limited in the last hour";
    let chart = sign_in
        .split("<td class=\"chart\" rowspan=\"2\">")
        .nth(1)
        .expect("sign-in's chart")
        .split("</svg>")
        .next()
        .unwrap();
    assert!(chart.starts_with("<svg class=\"last-hour\" role=\"img\""), "{chart}");
    assert!(
        chart.contains(&format!("aria-label=\"{said}\"")) && chart.contains(&format!("<title>{said}</title>")),
        "{chart}"
    );
    let bars = |class: &str| chart.matches(&format!("<rect class=\"{class}\"")).count();
    assert!((1..=2).contains(&bars("allowed")) && (1..=2).contains(&bars("limited")), "{chart}");
    let api = dom.split("<tr data-limit=\"api\">").nth(1).unwrap().split("</svg>").next().unwrap();
    assert!(
        api.contains("aria-label=\"api: 0 allowed, 0 limited in the last hour\"") && !api.contains("<rect"),
        "{api}"
    );
    assert!(!dom.to_ascii_lowercase().contains("<script"), "the page runs no script:\n{dom}");

    let shot = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/serve-status.png");
    let _ = std::fs::remove_file(&shot);
    let taken = chromium(&url, &["--window-size=1100,800", &format!("--screenshot={}", shot.display())]);
    assert!(taken.status.success() && shot.exists(), "{}", String::from_utf8_lossy(&taken.stderr));
}

/// The page loads its own inline style and nothing else, and no other page
/// may frame it; every answer, JSON errors and metrics included, is read as
/// the type it says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_allows_no_script_and_no_frame_and_no_answer_is_sniffed() {
    let serve = Serve::start(None, &[], &[]).await;
    let page = serve.request("GET", "/", &[], b"").await.unwrap();
    assert_eq!(page.status, 200);
    let policy = page.header("content-security-policy").expect("a policy on the page");
    for rule in ["default-src 'none'", "frame-ancestors 'none'", "base-uri 'none'"] {
        assert!(policy.contains(rule), "{rule} in {policy}");
    }
    assert!(!policy.contains("script-src"), "no script is allowed: {policy}");
    assert_eq!(page.header("x-frame-options"), Some("DENY"));
    for path in ["/", "/v1/limits", "/metrics", "/healthz", "/no-such-page", "/v1/limits/no-such-limit/attempt"] {
        let r = serve.request("GET", path, &[], b"").await.unwrap();
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"), "{path}: {} {:?}", r.status, r.headers);
    }
}

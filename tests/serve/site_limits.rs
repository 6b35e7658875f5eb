//! Limits of the site's own, defined in the settings file, on the real
//! binary: `serve` counts them (two parts, a lockout, a value's override), a
//! refused attempt spends no other part's budget, `GET /v1/limits` lists
//! them, a bad table is refused with its line at start and by
//! `check-config`, and the guide's example (`docs/guide/settings.md`) passes
//! `check-config` as written.

use std::path::Path;

use crate::common::serve::{limit_store, scratch, Serve};

const UPLOADS: &str = "/v1/limits/uploads/attempt";

/// `user`: 3 an hour, `big-co` 6; `ip`: a lockout of 5, locked an hour.
pub const SETTINGS: &str = r#"
[rate_limit]
single_instance = true

[rate_limit.limits.uploads]
parts = ["user", "ip"]
budget = 3
window = "1h"

[rate_limit.limits.uploads.ip]
algorithm = "lockout"
budget = 5
lock = "1h"
normalize = "ip"

[rate_limit.limits.uploads.user.overrides]
"big-co" = { budget = 6 }
"#;

fn body(user: &str, ip: &str) -> String {
    format!(r#"{{"keys": {{"user": "{user}", "ip": "{ip}"}}}}"#)
}

fn check_config(file: &Path) -> (bool, String) {
    let out = limit_store().args(["check-config"]).arg(file).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_of_the_sites_own_counts_each_part_and_a_refusal_spends_nothing() {
    let dir = scratch("site-limits");
    let config = dir.join("limit-store.toml");
    std::fs::write(&config, SETTINGS).unwrap();
    let serve = Serve::start(Some(&config), &[], &[]).await;

    // `ann` spends her 3 from one address; her 4th is refused by `user`.
    for left in [2, 1, 0] {
        let r = serve.post(UPLOADS, &body("ann", "192.0.2.1")).await;
        assert_eq!((r.status, r.json()["remaining"].as_u64()), (200, Some(left)), "{}", r.body);
    }
    let r = serve.post(UPLOADS, &body("ann", "192.0.2.1")).await;
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(r.json()["limited_by"], "user");
    // The refusal did not count on `ip`: the address has 2 of its 5 left,
    // so `bob` gets 2, and the one that spends the 5th locks the address.
    for _ in 0..2 {
        assert_eq!(serve.post(UPLOADS, &body("bob", "192.0.2.1")).await.status, 200);
    }
    let r = serve.post(UPLOADS, &body("bob", "::ffff:192.0.2.1")).await;
    assert_eq!((r.status, r.json()["limited_by"].as_str()), (429, Some("ip")), "normalised as an address: {}", r.body);
    // Refused by the locked address, `bob` spent nothing of his own: from
    // another address he has the 1 left of his 3.
    let r = serve.post(UPLOADS, &body("bob", "192.0.2.2")).await;
    assert_eq!((r.status, r.json()["remaining"].as_u64()), (200, Some(0)), "{}", r.body);

    // `big-co` has its own budget of 6, over addresses of its own.
    let (mut allowed, mut answered_by_user) = (0, 0);
    for i in 0..10 {
        let r = serve.post(UPLOADS, &body("big-co", &format!("198.51.100.{i}"))).await;
        // The tighter part answers; when it is `user`, with big-co's budget.
        if r.json()["part"] == "user" {
            assert_eq!(r.json()["budget"], 6, "{}", r.body);
            answered_by_user += 1;
        }
        allowed += usize::from(r.status == 200);
    }
    assert_eq!(allowed, 6);
    assert!(answered_by_user >= 4, "the last allowed attempts and the refusals are user's");

    let r = serve.request("GET", "/v1/limits", &[], b"").await.unwrap();
    let limits = r.json()["limits"].as_array().unwrap().clone();
    let uploads = limits.iter().find(|l| l["name"] == "uploads").expect("uploads is listed");
    assert_eq!(uploads["preset"], false);
    let parts = uploads["parts"].as_array().unwrap();
    assert_eq!((parts[0]["name"].as_str(), parts[0]["algorithm"].as_str()), (Some("user"), Some("fixed-window")));
    assert_eq!((parts[0]["budget"].as_u64(), parts[0]["overrides"].as_u64()), (Some(3), Some(1)));
    assert_eq!((parts[1]["algorithm"].as_str(), parts[1]["lock_ms"].as_u64()), (Some("lockout"), Some(3_600_000)));
    assert_eq!((parts[1]["normalize"].as_str(), parts[1]["window_ms"].as_u64()), (Some("ip"), Some(3_600_000)));
    assert!(limits.iter().any(|l| l["name"] == "sign-in" && l["preset"] == true), "the presets stay");

    let doc = serve.request("GET", "/openapi.json", &[], b"").await.unwrap().json();
    let part = &doc["components"]["schemas"]["PartBody"]["properties"];
    assert!(part["overrides"].is_object() && part["lock_ms"].is_object() && part["normalize"].is_object(), "{part}");
    drop(serve);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_bad_table_is_refused_with_its_line_at_start_and_by_check_config() {
    let dir = std::env::temp_dir().join(format!("limit-store-site-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.toml");
    std::fs::write(&good, SETTINGS).unwrap();
    let (ok, text) = check_config(&good);
    assert!(ok, "{text}");
    assert!(text.contains("uploads (own, policy deny)"), "{text}");
    assert!(text.contains("user: fixed-window 3 per 1h, 1 overrides"), "{text}");
    assert!(text.contains("ip: lockout 5 per 1h, lock 1h"), "{text}");

    // The second part has no budget of its own: line 5 is its limit's table.
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[rate_limit]\nsingle_instance = true\n\n[rate_limit.limits.search]\nparts = [\"user\", \"ip\"]\nbudget = 3\nwindow = \"1m\"\n").unwrap();
    let (ok, text) = check_config(&bad);
    assert!(!ok, "{text}");
    assert!(text.contains("line 4") && text.contains("rate_limit.limits.search.ip.budget"), "{text}");
    let out = limit_store().args(["serve", "--listen", "127.0.0.1:0", "--config"]).arg(&bad).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("line 4") && stderr.contains("no budget"), "{stderr}");

    // A GCRA of 1 per 292 million years (i64::MAX ms) saturated its clock
    // and let every attempt through; a window over 100 years is refused,
    // an override's too.
    for table in [
        "[rate_limit.limits.forever]\nparts = [\"user\"]\nalgorithm = \"gcra\"\nbudget = 1\nwindow = \"106751991000d\"\n",
        "[rate_limit.limits.forever]\nparts = [\"user\"]\nbudget = 1\nwindow = \"1h\"\n\n[rate_limit.limits.forever.user.overrides]\nann = { budget = 1, window = \"36501d\" }\n",
    ] {
        let long = dir.join("long.toml");
        std::fs::write(&long, table).unwrap();
        let (ok, text) = check_config(&long);
        assert!(!ok && text.contains("at most 100 years"), "{table}: {text}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_guides_example_of_limits_of_your_own_passes_check_config_as_written() {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/guide/settings.md")).unwrap();
    let marker = "<!-- check-config:";
    let after = &page[page.find(marker).expect("the guide's settings page marks its example")..];
    let start = after.find("```toml\n").unwrap() + "```toml\n".len();
    let snippet = &after[start..start + after[start..].find("```").unwrap()];
    let file = std::env::temp_dir().join(format!("limit-store-readme-own-{}.toml", std::process::id()));
    std::fs::write(&file, snippet).unwrap();
    let (ok, text) = check_config(&file);
    assert!(ok, "{text}");
    assert!(text.contains("uploads (own, policy allow)") && text.contains("2 overrides"), "{text}");
    let _ = std::fs::remove_file(file);
}

/// A settings file or a file of Envoy rules is a regular file of at most
/// 1 MiB: a device that never ends (`/dev/zero`), a pipe nothing writes to
/// and a file of 2 MiB are each refused at once, naming the file, where
/// they filled the memory or hung.
#[test]
fn a_settings_file_that_is_no_file_or_too_large_is_refused_at_once() {
    let dir = scratch("site-file-kinds");
    let pipe = dir.join("pipe.toml");
    assert!(std::process::Command::new("mkfifo").arg(&pipe).status().unwrap().success());
    let large = dir.join("large.toml");
    std::fs::write(&large, format!("[rate_limit]\n{}", "# padding\n".repeat(200_000))).unwrap();
    let latin1 = dir.join("latin1.toml");
    std::fs::write(&latin1, b"[rate_limit]\n# caf\xe9\n").unwrap();
    for (file, says) in [
        (Path::new("/dev/zero"), "not a regular file"),
        (pipe.as_path(), "not a regular file"),
        (large.as_path(), "over 1048576 bytes"),
        (latin1.as_path(), "not UTF-8"),
    ] {
        let started = std::time::Instant::now();
        let (ok, text) = check_config(file);
        assert!(!ok && text.contains(says) && text.contains(&file.display().to_string()), "{file:?}: {text}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "{file:?} answered at once");
    }
    let out = limit_store()
        .args(["serve", "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0"])
        .current_dir(&dir)
        .env("LIMIT_STORE_ENVOY_CONFIG", "/dev/zero")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("/dev/zero") && stderr.contains("not a regular file"), "{stderr}");
}

use crate::config::Config;
use crate::limits::Algorithm;

fn refused(text: &str) -> String {
    Config::parse(text).unwrap_err().to_string()
}

#[test]
fn a_limit_of_the_sites_own_is_defined_by_its_table() {
    let config = Config::parse(
        "[rate_limit.limits.uploads]\nparts = [\"user\", \"ip\"]\nbudget = 3\nwindow = \"1m\"\n\n\
         [rate_limit.limits.uploads.ip]\nalgorithm = \"lockout\"\nbudget = 10\nlock = \"1h\"\nnormalize = \"ip\"\n\n\
         [rate_limit.limits.uploads.user.overrides]\n\"big-co\" = { budget = 30, window = \"1h\" }\n",
    )
    .unwrap();
    let limit = config.limits[0].defines.clone().unwrap();
    assert_eq!(limit.part_names(), ["user", "ip"]);
    assert_eq!(limit.parts()[0].algorithm().name(), "fixed-window");
    assert!(matches!(limit.parts()[1].algorithm(), Algorithm::Lockout { lock: 3_600_000, .. }));
    assert_eq!(config.limits[0].parts[0].overrides[0].budget, 30);
}

#[tokio::test]
async fn an_app_in_rust_counts_the_files_limits_as_serve_does() {
    let config = Config::parse(
        "[rate_limit]\nsingle_instance = true\n[rate_limit.limits.search]\nparts = [\"user\"]\nbudget = 1\nwindow = \"1m\"\n\
         [rate_limit.limits.search.user.overrides]\nvip = { budget = 2 }\n[rate_limit.limits.sign-in.ip.overrides]\n\"::ffff:192.0.2.9\" = { budget = 99 }\n",
    )
    .unwrap();
    let limits = config.build_limits().await.unwrap();
    let allowed = |user: &'static str| {
        let limits = limits.clone();
        async move {
            let mut n = 0;
            for _ in 0..4 {
                n += u32::from(limits.attempt("search", &[("user", user)]).await.unwrap().allowed);
            }
            n
        }
    };
    assert_eq!((allowed("ann").await, allowed("vip").await), (1, 2));
    let ip = limits.limit("sign-in").unwrap().part_named("ip").unwrap();
    let (value, algorithm) = ip.overrides().next().unwrap();
    assert_eq!((value, algorithm.budget()), ("::ffff:192.0.2.9", 99));
}

#[test]
fn bad_tables_are_refused_with_their_line_and_key() {
    let e = refused("[rate_limit.limits.uploads]\nbudget = 3\n");
    assert!(e.contains("line 1") && e.contains("needs its parts"), "{e}");
    let e = refused("[rate_limit.limits.uploads]\nparts = [\"user\", \"ip\"]\nbudget = 3\nwindow = \"1m\"\n");
    assert!(e.contains("rate_limit.limits.uploads.ip.budget") && e.contains("no budget"), "{e}");
    let e = refused("[rate_limit.limits.x]\nparts = [\"u\"]\nbudget = 3\nwindow = \"1m\"\nalgorithm = \"leaky\"\n");
    assert!(e.contains("line 5") && e.contains("not an algorithm"), "{e}");
    let e = refused("[rate_limit.limits.x]\nparts = [\"u\"]\nbudget = 3\nwindow = \"1m\"\nlock = \"1m\"\n");
    assert!(e.contains("line 5") && e.contains("lockout"), "{e}");
    let e = refused(
        "[rate_limit.limits.x]\nparts = [\"ip\"]\nbudget = 3\nwindow = \"1m\"\n[rate_limit.limits.x.ip]\nnormalize = \"ip\"\n[rate_limit.limits.x.ip.overrides]\noffice = { budget = 9 }\n",
    );
    assert!(e.contains("line 8") && e.contains("not an IP address"), "{e}");
    let e = refused(
        "[rate_limit.limits.x]\nparts = [\"u\"]\nalgorithm = \"sliding-window\"\nbudget = 3\nwindow = \"1m\"\n[rate_limit.limits.x.u.overrides]\nbig = { budget = 999 }\n",
    );
    assert!(e.contains("line 6") && e.contains("at most 256"), "{e}");
    let e = refused("[rate_limit.limits.sign-in]\nparts = [\"a\"]\n");
    assert!(e.contains("is a preset"), "{e}");
    let e = refused(
        "[rate_limit.limits.x]\nparts = [\"u\"]\nbudget = 300\nwindow = \"1m\"\nalgorithm = \"sliding-window\"\n",
    );
    assert!(e.contains("at most 256"), "{e}");
}

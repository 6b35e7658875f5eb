//! The README's `Limits` example, as written there, compiles and answers.

use limit_store::{Decision, LimitError};

fn too_many_requests(_: Option<std::time::Duration>) -> &'static str {
    "429"
}

#[rustfmt::skip]
async fn sign_in() -> Result<&'static str, LimitError> {
    // From here to the next comment: the README's lines (after its `use`s).
    use std::sync::Arc;
    use limit_store::{Limits, MemoryStore};

    let limits = Limits::builder().store(Arc::new(MemoryStore::new())).single_instance(true).build()?;
    let d = limits.attempt("sign-in", &[("account", "ada@example.com"), ("ip", "192.0.2.7")]).await?;
    if !d.allowed { return Ok(too_many_requests(d.retry_after)); } // 503 instead when d.degraded is set
    // ...the password was right: clear the account's failures
    limits.reset("sign-in", &[("account", "ada@example.com")]).await?;
    // End of the README's lines.
    let _: Decision = d;
    Ok("200")
}

#[tokio::test]
async fn the_readme_example_signs_in() {
    assert_eq!(sign_in().await.unwrap(), "200");
}

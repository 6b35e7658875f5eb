//! The README's five-line example, as written there, compiles and counts.

use std::sync::Arc;

use limit_store::{update_with, Entry, Guarded, MemoryStore, StoreError, Write};

#[tokio::test]
#[rustfmt::skip]
async fn the_five_lines_count_five_then_refuse() -> Result<(), StoreError> {
    let store = Guarded::new(Arc::new(MemoryStore::new()));
    let mut answers = Vec::new();
    for _ in 0..6 {
        // From here to the next comment: the README's lines.
        let allowed = update_with(&store, &["sign-in:account:ada@example.com"], |cur, now| {
            let n = cur[0].as_ref().and_then(|e| e.value.as_u64()).unwrap_or(0);
            let expires_at = cur[0].as_ref().map_or(now + 15 * 60_000, |e| e.expires_at);
            if n >= 5 { (vec![Write::Keep], false) } else { (vec![Write::Put(Entry { value: (n + 1).into(), expires_at })], true) }
        }).await?;
        // End of the README's lines.
        answers.push(allowed);
    }
    assert_eq!(answers, [true, true, true, true, true, false]);
    Ok(())
}

//! A flood of distinct keys can't grow the process past what `max_entries`
//! allows: one family of keys (here, keys without a `:`) stops at its share,
//! 80% of the bound. In a file of its own so that its process measures only
//! itself.

use limit_store::{Entry, LimitStore, MemoryStore, Millis, Write};

fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

#[tokio::test(flavor = "current_thread")]
async fn a_flood_of_long_distinct_keys_stays_within_the_bound() {
    const MAX: u64 = 20_000;
    const FLOOD: usize = 200_000; // 200 MB of keys if they were kept
    let store = MemoryStore::with_max_entries(MAX);
    let before = resident_bytes();
    let mut key = "x".repeat(1_000);
    let mut refused = 0usize;
    for i in 0..FLOOD {
        key.truncate(1_000);
        key.push_str(&i.to_string());
        let mut put =
            |_: &[Option<Entry>], now: Millis| vec![Write::Put(Entry { value: 1.into(), expires_at: now + 600_000 })];
        if store.update(&[key.as_str()], &mut put).await.is_err() {
            refused += 1;
        }
    }
    assert_eq!(store.stats().unwrap().held, MAX - MAX / 5, "one family holds at most 80% of the bound");
    assert_eq!(refused, FLOOD - 16_000);
    if let (Some(before), Some(after)) = (before, resident_bytes()) {
        let grown = after.saturating_sub(before);
        // 20,000 entries with their keys hashed take a few megabytes; with the
        // keys kept in full they would take 20 MB more, and the whole flood 200 MB.
        assert!(grown < 12 << 20, "resident memory grew by {grown} bytes: are long keys kept in full?");
    }
}

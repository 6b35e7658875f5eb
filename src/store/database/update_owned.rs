//! [`update_owned`](crate::LimitStore::update_owned) on the database store.
//!
//! On SQLite, the count's `decide` owns the caller's `apply` (and the room it
//! holds in the bound), so the writer runs it itself inside the transaction
//! instead of sending the rows to the caller and waiting for its answer
//! (`sqlite/ask.rs`): no message between the threads, and no wait for the
//! caller's task to be scheduled while the write lock is held. It decides
//! only while the caller still waits: a caller that stopped waiting gets
//! nothing written, as on the asking path. On PostgreSQL and MariaDB, whose
//! counts run in the caller's task anyway, it is the usual `update`.

use std::ops::Deref;
#[cfg(feature = "sqlite")]
use std::sync::Arc;

#[cfg(feature = "sqlite")]
use parking_lot::Mutex;

use super::{DatabaseStore, Shared};
use crate::bound::{Bound, FamilyTags};
use crate::{LimitStore, OwnedApply, StoreError};

/// The bound of a store's shared part, held by an update's owned `decide`.
#[derive(Debug)]
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
struct Counts(std::sync::Arc<Shared>);

impl Deref for Counts {
    type Target = Bound;

    fn deref(&self) -> &Bound {
        self.0.bound.counts()
    }
}

/// The family tags of a store's shared part, held by an update's owned `decide`.
#[derive(Debug)]
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
struct Tags(std::sync::Arc<Shared>);

impl Deref for Tags {
    type Target = FamilyTags;

    fn deref(&self) -> &FamilyTags {
        &self.0.families
    }
}

impl DatabaseStore {
    /// [`update_owned`](crate::LimitStore::update_owned): see the module.
    // With only the `sqlite` feature, every store is SQLite.
    #[allow(irrefutable_let_patterns)]
    pub(super) async fn update_owned_here(&self, keys: &[&str], mut apply: Box<OwnedApply>) -> Result<(), StoreError> {
        #[cfg(feature = "sqlite")]
        if let super::Db::Sqlite(lite) = &self.shared.db {
            return self.owned_on_sqlite(lite, keys, apply).await;
        }
        self.update(keys, &mut *apply).await
    }

    /// The update, with its `decide` run by SQLite's writer.
    #[cfg(feature = "sqlite")]
    async fn owned_on_sqlite(
        &self,
        lite: &super::sqlite::Sqlite,
        keys: &[&str],
        mut apply: Box<OwnedApply>,
    ) -> Result<(), StoreError> {
        use super::attempt::Locked;
        use super::row::{decide, Stored};
        use crate::bound::FamilyAdmission;

        let hashes = self.hashes(keys)?;
        let families = self.families(keys);
        let shared = &self.shared;
        let generation = shared.secret.generation();
        // The room this attempt's writes hold, set by `decide` on the writer.
        let held: Arc<Mutex<Option<FamilyAdmission<Counts, Tags>>>> = Arc::new(Mutex::new(None));
        let owned = {
            let (held, shared, hashes, families) = (held.clone(), shared.clone(), hashes.clone(), families.clone());
            move |rows: &[Option<Stored>], now| {
                let mut held = held.lock();
                let admission =
                    held.get_or_insert_with(|| FamilyAdmission::new(Counts(shared.clone()), Tags(shared.clone())));
                decide(rows, &hashes, &families, now, generation, &mut *apply, admission)
            }
        };
        let owned: super::row::OwnedDecide = Arc::new(Mutex::new(owned));
        for attempt in 0.. {
            let mut locked = Locked::new(&shared.tally);
            let outcome = super::bounded(async {
                loop {
                    if let Some(done) = locked.settle(lite.locked_owned(&hashes, generation, owned.clone()).await) {
                        return done;
                    }
                }
            })
            .await;
            // Written: the new entries stay counted and the removed ones go
            // back; failed: the room goes back.
            let admission = held.lock().take();
            let short = admission.as_ref().and_then(|a| a.short());
            match admission {
                Some(admission) if outcome.is_ok() => admission.commit(),
                other => drop(other),
            }
            if let Some(done) = self.answer(outcome, attempt, short).await {
                return done;
            }
        }
        unreachable!("the loop returns")
    }
}

//! The contract suite is only worth what it catches: each store here breaks one
//! rule on purpose, and the suite must fail it. The same store without a defect
//! passes every case, so each failure is the defect's doing.

use limit_store::testing::contract;

use super::broken_store::{Defect, Naive};

/// Runs the case named `name` on a fresh pair with `defect`; true if it failed
/// (a violation, or a panic that broke the case).
async fn fails(defect: Defect, name: &str) -> bool {
    let case = contract().into_iter().find(|c| c.name() == name).unwrap_or_else(|| panic!("no case {name}"));
    let run = tokio::spawn(async move { case.run(Naive::pair(defect)).await });
    match run.await {
        Ok(Ok(())) => false,
        Ok(Err(violation)) => {
            eprintln!("{defect:?}: {violation}");
            true
        }
        Err(panic) => {
            eprintln!("{defect:?}: case {name} panicked: {panic}");
            true
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_store_without_a_defect_passes_every_case() {
    for case in contract() {
        assert!(!fails(Defect::None, case.name()).await, "the correct store fails {}", case.name());
    }
}

/// How many runs a case gets to catch a defect. The history cases pick their
/// calls at random, so a defect that needs two calls to meet (a retag slipping
/// between another call's read and its write) can go unseen in one run on a
/// loaded host; the other cases catch their defect in the first run.
const RUNS_TO_CATCH: usize = 3;

/// True if the case named `name` fails a store with `defect` in one of
/// [`RUNS_TO_CATCH`] runs.
async fn caught_within_runs(defect: Defect, name: &str) -> bool {
    for _ in 0..RUNS_TO_CATCH {
        if fails(defect, name).await {
            return true;
        }
    }
    false
}

macro_rules! caught {
    ($($test:ident: $defect:ident by $case:ident;)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $test() {
                assert!(
                    caught_within_runs(Defect::$defect, stringify!($case)).await,
                    "the suite's case {} passed a store with the defect {:?} in {} runs",
                    stringify!($case),
                    Defect::$defect,
                    RUNS_TO_CATCH
                );
            }
        )*
    };
}

caught! {
    lost_update: LostUpdate by concurrent_counts_from_both_handles_are_exact;
    racy_first_update: RacyFirstUpdate by first_update_of_a_key_is_never_lost;
    torn_multi_key_update: TornMultiKey by multi_key_updates_are_never_seen_torn;
    torn_multi_key_update_loses_counts: TornMultiKey by overlapping_multi_key_updates_are_exact;
    ignored_expiry: IgnoresExpiry by entry_expires_on_the_store_clock;
    oversized_values: AcceptsOversizedValues by oversized_value_is_refused;
    too_many_keys: AcceptsTooManyKeys by too_many_keys_are_refused;
    duplicate_keys: AcceptsDuplicateKeys by duplicate_keys_are_refused;
    long_keys: AcceptsLongKeys by empty_and_long_keys_are_refused;
    over_strict_keys: RefusesLongAllowedKeys by limits_of_the_contract_are_accepted;
    partial_write_on_bad_answer: PartialWriteOnBadAnswer by wrong_number_of_writes_is_refused;
    sweep_removing_live_entries: SweepRemovesLive by sweep_removes_expired_and_keeps_live;
    sweep_counting_nothing: SweepCountsNothing by sweep_removes_expired_and_keeps_live;
    sweep_deleting_nothing: SweepDeletesNothing by sweep_removes_expired_and_keeps_live;
    values_compared_folded: ComparesFolded by values_differing_only_by_case_or_accent_are_not_confused;
    handles_not_sharing: HandlesDontShare by written_entry_is_seen_by_both_handles;
    handles_not_sharing_counts: HandlesDontShare by each_update_sees_the_last_write_of_either_handle;
    reads_out_of_order: ReadsOutOfOrder by read_answers_in_key_order;
    second_clock_ahead: SecondClockAhead by handles_agree_on_the_clock;
    second_clock_behind: SecondClockBehind by handles_agree_on_the_clock;
    poisoned_by_panic: PoisonedByPanic by panicking_apply_writes_nothing_and_store_keeps_working;
    keep_deleting: KeepDeletes by keep_leaves_the_entry_as_it_was;
    delete_ignored: DeleteIgnored by delete_removes_the_entry;
    lossy_numbers: LossyNumbers by values_round_trip_exactly;
    lost_update_history: LostUpdate by single_key_histories_are_linearizable;
    lost_update_multi_key_history: LostUpdate by multi_key_histories_are_linearizable;
    racy_first_update_history: RacyFirstUpdate by single_key_histories_are_linearizable;
    racy_first_update_multi_key_history: RacyFirstUpdate by multi_key_histories_are_linearizable;
    torn_multi_key_history: TornMultiKey by multi_key_histories_are_linearizable;
    values_compared_folded_history: ComparesFolded by single_key_histories_are_linearizable;
    values_compared_folded_multi_key_history: ComparesFolded by multi_key_histories_are_linearizable;
    handles_not_sharing_history: HandlesDontShare by single_key_histories_are_linearizable;
    handles_not_sharing_multi_key_history: HandlesDontShare by multi_key_histories_are_linearizable;
    racy_integers: RacyIntegers by integer_counts_from_both_handles_are_exact;
    integers_kept_as_tat: IntegersKeptAsTat by integer_counts_from_both_handles_are_exact;
}

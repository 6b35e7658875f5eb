//! The cases, one async function each, grouped by the rule they prove.
//! `__contract_cases!` is the one list of them: `contract()` and
//! `contract_tests!` are both built from it.

mod concurrent;
mod entries;
mod exact_values;
mod expiry;
mod integer;
mod linearizable;
mod refused;

pub use concurrent::*;
pub use entries::*;
pub use exact_values::*;
pub use expiry::*;
pub use integer::*;
pub use linearizable::*;
pub use refused::*;

/// Calls `$callback!{ (args) case case ... }` with every case's name.
#[doc(hidden)]
#[macro_export]
macro_rules! __contract_cases {
    ($callback:ident ! ( $($args:tt)* )) => {
        $crate::$callback! { ( $($args)* )
            written_entry_is_seen_by_both_handles
            absent_key_is_none
            read_answers_in_key_order
            values_round_trip_exactly
            values_differing_only_by_case_or_accent_are_not_confused
            keep_leaves_the_entry_as_it_was
            delete_removes_the_entry
            each_update_sees_the_last_write_of_either_handle
            put_of_an_expired_entry_is_a_delete
            entry_expires_on_the_store_clock
            handles_agree_on_the_clock
            sweep_removes_expired_and_keeps_live
            limits_of_the_contract_are_accepted
            no_keys_are_refused
            too_many_keys_are_refused
            duplicate_keys_are_refused
            empty_and_long_keys_are_refused
            oversized_value_is_refused
            wrong_number_of_writes_is_refused
            panicking_apply_writes_nothing_and_store_keeps_working
            concurrent_counts_from_both_handles_are_exact
            first_update_of_a_key_is_never_lost
            multi_key_updates_are_never_seen_torn
            overlapping_multi_key_updates_are_exact
            single_key_histories_are_linearizable
            multi_key_histories_are_linearizable
            integer_counts_from_both_handles_are_exact
        }
    };
}

//! `limit-store contract memory`, the real binary: every case passes, and
//! the one case whose `apply` panics on purpose prints no panic (it unwinds
//! past the panic hook), so the report is the cases' lines alone.

use crate::common::serve::limit_store;

#[test]
fn the_contract_command_passes_on_memory_and_prints_no_deliberate_panic() {
    let out = limit_store().args(["contract", "memory"]).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("panicking_apply_writes_nothing_and_store_keeps_working"), "{stdout}");
    assert!(!stdout.contains("FAILED"), "{stdout}");
    assert!(!stderr.contains("panicked") && !stderr.contains("on purpose"), "{stderr}");
}

//! Stopping and starting the shared PostgreSQL and MariaDB servers, for the
//! tests of a real outage; each stop comes with a guard that starts the
//! server again when dropped, even when the test fails.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn succeeds(command: &mut Command) -> bool {
    command.stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// Runs `pg_ctlcluster <version> main <action> <extra>` on the machine's one
/// cluster; true if it succeeded.
pub fn postgres(action: &str, extra: &[&str]) -> bool {
    let version = std::fs::read_dir("/etc/postgresql")
        .ok()
        .and_then(|mut d| d.next())
        .and_then(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned());
    let Some(version) = version else { return false };
    succeeds(Command::new("pg_ctlcluster").args(["--skip-systemctl-redirect", &version, "main", action]).args(extra))
}

/// Waits (up to 10 s) until PostgreSQL accepts connections.
pub fn wait_for_postgres() {
    wait_until(|| succeeds(Command::new("pg_isready").args(["-h", "127.0.0.1", "-q"])));
}

/// Stops PostgreSQL (`pg_ctlcluster stop -m fast`), failing the test if it
/// can't; the guard returned starts it again when dropped.
#[must_use = "the server starts again when the guard is dropped"]
pub fn stop_postgres() -> RestartsPostgres {
    let restarts = RestartsPostgres;
    assert!(postgres("stop", &["-m", "fast"]), "pg_ctlcluster stop");
    restarts
}

/// Starts PostgreSQL again when dropped, and waits until it answers.
pub struct RestartsPostgres;

impl Drop for RestartsPostgres {
    fn drop(&mut self) {
        postgres("start", &[]);
        wait_for_postgres();
    }
}

fn mariadb_answers() -> bool {
    succeeds(Command::new("mysqladmin").args(["-h", "127.0.0.1", "-u", "root", "ping"]))
}

/// Shuts MariaDB down (`mysqladmin shutdown`) and waits until it no longer
/// answers, failing the test if it can't; the guard returned starts it again
/// when dropped.
#[must_use = "the server starts again when the guard is dropped"]
pub fn stop_mariadb() -> RestartsMariadb {
    let restarts = RestartsMariadb;
    let down = succeeds(Command::new("mysqladmin").args(["-h", "127.0.0.1", "-u", "root", "shutdown"]))
        && wait_until(|| !mariadb_answers());
    assert!(down, "mysqladmin shutdown");
    restarts
}

/// Starts MariaDB as `.ci/run` does, and waits until it answers.
fn start_mariadb() -> bool {
    succeeds(Command::new("start-stop-daemon").args([
        "--start",
        "--oknodo",
        "--background",
        "--exec",
        "/usr/sbin/mariadbd",
    ]));
    wait_until(mariadb_answers)
}

/// Starts MariaDB again when dropped, and waits until it answers.
pub struct RestartsMariadb;

impl Drop for RestartsMariadb {
    fn drop(&mut self) {
        // The old server may still be on its way out when the first start is
        // tried (then it does nothing): try again.
        let started = (0..3).any(|_| start_mariadb());
        if !started && !std::thread::panicking() {
            panic!("mariadbd did not start again");
        }
    }
}

/// Polls `done` for up to 10 s; true if it came true.
fn wait_until(done: impl Fn() -> bool) -> bool {
    let began = Instant::now();
    while began.elapsed() < Duration::from_secs(10) {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

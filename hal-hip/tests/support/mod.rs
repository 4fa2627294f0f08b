//! Shared by hal-hip's integration tests: the test double, built once per test binary, and a
//! runner that executes one test's body in a child process with the double configured by
//! environment variables (the HIP library is loaded once per process, and the double reads its
//! configuration and failure injection from the environment).
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub use vitamin_hal_hip::test_double::Variant;

const CHILD_ENV: &str = "HAL_HIP_TEST_CHILD";

/// The built double of the variant `FAKE_HIP_VARIANT` names (the base one by default), or `None`
/// after printing `SKIPPED: <why>`.
pub fn fake_lib() -> Option<PathBuf> {
    fake_lib_of(Variant::from_env())
}

/// The built double of `variant`, or `None` after printing `SKIPPED: <why>`.
pub fn fake_lib_of(variant: Variant) -> Option<PathBuf> {
    static LIBS: [OnceLock<Result<PathBuf, String>>; 2] = [OnceLock::new(), OnceLock::new()];
    let r = LIBS[variant as usize].get_or_init(|| {
        let exe = std::env::current_exe().expect("test binary path");
        let name = exe.file_name().expect("file name").to_string_lossy().into_owned();
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("hipfake-{name}-{}", variant.name()));
        vitamin_hal_hip::test_double::build_variant(&dir, variant)
    });
    match r {
        Ok(p) => Some(p.clone()),
        Err(why) => {
            eprintln!("SKIPPED: the HIP test double cannot be built here ({why})");
            None
        }
    }
}

/// Whether this process is the child running case `case` of test `name`.
pub fn is_child(name: &str, case: &str) -> bool {
    std::env::var(CHILD_ENV).as_deref() == Ok(format!("{name}#{case}").as_str())
}

/// The double's log file of this child run.
pub fn log_path() -> PathBuf {
    PathBuf::from(std::env::var("FAKE_HIP_LOG").expect("FAKE_HIP_LOG is set for children"))
}

/// The double's log so far.
pub fn log() -> String {
    std::fs::read_to_string(log_path()).unwrap_or_default()
}

/// A configuration file holding `toml` (written under the target's temporary directory, named
/// after `name`), for a child's `VITAMIN_CONFIG`: the backend's settings are file keys.
pub fn config_file(name: &str, toml: &str) -> String {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("config-{name}.toml"));
    std::fs::write(&path, toml).expect("write the test configuration");
    path.to_string_lossy().into_owned()
}

/// The path of the double of `variant`, for a child's `VITAMIN_HIP_LIBRARY` (`None`: skipped).
pub fn lib_of(variant: Variant) -> Option<String> {
    fake_lib_of(variant).map(|p| p.to_string_lossy().into_owned())
}

/// Runs test `name`'s `body` in a child process of this test binary with the double as the HIP
/// runtime (`VITAMIN_HIP_LIBRARY`), its log in a fresh file (`FAKE_HIP_LOG`), no configuration
/// file (`VITAMIN_CONFIG=none`) and `env` (which may override all three). The parent fails if the child fails, does not finish within 60 s, or did not
/// run the body.
pub fn in_child(name: &str, env: &[(&str, &str)], body: impl FnOnce()) {
    in_child_case(name, "", env, body);
}

/// [`in_child`] for one of several cases (each its own child) of test `name`.
pub fn in_child_case(name: &str, case: &str, env: &[(&str, &str)], body: impl FnOnce()) {
    if is_child(name, case) {
        body();
        println!("CHILD-DONE {name}#{case}");
        return;
    }
    if std::env::var_os(CHILD_ENV).is_some() {
        return; // the child of another case of this test
    }
    let Some(lib) = fake_lib() else { return };
    let log = lib.with_file_name(format!("{name}{case}.log"));
    let _ = std::fs::remove_file(&log);
    let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
    for (k, _) in std::env::vars() {
        if k.starts_with("VITAMIN_") || k.starts_with("FAKE_HIP") {
            cmd.env_remove(k);
        }
    }
    cmd.args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{name}#{case}"))
        .env(vitamin_hal_hip::driver::LIBRARY_ENV, &lib)
        .env("VITAMIN_CONFIG", "none")
        .env("FAKE_HIP_LOG", &log)
        .env(vitamin_hal_hip::test_double::VARIANT_ENV, Variant::from_env().name());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn the test child");
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!("{name}: the child did not finish within 60 s\n{}", String::from_utf8_lossy(&out.stdout));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{name} failed in its child:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("CHILD-DONE {name}#{case}")),
        "{name}: the child ran no test body:\n{stdout}\n{stderr}"
    );
}

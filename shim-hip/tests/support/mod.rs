//! Shared by shim-hip's integration tests: the HIP test double and the test application built
//! once per test binary, the interposer cargo built, and runs of the application (natively or
//! preloaded) under a watchdog, with the double's execution log.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long one run of the application may take before the test fails (no call may hang).
pub const WATCHDOG: Duration = Duration::from_secs(60);

/// The double and the application, built into one folder.
pub struct Built {
    /// The folder (logs and censuses of the runs go here too).
    pub dir: PathBuf,
    /// The double (`libamdhip64.so.5`).
    pub lib: PathBuf,
    /// The application, linked against the double (rpath to its folder).
    pub app: PathBuf,
}

/// The double and the application, or `None` after printing `SKIPPED: <why>` (no HIP headers
/// or no C compiler here).
pub fn built() -> Option<&'static Built> {
    static BUILT: OnceLock<Result<Built, String>> = OnceLock::new();
    let r = BUILT.get_or_init(|| {
        let exe = std::env::current_exe().expect("test binary path");
        let name = exe.file_name().expect("file name").to_string_lossy().into_owned();
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("shimhip-{name}"));
        let lib = vitamin_hal_hip::test_double::build(&dir)?;
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake/app.c");
        let app = dir.join("app");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let out = Command::new(&cc)
            .args(["-O1", "-Wall", "-Werror", "-pthread", "-o"])
            .arg(&app)
            .arg(&src)
            .arg(format!("-I{}", vitamin_hal_hip::test_double::include_dir().display()))
            .arg(format!("-L{}", dir.display()))
            .arg("-l:libamdhip64.so.5")
            .arg(format!("-Wl,-rpath,{}", dir.display()))
            .output()
            .map_err(|e| format!("cannot run {cc}: {e}"))?;
        if !out.status.success() {
            return Err(format!("{cc} failed on tests/fake/app.c:\n{}", String::from_utf8_lossy(&out.stderr)));
        }
        Ok(Built { dir, lib, app })
    });
    match r {
        Ok(b) => Some(b),
        Err(why) => {
            eprintln!("SKIPPED: the HIP test double or application cannot be built here ({why})");
            None
        }
    }
}

/// The interposer cargo built next to this test's dependencies, building it if it is missing.
pub fn shim_path() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps dir");
    let candidates = [deps.join("libvitamin_hip.so"), deps.parent().unwrap().join("libvitamin_hip.so")];
    if let Some(p) = candidates.iter().find(|p| p.exists()) {
        return p.clone();
    }
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "-p", "vitamin-shim-hip"])
        .status()
        .expect("run cargo build");
    assert!(status.success(), "cargo build -p vitamin-shim-hip failed");
    candidates.into_iter().find(|p| p.exists()).expect("libvitamin_hip.so after cargo build")
}

/// One run of the application.
#[derive(Debug)]
pub struct Run {
    /// Its one result line.
    pub line: String,
    /// The double's execution log.
    pub log: String,
    /// The census, if one was asked for and written.
    pub census: Option<serde_json::Value>,
    /// Its stderr.
    pub stderr: String,
}

/// Runs the application with `args`, preloading the interposer when `preload`, with `env` (on
/// top of a clean `VITAMIN_*` / `FAKE_HIP_*` environment, the double's log in a fresh file
/// `<tag>.log` and the census in `<tag>.census.json`). Fails the test if the run fails or does
/// not finish within [`WATCHDOG`].
pub fn run(b: &Built, tag: &str, preload: bool, args: &[&str], env: &[(&str, &str)]) -> Run {
    run_program(b, &b.app, tag, preload, args, env)
}

/// Another C application of `tests/fake` (`name`.c), built once into the double's folder and
/// linked against it as the main one is; `None` after printing `SKIPPED: <why>`.
pub fn built_program(b: &Built, name: &str) -> Option<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fake/{name}.c"));
    let exe = b.dir.join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-O1", "-Wall", "-Werror", "-pthread", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg(format!("-I{}", vitamin_hal_hip::test_double::include_dir().display()))
        .arg(format!("-L{}", b.dir.display()))
        .arg("-l:libamdhip64.so.5")
        .arg(format!("-Wl,-rpath,{}", b.dir.display()))
        .arg("-ldl")
        .output();
    match out {
        Ok(o) if o.status.success() => Some(exe),
        Ok(o) => panic!("{cc} failed on {}:\n{}", src.display(), String::from_utf8_lossy(&o.stderr)),
        Err(e) => {
            eprintln!("SKIPPED: cannot run {cc}: {e}");
            None
        }
    }
}

/// [`run`] of another program of the same folder.
pub fn run_program(b: &Built, exe: &Path, tag: &str, preload: bool, args: &[&str], env: &[(&str, &str)]) -> Run {
    let log = b.dir.join(format!("{tag}.log"));
    let census = b.dir.join(format!("{tag}.census.json"));
    let _ = std::fs::remove_file(&log);
    let _ = std::fs::remove_file(&census);
    let mut cmd = Command::new(exe);
    for (k, _) in std::env::vars() {
        if k.starts_with("VITAMIN_") || k.starts_with("FAKE_HIP") || k == "LD_PRELOAD" {
            cmd.env_remove(k);
        }
    }
    cmd.args(args).env("FAKE_HIP_LOG", &log).env("VITAMIN_CENSUS", &census);
    if preload {
        cmd.env("LD_PRELOAD", shim_path());
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn the application");
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > WATCHDOG {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!("{tag}: the application hung (over {WATCHDOG:?})\n{}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{tag}: the application failed ({:?}):\n{stdout}\n{stderr}", out.status);
    let line =
        stdout.lines().find(|l| l.contains("results=")).unwrap_or_else(|| panic!("{tag}: no result line:\n{stdout}"));
    Run {
        line: line.trim().to_owned(),
        log: std::fs::read_to_string(&log).unwrap_or_default(),
        census: std::fs::read(&census).ok().map(|c| serde_json::from_slice(&c).expect("census JSON")),
        stderr,
    }
}

/// One executed operation of the double's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exec {
    /// Its line in the log (the log has one global order).
    pub begin: usize,
    /// The line of its end.
    pub end: usize,
    /// The stream it ran on (`s<N>`).
    pub stream: String,
    /// That stream's CU count.
    pub cus: u32,
    /// What it was (`kernel reduce_partial grid=.. block=..`, `copy 4`, `callback`, ...).
    pub what: String,
}

impl Exec {
    /// The kernel's name, if it was a kernel.
    pub fn kernel(&self) -> Option<&str> {
        self.what.strip_prefix("kernel ").and_then(|k| k.split_whitespace().next())
    }
}

/// The operations of a log, in the order they began.
pub fn execs(log: &str) -> Vec<Exec> {
    let mut open: std::collections::HashMap<String, Exec> = Default::default();
    let mut done = Vec::new();
    for (i, line) in log.lines().enumerate() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["exec", "begin", seq, stream, cus, _mask, what @ ..] => {
                let cus = cus.trim_start_matches("cus=").parse().expect("cus=N");
                let e = Exec { begin: i, end: usize::MAX, stream: stream.to_string(), cus, what: what.join(" ") };
                open.insert(seq.to_string(), e);
            }
            ["exec", "end", seq, ..] => {
                let mut e = open.remove(*seq).unwrap_or_else(|| panic!("end without begin: {line}"));
                e.end = i;
                done.push(e);
            }
            _ => {}
        }
    }
    assert!(open.is_empty(), "operations that never ended: {open:?}");
    done.sort_by_key(|e| e.begin);
    done
}

/// The streams the double created with a CU mask (`call stream-create sN cus=.. mask=..` without
/// "(unmasked)"): the pool's lanes.
pub fn masked_streams(log: &str) -> std::collections::HashSet<String> {
    log.lines()
        .filter(|l| l.starts_with("call stream-create ") && !l.contains("(unmasked)"))
        .filter_map(|l| l.split_whitespace().nth(2).map(str::to_owned))
        .collect()
}

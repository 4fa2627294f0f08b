//! `hipGetProcAddress` (ROCm 6.2) under the interposer, on a minimal stand-in runtime
//! (tests/fake/procaddr_rt.c; the HIP 5.2 test double has no such entry point): a hooked symbol
//! fetched this way is answered with the interposer's hook (calls through it are counted; a
//! per-thread lookup answered with the `_spt` variant gets the `_spt` hook), an
//! unhooked one and an unknown one are passed through, and natively the runtime's own functions
//! are returned.

mod support;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

/// Builds the stand-in runtime and the application, or `None` after printing `SKIPPED`.
fn build() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("shimhip-procaddr");
    std::fs::create_dir_all(&dir).unwrap();
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fake");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let steps: [Vec<String>; 2] = [
        vec![
            "-shared".into(),
            "-fPIC".into(),
            "-Wall".into(),
            "-Werror".into(),
            "-o".into(),
            dir.join("libprocaddr_rt.so").display().to_string(),
            src.join("procaddr_rt.c").display().to_string(),
        ],
        vec![
            "-Wall".into(),
            "-Werror".into(),
            "-o".into(),
            dir.join("procaddr").display().to_string(),
            src.join("procaddr_app.c").display().to_string(),
            format!("-L{}", dir.display()),
            "-lprocaddr_rt".into(),
            format!("-Wl,-rpath,{}", dir.display()),
            "-ldl".into(),
        ],
    ];
    for args in steps {
        match Command::new(&cc).args(&args).output() {
            Ok(o) if o.status.success() => {}
            Ok(o) => panic!("{cc} {args:?} failed:\n{}", String::from_utf8_lossy(&o.stderr)),
            Err(e) => {
                eprintln!("SKIPPED: cannot run {cc} ({e}); install gcc or set CC");
                return None;
            }
        }
    }
    Some(dir)
}

/// The application's result line and census (`None` natively), under the watchdog.
fn run(dir: &std::path::Path, preload: bool) -> (String, Option<serde_json::Value>) {
    let census = dir.join(format!("census-{preload}.json"));
    let _ = std::fs::remove_file(&census);
    let mut cmd = Command::new(dir.join("procaddr"));
    for (k, _) in std::env::vars() {
        if k.starts_with("VITAMIN_") || k == "LD_PRELOAD" {
            cmd.env_remove(k);
        }
    }
    if preload {
        cmd.env("LD_PRELOAD", support::shim_path()).env("VITAMIN_MODE", "observe").env("VITAMIN_CENSUS", &census);
    }
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn procaddr");
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > support::WATCHDOG {
            let _ = child.kill();
            panic!("procaddr hung (over {:?})", support::WATCHDOG);
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let out = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "procaddr failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let line = stdout.lines().find(|l| l.starts_with("results=")).unwrap_or_else(|| panic!("no result:\n{stdout}"));
    let census = std::fs::read(&census).ok().map(|c| serde_json::from_slice(&c).expect("census JSON"));
    (line.to_owned(), census)
}

#[test]
fn get_proc_address_answers_hooked_symbols_with_the_hooks() {
    let Some(dir) = build() else { return };
    let (native, _) = run(&dir, false);
    assert!(
        native
            .contains("create=runtime(not interposed) count=runtime(not interposed) query_spt=runtime(not interposed)"),
        "{native}"
    );
    let (line, census) = run(&dir, true);
    // hipStreamCreate: the hook; hipGetDeviceCount (not hooked): the runtime's; an unknown name:
    // the runtime's error (1) and no pointer. Calls through both pointers work.
    assert!(line.contains("create=interposer count=runtime(not interposed)"), "{line}");
    // hipStreamQuery looked up per-thread: the runtime answers its _spt variant, and the
    // interposer's hipStreamQuery_spt hook replaces it.
    assert!(line.contains("query_spt=interposer spt_codes=0,0"), "{line}");
    assert!(line.contains("codes=0,0,1,0,0 status=0 stream=0x5eed devices=1 none=(nil)"), "{line}");
    let census = census.expect("census written");
    assert_eq!(census["api"]["hipStreamCreate"]["calls"], 1, "the fetched hook counted the call: {census}");
    assert_eq!(census["api"]["hipStreamQuery_spt"]["calls"], 1, "{census}");
    assert_eq!(census["interposition"]["proc_substituted"], 2, "{census}");
    assert_eq!(census["interposition"]["proc_passed"], 1, "{census}");
}

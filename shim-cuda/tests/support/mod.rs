//! Shared by the integration tests: the C compiler and the shim library cargo built.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

/// The C compiler (`CC`, else `cc`).
pub fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".to_string())
}

/// Runs the C compiler; fails the test with its output if it fails.
pub fn compile(args: &[&str]) {
    let out = Command::new(cc()).args(args).output().unwrap_or_else(|e| {
        panic!("cannot run the C compiler `{}` ({e}); install gcc (CI's .ci/run does) or set CC", cc())
    });
    assert!(out.status.success(), "cc {args:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
}

/// Builds the fake driver (tests/fake/libcuda.c) into `dir` as libcuda.so.1 (+ libcuda.so).
pub fn build_fake_driver(dir: &std::path::Path) {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake/libcuda.c");
    let lib = dir.join("libcuda.so.1");
    // -Bsymbolic: like the real driver, the fake's own references to its functions (the
    // pointers its cuGetProcAddress hands out) bind inside it, not to the preloaded shim.
    compile(&[
        "-shared",
        "-fPIC",
        "-pthread",
        "-O1",
        "-Wl,-Bsymbolic",
        "-Wl,-soname,libcuda.so.1",
        "-o",
        lib.to_str().unwrap(),
        src.to_str().unwrap(),
    ]);
    let _ = std::fs::remove_file(dir.join("libcuda.so"));
    std::os::unix::fs::symlink("libcuda.so.1", dir.join("libcuda.so")).unwrap();
}

/// A fake-driver test program built once per test binary: the fake driver and the program
/// `tests/fake/<name>.c`, linked against it, in a fresh folder of the target's tmp dir.
pub struct FakeApp {
    /// Where the fake driver, the program and the runs' logs live.
    pub dir: PathBuf,
    /// The program.
    pub app: PathBuf,
}

impl FakeApp {
    /// Builds `tests/fake/<name>.c` and the fake driver into `<tmp>/<folder>` (and makes sure the
    /// shim is built before the first run).
    pub fn build(folder: &str, name: &str) -> FakeApp {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(folder);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        build_fake_driver(&dir);
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fake/{name}.c"));
        let app = dir.join(name);
        let lib = format!("-L{}", dir.display());
        compile(&["-O1", "-o", app.to_str().unwrap(), src.to_str().unwrap(), &lib, "-lcuda"]);
        shim_path();
        FakeApp { dir, app }
    }
}

/// The cdylib cargo built next to this test's dependencies, building it if it is missing.
pub fn shim_path() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps dir");
    let candidates = [deps.join("libvitamin_cuda.so"), deps.parent().unwrap().join("libvitamin_cuda.so")];
    if let Some(p) = candidates.iter().find(|p| p.exists()) {
        return p.clone();
    }
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "-p", "vitamin-shim-cuda"])
        .status()
        .expect("run cargo build");
    assert!(status.success(), "cargo build -p vitamin-shim-cuda failed");
    candidates.into_iter().find(|p| p.exists()).expect("libvitamin_cuda.so after cargo build")
}

/// One run of a program against the asynchronous fake driver: its output, the fake driver's call
/// log (`FAKE_CUDA_LOG`) and execution log (`FAKE_CUDA_EXEC_LOG`), and the census if one was written.
pub struct AppRun {
    /// Exit status and captured stdout/stderr.
    pub out: std::process::Output,
    /// The call log.
    pub calls: String,
    /// The execution log.
    pub exec: String,
    /// The census (bind-mode runs).
    pub census: Option<serde_json::Value>,
    /// The variables the run set besides the harness's own (the bind-mode ones and `extra_env`).
    pub env: Vec<(String, String)>,
}

impl AppRun {
    /// The program's stdout.
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.stdout).into_owned()
    }
}

/// Runs `app` (built in `dir`, next to the fake driver) with the fake driver in its asynchronous
/// mode (2 ms per kernel); `bind` adds the shim in bind mode with these extra variables. Other
/// `VITAMIN_*`, `FAKE_CUDA*` and `LD_PRELOAD` variables of the test's environment are removed.
/// Fails the test if the program does not finish within a minute.
pub fn run_async_app(
    app: &std::path::Path,
    dir: &std::path::Path,
    name: &str,
    bind: Option<&[(&str, &str)]>,
    extra_env: &[(&str, &str)],
) -> AppRun {
    use std::time::{Duration, Instant};
    let calls = dir.join(format!("{name}.calls"));
    let exec = dir.join(format!("{name}.exec"));
    let census = dir.join(format!("{name}.census.json"));
    for p in [&calls, &exec, &census] {
        let _ = std::fs::remove_file(p);
    }
    let mut cmd = Command::new(app);
    for (k, _) in std::env::vars() {
        if k.starts_with("VITAMIN_") || k.starts_with("FAKE_CUDA") || k == "LD_PRELOAD" {
            cmd.env_remove(k);
        }
    }
    cmd.env("LD_LIBRARY_PATH", dir)
        .env("FAKE_CUDA_LOG", &calls)
        .env("FAKE_CUDA_EXEC_LOG", &exec)
        .env("FAKE_CUDA_DELAY_US", "2000");
    // No configuration file of the machine's applies; knobs the environment cannot set go to a
    // file of this run's own.
    cmd.env("VITAMIN_CONFIG", "none");
    let (mut top, mut advanced) = (String::new(), String::new());
    let mut set = |cmd: &mut Command, k: &str, v: &str| match file_only_key(k) {
        Some(key) if key.section == vitamin_runtime::config::Section::User => {
            top.push_str(&format!("{} = {v:?}\n", key.name))
        }
        Some(key) => advanced.push_str(&format!("{} = {v:?}\n", key.name)),
        None => {
            cmd.env(k, v);
        }
    };
    if let Some(vars) = bind {
        cmd.env("LD_PRELOAD", shim_path()).env("VITAMIN_MODE", "bind").env("VITAMIN_CENSUS", &census);
        for (k, v) in vars {
            set(&mut cmd, k, v);
        }
    }
    for (k, v) in extra_env {
        set(&mut cmd, k, v);
    }
    if !advanced.is_empty() || !top.is_empty() {
        let file = dir.join(format!("{name}.config.toml"));
        std::fs::write(&file, format!("{top}[advanced]\n{advanced}")).expect("write the run's configuration file");
        cmd.env("VITAMIN_CONFIG", &file);
    }
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {}: {e}", app.display()));
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            let threads = thread_report(child.id());
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{name}: {} did not finish within 60 s (hang?)\n{}\n--- stderr ---\n{}\n--- its threads ---\n{threads}",
                app.display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default();
    let census = std::fs::read_to_string(&census).ok().map(|t| serde_json::from_str(&t).expect("census JSON"));
    let env = bind.unwrap_or(&[]).iter().chain(extra_env).map(|(k, v)| (k.to_string(), v.to_string())).collect();
    AppRun { out, calls: read(&calls), exec: read(&exec), census, env }
}

/// What each thread of a process that seems to hang is doing, for the failure message: name,
/// scheduler state and kernel wait channel from /proc, then the stacks from `gdb` where it is
/// installed (a hang seen only in CI is diagnosed from its log).
pub fn thread_report(pid: u32) -> String {
    let mut report = String::new();
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).map(|d| d.flatten().collect::<Vec<_>>());
    for t in tasks.unwrap_or_default() {
        let p = t.path();
        let read = |f: &str| std::fs::read_to_string(p.join(f)).unwrap_or_default().trim().to_string();
        // stat: "tid (comm) state ..."; the name may hold spaces, the state follows the last ')'.
        let stat = read("stat");
        let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()).unwrap_or("?");
        report.push_str(&format!(
            "{} {:<16} {state} {}\n",
            t.file_name().to_string_lossy(),
            read("comm"),
            read("wchan")
        ));
    }
    let gdb =
        Command::new("gdb").args(["-batch", "-nx", "-p", &pid.to_string(), "-ex", "thread apply all bt 8"]).output();
    match gdb {
        Ok(out) if out.status.success() => {
            let text = String::from_utf8_lossy(&out.stdout);
            report.extend(
                text.lines().filter(|l| l.starts_with('#') || l.starts_with("Thread ")).map(|l| format!("{l}\n")),
            );
        }
        _ => report.push_str("(no stacks: gdb is not installed or could not attach)\n"),
    }
    report
}

/// Runs `f` with the calling thread pinned to one CPU (the first it may run on), so that the
/// processes it starts (which inherit the mask) run on a single core: a wait that only ends if
/// another thread of the process happens to run beside it hangs there instead of passing by luck.
/// The thread's mask is restored afterwards, also when `f` panics.
pub fn on_one_cpu<T>(f: impl FnOnce() -> T) -> T {
    use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};
    struct Restore(CpuSet);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = sched_setaffinity(None, &self.0);
        }
    }
    let saved = sched_getaffinity(None).expect("sched_getaffinity");
    let first = (0..CpuSet::MAX_CPU).find(|&c| saved.is_set(c)).expect("a CPU this thread may run on");
    let mut one = CpuSet::new();
    one.set(first);
    sched_setaffinity(None, &one).expect("sched_setaffinity");
    let _restore = Restore(saved);
    f()
}

/// Line number of each line of an execution log, keyed by its text without the ` ctx=..` tail;
/// fails the test if a key appears twice.
pub fn exec_positions(exec: &str) -> std::collections::HashMap<String, usize> {
    let mut pos = std::collections::HashMap::new();
    for (i, line) in exec.lines().enumerate() {
        let key = line.split(" ctx=").next().unwrap().to_string();
        assert!(pos.insert(key.clone(), i).is_none(), "`{key}` appears twice in the execution log:\n{exec}");
    }
    pos
}

/// Checks that for each `(a, b)`, line `a` of the execution log comes before line `b` (keys as in
/// [`exec_positions`]).
pub fn check_exec_order(name: &str, exec: &str, edges: &[(&str, &str)]) {
    let pos = exec_positions(exec);
    for (a, b) in edges {
        let (Some(pa), Some(pb)) = (pos.get(*a), pos.get(*b)) else {
            panic!("{name}: `{a}` or `{b}` missing from the execution log:\n{exec}");
        };
        assert!(pa < pb, "{name}: `{b}` (line {pb}) did not wait for `{a}` (line {pa}):\n{exec}");
    }
}

/// The key of a setting the environment does not set (file only: a user key or an `[advanced]`
/// knob), if `var` names one.
pub fn file_only_key(var: &str) -> Option<&'static vitamin_runtime::config::Key> {
    vitamin_runtime::config::KEYS.iter().find(|k| k.env.is_none() && (k.name == var || k.var() == var))
}

/// SMs of each green context (`g<n>`), from the fake driver's `cuGreenCtxCreate` lines.
pub fn green_sms(calls: &str) -> std::collections::BTreeMap<String, u32> {
    calls
        .lines()
        .filter_map(|l| l.strip_prefix("cuGreenCtxCreate "))
        .map(|rest| {
            let mut w = rest.split_whitespace();
            let g = w.next().unwrap().to_string();
            (g, w.find_map(|x| x.strip_prefix("sms=")).unwrap().parse().unwrap())
        })
        .collect()
}

/// The device of the green context the operation `label` ran on (`ctx=g<n>` in the execution
/// log, `dev=` of that context's `cuGreenCtxCreate` line); `None` on a primary-context stream.
pub fn device_of(exec: &str, calls: &str, label: &str) -> Option<u32> {
    let line = exec
        .lines()
        .find(|l| l.starts_with(&format!("begin {label} ")))
        .unwrap_or_else(|| panic!("{label} missing from the execution log:\n{exec}"));
    let ctx = line.split_whitespace().find_map(|w| w.strip_prefix("ctx=")).expect("ctx=");
    let create = calls.lines().find(|l| l.starts_with(&format!("cuGreenCtxCreate {ctx} ")))?;
    create.split_whitespace().find_map(|w| w.strip_prefix("dev=")).map(|d| d.parse().unwrap())
}

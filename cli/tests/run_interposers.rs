//! `vitamin run --backend auto` picks the interposers by what the program links: built here, a
//! program linking a `libcudart.so.12` gets the CUDA interposer, one linking (through another
//! library found by `$ORIGIN` run paths) a `libamdhip64.so.5` the HIP one, a script or a program
//! linking neither gets both; `--backend` forces one. The real interposers (cargo builds them if
//! they are missing) are preloaded together into programs on a machine without a GPU: each is
//! inert there (both are mapped, the programs run and exit as they would without them).

use std::path::{Path, PathBuf};
use std::process::Command;

fn tmp(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn vitamin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_vitamin"));
    for (k, _) in std::env::vars() {
        if k.starts_with("VITAMIN_") || k == "LD_PRELOAD" {
            c.env_remove(k);
        }
    }
    c
}

/// The folder holding both interposers cargo built (next to the vitamin binary), building them
/// if either is missing.
fn shims() -> PathBuf {
    let dir = Path::new(env!("CARGO_BIN_EXE_vitamin")).parent().unwrap().to_path_buf();
    let have = |d: &Path| d.join("libvitamin_cuda.so").is_file() && d.join("libvitamin_hip.so").is_file();
    if !have(&dir) {
        // The same profile as the vitamin binary under test (`cargo test --release` too).
        let release = dir.file_name().is_some_and(|n| n == "release");
        let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["build", "-p", "vitamin-shim-cuda", "-p", "vitamin-shim-hip"])
            .args(release.then_some("--release"))
            .status()
            .expect("run cargo build");
        assert!(status.success(), "cargo build of the interposers failed");
    }
    assert!(have(&dir), "the interposers next to {}", dir.display());
    dir
}

/// Runs `cc` with `args` in `dir`; `None` (after printing SKIPPED) if there is no C compiler.
fn cc(dir: &Path, args: &[&str]) -> Option<()> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    match Command::new(&cc).current_dir(dir).args(args).output() {
        Ok(o) if o.status.success() => Some(()),
        Ok(o) => panic!("{cc} {args:?}: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => {
            eprintln!("SKIPPED: no C compiler `{cc}` ({e})");
            None
        }
    }
}

/// `vitamin [pre..] run -- program..`: (the interposers it announced on stderr, stdout).
fn run(lib_dir: &Path, pre: &[&str], program: &[&str]) -> (String, String) {
    let out = vitamin().args(pre).arg("run").arg("--lib-dir").arg(lib_dir).arg("--").args(program).output().unwrap();
    assert!(out.status.success(), "{program:?}: {out:?}");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let announced = err.lines().filter(|l| l.contains("vitamin run: preloading")).collect::<Vec<_>>();
    assert_eq!(announced.len(), 1, "the choice is printed once: {err}");
    (announced[0].to_owned(), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn the_program_picks_the_interposers() {
    let dir = tmp("vitamin-run-interposers");
    let src = "#include <stdio.h>\n#include <stdlib.h>\nint main(void) { printf(\"%s\\n\", getenv(\"LD_PRELOAD\")); return 0; }\n";
    std::fs::write(dir.join("main.c"), src).unwrap();
    std::fs::write(dir.join("empty.c"), "int vitamin_test_placeholder(void) { return 0; }\n").unwrap();
    std::fs::create_dir_all(dir.join("hip")).unwrap();
    // Stand-ins named as the vendor libraries (the loader only needs the names to match).
    let steps: [&[&str]; 5] = [
        &["-shared", "-fPIC", "-Wl,-soname,libcudart.so.12", "-o", "libcudart.so.12", "empty.c"],
        &["-shared", "-fPIC", "-Wl,-soname,libamdhip64.so.5", "-o", "hip/libamdhip64.so.5", "empty.c"],
        // libmid.so needs libamdhip64, found through its own run path ($ORIGIN/hip).
        &[
            "-shared",
            "-fPIC",
            "-o",
            "libmid.so",
            "empty.c",
            "-Wl,--no-as-needed",
            "-Lhip",
            "-l:libamdhip64.so.5",
            "-Wl,-rpath,$ORIGIN/hip",
        ],
        &["-o", "cuda_app", "main.c", "-L.", "-Wl,--no-as-needed", "-l:libcudart.so.12", "-Wl,-rpath,$ORIGIN"],
        &["-o", "hip_app", "main.c", "-L.", "-Wl,--no-as-needed", "-lmid", "-Wl,-rpath,$ORIGIN", "-Wl,-rpath-link,hip"],
    ];
    for step in steps {
        if cc(&dir, step).is_none() {
            return;
        }
    }
    let lib = shims();
    let cuda = lib.join("libvitamin_cuda.so").display().to_string();
    let hip = lib.join("libvitamin_hip.so").display().to_string();

    let (said, out) = run(&lib, &[], &[dir.join("cuda_app").to_str().unwrap()]);
    assert!(said.contains("libvitamin_cuda.so (the program links CUDA)"), "{said}");
    assert_eq!(out.trim(), cuda);
    let (said, out) = run(&lib, &[], &[dir.join("hip_app").to_str().unwrap()]);
    assert!(said.contains("libvitamin_hip.so (the program links HIP)"), "{said}");
    assert_eq!(out.trim(), hip);
    // Forced: the HIP interposer for the CUDA program.
    let (said, out) = run(&lib, &["--backend", "hip"], &[dir.join("cuda_app").to_str().unwrap()]);
    assert!(said.contains("libvitamin_hip.so (--backend hip)"), "{said}");
    assert_eq!(out.trim(), hip);

    // Undecidable: both, and both are inert where no GPU library is ever called.
    let maps = r#"echo "$LD_PRELOAD"; grep -o 'libvitamin_[a-z]*\.so' /proc/$$/maps | sort -u | tr '\n' ' '"#;
    let (said, out) = run(&lib, &[], &["sh", "-c", maps]);
    assert!(said.contains("libvitamin_cuda.so and libvitamin_hip.so") && said.contains("neither"), "{said}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], format!("{cuda}:{hip}"));
    assert_eq!(lines[1].trim(), "libvitamin_cuda.so libvitamin_hip.so", "both mapped into the shell");
    std::fs::write(dir.join("job.sh"), "#!/bin/sh\necho script ran\n").unwrap();
    let mut perms = std::fs::metadata(dir.join("job.sh")).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(dir.join("job.sh"), perms).unwrap();
    let (said, out) = run(&lib, &[], &[dir.join("job.sh").to_str().unwrap()]);
    assert!(said.contains("a script (/bin/sh)"), "{said}");
    assert_eq!(out.trim(), "script ran");
    if Command::new("python3").arg("--version").output().is_ok() {
        let (said, out) = run(&lib, &["--backend", "auto"], &["python3", "-c", "import ctypes, json; print('py ran')"]);
        assert!(said.contains("and"), "python3 links neither: both: {said}");
        assert_eq!(out.trim(), "py ran");
    }
}

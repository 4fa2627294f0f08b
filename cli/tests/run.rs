//! `vitamin run` end to end: the environment it sets up, exec (same pid, exit status passed
//! through), bind mode as the default and the missing-library message. The shim here is a placeholder
//! file (the dynamic loader reports it cannot preload it and carries on); the real library is
//! exercised by shim-cuda's own tests and the GPU check.

use std::path::PathBuf;
use std::process::Command;

fn tmp(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn vitamin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_vitamin"));
    c.env_remove("LD_PRELOAD").env_remove("VITAMIN_LIB_DIR").env_remove("VITAMIN_CENSUS");
    c
}

#[test]
fn observe_sets_up_the_environment_and_execs() {
    let dir = tmp("vitamin-run-observe");
    std::fs::write(dir.join("libvitamin_cuda.so"), b"").unwrap();
    std::fs::write(dir.join("census.json"), b"stale").unwrap();
    let out = vitamin()
        .current_dir(&dir)
        .env("VITAMIN_LIB_DIR", &dir)
        .env("LD_PRELOAD", "/other/libother.so")
        .args(["run", "--observe", "--census", "census.json", "--", "sh", "-c"])
        .arg(r#"echo "$LD_PRELOAD|$VITAMIN_MODE|$VITAMIN_CENSUS|$VITAMIN_CENSUS_PID|$$"; exit 7"#)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7), "exit status passes through: {out:?}");
    let line = String::from_utf8(out.stdout).unwrap();
    let fields: Vec<&str> = line.trim().split('|').collect();
    let shim = dir.join("libvitamin_cuda.so");
    assert_eq!(fields[0], format!("{}:/other/libother.so", shim.display()));
    assert_eq!(fields[1], "observe");
    assert_eq!(fields[2], dir.join("census.json").display().to_string());
    assert_eq!(fields[3], fields[4], "exec keeps the pid, so the command is the census's main process");
    assert!(!dir.join("census.json").exists(), "the stale census was removed");
}

#[test]
fn without_a_mode_the_command_runs_in_bind_mode() {
    let dir = tmp("vitamin-run-bind");
    std::fs::write(dir.join("libvitamin_cuda.so"), b"").unwrap();
    let out = vitamin()
        .env("VITAMIN_LIB_DIR", &dir)
        .env("VITAMIN_MODE", "observe") // inherited: the flags decide, not the environment
        .args(["run", "--", "sh", "-c", r#"echo "$VITAMIN_MODE|${VITAMIN_POLICY:-unset}""#])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "bind|unset");
    let out = vitamin()
        .env("VITAMIN_LIB_DIR", &dir)
        .args(["run", "--policy", "chaos", "--", "sh", "-c", r#"echo "$VITAMIN_MODE|$VITAMIN_POLICY""#])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "bind|chaos");
    let out =
        vitamin().env("VITAMIN_LIB_DIR", &dir).args(["run", "--observe", "--bind", "--", "true"]).output().unwrap();
    assert!(!out.status.success(), "--observe and --bind conflict");
}

#[test]
fn missing_library_says_what_to_do() {
    let dir = tmp("vitamin-run-missing");
    let out = vitamin().args(["run", "--observe", "--lib-dir"]).arg(&dir).args(["--", "true"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("libvitamin_cuda.so not found") && err.contains("cargo build --release"), "{err}");
}

#[test]
fn missing_command_exits_127() {
    let dir = tmp("vitamin-run-127");
    std::fs::write(dir.join("libvitamin_cuda.so"), b"").unwrap();
    let out = vitamin()
        .env("VITAMIN_LIB_DIR", &dir)
        .args(["run", "--observe", "--", "/nonexistent/command-xyz"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
}

#[test]
fn config_prints_every_key_with_where_its_value_came_from() {
    let file = tmp("config").join("config.toml");
    std::fs::write(&file, "policy = \"chaos\"\n[advanced]\nlaunch_first = false\nnot_a_key = 1\n").unwrap();
    let out = vitamin()
        .args(["config", "--json"])
        .env("VITAMIN_CONFIG", &file)
        .env("VITAMIN_SEED", "7")
        .env_remove("VITAMIN_POLICY")
        .output()
        .expect("vitamin config runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(doc["schema"], "vitamin.config.v1");
    let key = |name: &str| doc["keys"].as_array().unwrap().iter().find(|k| k["key"] == name).cloned().unwrap();
    assert_eq!((key("policy")["value"].clone(), key("policy")["source"].clone()), ("chaos".into(), "file".into()));
    assert_eq!((key("seed")["value"].clone(), key("seed")["source"].clone()), ("7".into(), "env".into()));
    assert_eq!(
        (key("launch_first")["value"].clone(), key("launch_first")["source"].clone()),
        ("0".into(), "file".into())
    );
    assert_eq!(key("mode")["source"], "default");
    assert!(doc["problems"][0].as_str().unwrap().contains("not_a_key"));
    // The text form names the same sources.
    let text = vitamin().arg("config").env("VITAMIN_CONFIG", "none").env("VITAMIN_SEED", "7").output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("configuration file: none") && text.contains("env VITAMIN_SEED"), "{text}");
}

#[test]
fn the_hip_backend_preloads_the_hip_interposer() {
    let dir = tmp("vitamin-run-hip");
    std::fs::write(dir.join("libvitamin_hip.so"), b"").unwrap();
    let out = vitamin()
        .env("VITAMIN_LIB_DIR", &dir)
        .args(["--backend", "hip", "run", "--", "sh", "-c", r#"echo "$LD_PRELOAD|$VITAMIN_MODE""#])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let shim = dir.join("libvitamin_hip.so");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), format!("{}|bind", shim.display()));
    // Without it, the message names the HIP interposer's crate.
    let empty = tmp("vitamin-run-hip-missing");
    let out =
        vitamin().env("VITAMIN_LIB_DIR", &empty).args(["--backend", "hip", "run", "--", "true"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("libvitamin_hip.so not found") && err.contains("vitamin-shim-hip"), "{err}");
}

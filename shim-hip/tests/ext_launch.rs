//! The extended launches on the test double (tests/fake/ext_app.c): `hipExtModuleLaunchKernel`
//! under both of its names (global work sizes, kernel parameters or an `extra` buffer, start and
//! stop events), ROCm 6's `hipLaunchKernelExC` and `hipDrvLaunchKernelEx` with and without
//! attributes. Natively and under the interposer in observe and bind mode the results are
//! bitwise identical and the launches of one stream execute in their call order; in bind mode
//! the plain launches run on the pool's CU-masked lanes, the timed one with its events recorded
//! around it on its lane, and the cooperative and priority launches on the application's stream
//! (the native path); invalid launches return the runtime's error synchronously.

mod support;

use support::{built, built_program, execs, masked_streams, run_program, Exec};

const LIB_ENV: &str = "VITAMIN_HIP_LIBRARY";

/// The double's `call` lines naming a stream (`call <what..> s<N> ..`): (line, what, stream).
fn calls(log: &str) -> Vec<(usize, String, String)> {
    log.lines()
        .enumerate()
        .filter_map(|(i, l)| {
            let f: Vec<&str> = l.strip_prefix("call ")?.split_whitespace().collect();
            let at = f.iter().position(|w| w.len() > 1 && w.starts_with('s') && w[1..].parse::<u32>().is_ok())?;
            Some((i, f[..at].join(" "), f[at].to_owned()))
        })
        .collect()
}

#[test]
fn extended_launches_keep_native_results_and_order_and_bind_where_they_can() {
    let Some(b) = built() else { return };
    let Some(exe) = built_program(b, "ext_app") else { return };
    let lib = b.lib.to_str().unwrap();
    let native = run_program(b, &exe, "ext-native", false, &[], &[]);
    assert!(native.line.contains("snap_ok=1 elapsed_ok=1 nondiv=1 badattr=1"), "native: {}", native.line);

    for mode in ["observe", "bind"] {
        let tag = format!("ext-{mode}");
        // Launch-first is opportunistic (the dispatcher thread may hold its lock for a round just
        // then): here a launch may spin for it up to a second (a file-only knob), so that the
        // timed launch is bound.
        let config = b.dir.join("ext-launch.toml");
        std::fs::write(&config, "[advanced]\nlf_lock_wait_us = 1000000\n").unwrap();
        let env = [("VITAMIN_MODE", mode), (LIB_ENV, lib), ("VITAMIN_CONFIG", config.to_str().unwrap())];
        let r = run_program(b, &exe, &tag, true, &[], &env);
        assert_eq!(r.line, native.line, "{tag}: the native results and codes");
        let ops = execs(&r.log);
        let axpys: Vec<&Exec> = ops.iter().filter(|e| e.kernel() == Some("axpy")).collect();
        assert_eq!(axpys.len(), 10, "{tag}: the ten launches ran once each: {axpys:#?}");
        for w in axpys.windows(2) {
            assert!(w[0].end < w[1].begin, "{tag}: one stream's launches in call order: {:?} then {:?}", w[0], w[1]);
        }
        // The copy of y1 on s2 waited for t1, recorded after launch 1.
        let copies: Vec<&Exec> = ops.iter().filter(|e| e.what == "copy 16384").collect();
        assert_eq!(copies.len(), 2, "{tag}: the copies of y1 and y: {copies:#?}");
        for c in &copies {
            assert!(axpys[1].end < c.begin, "{tag}: {c:?} must follow launch 1 ({:?})", axpys[1]);
        }
        // The timed launches (the first ext-launch; the last ext-launch or launch-stub, as bind
        // mode launches the stub as the runtime function it stands for): start, kernel, stop
        // recorded on one stream, in that order.
        let calls = calls(&r.log);
        let ext = calls.iter().position(|(_, w, _)| w == "ext-launch").expect("the timed module launch");
        let stub =
            calls.iter().rposition(|(_, w, _)| w == "launch-stub" || w == "ext-launch").expect("the timed stub launch");
        for k in [ext, stub] {
            let (before, launch, after) = (&calls[k - 1], &calls[k], &calls[k + 1]);
            assert_eq!((before.1.as_str(), after.1.as_str()), ("event-record", "event-record"), "{tag}: {calls:#?}");
            assert!(before.2 == launch.2 && launch.2 == after.2, "{tag}: events on the kernel's stream: {calls:#?}");
        }

        let lanes = masked_streams(&r.log);
        let on_lane: Vec<bool> = axpys.iter().map(|e| lanes.contains(&e.stream)).collect();
        if mode == "observe" {
            assert!(lanes.is_empty(), "{tag}: observe mode builds no pool");
            continue;
        }
        // Bound: the plain launches (0, 1 and 9 by launch-first with their events, 2-4, 6 and
        // 8); native on the application's stream: the cooperative launch (5) and the one with a
        // priority (7).
        assert_eq!(on_lane, [true, true, true, true, true, false, true, false, true, true], "{tag}: {axpys:#?}");
        for k in [ext, stub] {
            assert!(lanes.contains(&calls[k].2), "{tag}: the timed launch and its events on a lane: {calls:#?}");
        }
        let coop = calls.iter().find(|(_, w, _)| w.starts_with("launch-ex-cooperative")).expect("cooperative call");
        assert!(!lanes.contains(&coop.2), "{tag}: the cooperative launch on the application's stream");
        let c = r.census.as_ref().expect("bind census");
        assert_eq!(c["mode"], "bind", "{c:#}");
    }
}

//! The documented limit of the interposer (docs/amd.md, "Launches that bypass the interposer"):
//! a launch made through a function the application fetched itself with `dlsym` on a `dlopen`ed
//! `libamdhip64` (tests/fake/dlsym_app.c) reaches the runtime directly. In bind mode the linked
//! launches before and after it run on pool lanes, the fetched one on the application's own
//! stream: vitamin never sees it, so nothing orders it against the bound work of that stream
//! (docs/results/hip-dlsym-bypass.md shows the overlap in the double's log). This test pins the
//! placement (which launch runs where; the log's order of the three depends on timing); if `dlsym` is ever interposed it fails, and the
//! docs must change with it.

mod support;

use support::{built, built_program, execs, masked_streams, run_program};

#[test]
fn a_launch_through_dlsym_bypasses_the_interposer() {
    let Some(b) = built() else { return };
    let Some(exe) = built_program(b, "dlsym_app") else { return };
    let lib = b.lib.to_str().unwrap();
    let native = run_program(b, &exe, "dlsym-native", false, &[], &[]);
    assert_eq!(native.line, "results=1");
    let r = run_program(b, &exe, "dlsym-bind", true, &[], &[("VITAMIN_MODE", "bind"), ("VITAMIN_HIP_LIBRARY", lib)]);
    let lanes = masked_streams(&r.log);
    let axpys: Vec<_> = execs(&r.log).into_iter().filter(|e| e.kernel() == Some("axpy")).collect();
    assert_eq!(axpys.len(), 3, "{axpys:#?}");
    let placed: Vec<bool> = r
        .log
        .lines()
        .filter(|l| l.starts_with("call launch ") && l.contains(" axpy "))
        .map(|l| lanes.contains(l.split_whitespace().nth(2).unwrap_or("")))
        .collect();
    // The double logs launches as they reach it: the dispatcher may submit the first linked launch
    // after the application thread made the dlsym'd one (nothing orders them), so count, not order.
    let mut sorted = placed.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [false, true, true],
        "linked launches on lanes, the dlsym'd one on the application's stream: {placed:?}"
    );
    let census = r.census.as_ref().expect("census");
    assert_eq!(census["totals"]["kernel_launches"], 2, "the census saw only the linked launches: {census:#}");
}

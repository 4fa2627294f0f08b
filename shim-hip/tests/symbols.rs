//! libvitamin_hip.so exports each HIP symbol under libamdhip64's version node: the built library
//! against Debian's `libamdhip64.so.5` (objdump), and against the committed list
//! (`symbol-versions.txt`) the linker wrapper (`scripts/cc-link.sh`) writes its version script from.

mod support;

use std::path::Path;

use vitamin_hal_hip::symbols::{compare, exports, version_definitions, DEBIAN_LIBAMDHIP64};
use vitamin_hip::versions;

#[test]
fn exports_carry_the_version_nodes_of_libamdhip64() {
    if !Path::new(DEBIAN_LIBAMDHIP64).exists() {
        eprintln!("SKIPPED: {DEBIAN_LIBAMDHIP64} is not installed (apt-get install libamdhip64-dev)");
        return;
    }
    let shim = support::shim_path();
    let (ours, theirs) = match (exports(&shim), exports(Path::new(DEBIAN_LIBAMDHIP64))) {
        (Ok(o), Ok(t)) => (o, t),
        (Err(why), _) | (_, Err(why)) => {
            eprintln!("SKIPPED: {why}");
            return;
        }
    };
    let list = versions::parse(versions::LIST).expect("symbol-versions.txt parses");

    // Every export of the interposer is versioned as the list says (nothing unversioned: the
    // wrapper's version script was used), and nothing but the list's symbols leaks out.
    let mut exported: Vec<&str> = Vec::new();
    for e in &ours {
        let want = versions::node_of(&list, &e.name);
        assert!(want.is_some(), "{} is exported but not in symbol-versions.txt", e.name);
        assert_eq!(e.version.as_deref(), want, "{}: version node", e.name);
        assert!(e.default, "{}@{:?} is not the default version", e.name, e.version);
        exported.push(&e.name);
    }
    exported.sort_unstable();
    let mut expected = versions::exports();
    expected.sort_unstable();
    assert_eq!(exported, expected, "the exported symbols are the hooks and the registration entry points");

    // Against the real library: the same node for every symbol both export.
    let c = compare(&ours, &theirs, &["hip", "__hip"]);
    assert!(c.versions_match(), "symbols under another version than libamdhip64.so.5: {:?}", c.mismatched);
    assert!(c.matching.len() >= 75, "only {} symbols compared: {:?}", c.matching.len(), c.matching);
    assert!(c.matching.iter().any(|n| n == "hipLaunchKernel"));
    // The symbols 5.2 lacks are the newer API, in nodes 5.2 does not define.
    let real_nodes = version_definitions(Path::new(DEBIAN_LIBAMDHIP64)).expect("objdump -p");
    let real_names: Vec<&str> = real_nodes.iter().map(|(n, _)| n.as_str()).collect();
    // hipExtModuleLaunchKernel is the exception: 5.2 exports it only under its C++ name (its
    // hip_ext.h lacks `extern "C"`), later ROCm under both names in hip_4.2 (ROCm/clr's map);
    // the interposer exports both, each in hip_4.2, and the C++ one matches 5.2's.
    let cxx = vitamin_hip::ffi::EXT_MODULE_LAUNCH_KERNEL_CXX;
    let node = |list: &[vitamin_hal_hip::symbols::Export], name: &str| {
        list.iter().find(|e| e.name == name && e.default).map(|e| e.version.clone())
    };
    assert_eq!(node(&theirs, cxx), Some(Some("hip_4.2".to_owned())), "5.2's C++-named hipExtModuleLaunchKernel");
    assert_eq!(node(&ours, cxx), node(&theirs, cxx));
    assert_eq!(node(&theirs, "hipExtModuleLaunchKernel"), None, "5.2 has no C-named hipExtModuleLaunchKernel");
    assert_eq!(node(&ours, "hipExtModuleLaunchKernel"), Some(Some("hip_4.2".to_owned())));
    let not_in_reference: Vec<_> = c.not_in_reference.iter().filter(|(n, _)| n != "hipExtModuleLaunchKernel").collect();
    let mut newer: Vec<&str> = not_in_reference.iter().map(|(n, _)| n.as_str()).collect();
    newer.sort_unstable();
    assert_eq!(
        newer,
        [
            "hipDrvLaunchKernelEx",
            "hipGetProcAddress",
            "hipLaunchHostFunc",
            "hipLaunchKernelExC",
            "hipModuleLaunchCooperativeKernel"
        ]
    );
    for (name, node) in not_in_reference {
        let node = node.as_deref().unwrap_or("(none)");
        assert!(!real_names.contains(&node), "{name}: node {node} exists in 5.2, where {name} does not");
    }

    // The same chain of node names as the real library, then the newer nodes (LLD records no
    // parents, so only the names and their order are compared).
    let shim_nodes = version_definitions(&shim).expect("objdump -p");
    let shim_names: Vec<&str> = shim_nodes.iter().map(|(n, _)| n.as_str()).collect();
    assert!(real_names.len() >= 7, "{real_names:?}");
    assert_eq!(&shim_names[..real_names.len()], &real_names[..]);
    let list_names: Vec<&str> = list.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(shim_names, list_names);
}

/// The workspace's linker wrapper on a small C library: without `VITAMIN_VERSION_NODES` it links
/// as the plain driver would (rustc's anonymous script is kept: unversioned exports); with it,
/// the listed symbol gets its node, and an exported symbol the list lacks fails the link by name.
#[test]
fn the_linker_wrapper_versions_only_shim_hip_and_refuses_unlisted_exports() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let wrapper = root.join("scripts/cc-link.sh");
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("shimhip-wrapper");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a.c"), "int hipLaunchKernel(void) { return 1; }\nint hipNotListed(void) { return 2; }\n")
        .unwrap();
    let script = |names: &[&str]| {
        let body: String = names.iter().map(|n| format!("    {n};\n")).collect();
        std::fs::write(dir.join("rustc.map"), format!("{{\n  global:\n{body}\n  local:\n    *;\n}};\n")).unwrap();
    };
    let link = |out: &str, nodes: Option<&Path>| {
        let mut cmd = std::process::Command::new("bash");
        cmd.arg(&wrapper).current_dir(&dir).env_remove("VITAMIN_VERSION_NODES");
        cmd.args(["-shared", "-fPIC", "-o", out, "a.c", "-Wl,--version-script=rustc.map"]);
        if let Some(n) = nodes {
            cmd.env("VITAMIN_VERSION_NODES", n);
        }
        cmd.output().expect("run bash")
    };
    script(&["hipLaunchKernel", "hipNotListed"]);
    let plain = link("plain.so", None);
    if !plain.status.success() {
        let err = String::from_utf8_lossy(&plain.stderr);
        if err.contains("not found") || err.contains("No such file") {
            eprintln!("SKIPPED: no C compiler driver here ({err})");
            return;
        }
        panic!("the pass-through link failed: {err}");
    }
    let Ok(plain_exports) = exports(&dir.join("plain.so")) else {
        eprintln!("SKIPPED: no objdump (install binutils)");
        return;
    };
    assert!(plain_exports.iter().all(|e| e.version.is_none()), "{plain_exports:?}");

    let list = Path::new(env!("CARGO_MANIFEST_DIR")).join("symbol-versions.txt");
    let refused = link("refused.so", Some(&list));
    assert!(!refused.status.success(), "a symbol without a node must fail the link");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("hipNotListed"), "{refused:?}");

    script(&["hipLaunchKernel"]);
    let ok = link("versioned.so", Some(&list));
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let e = exports(&dir.join("versioned.so")).expect("objdump");
    let k = e.iter().find(|e| e.name == "hipLaunchKernel").expect("hipLaunchKernel exported");
    assert_eq!((k.version.as_deref(), k.default), (Some("hip_4.2"), true));
    assert!(!e.iter().any(|e| e.name == "hipNotListed"), "not in rustc's list: stays local: {e:?}");
}

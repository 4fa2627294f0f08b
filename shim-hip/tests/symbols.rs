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
    let mut newer: Vec<&str> = c.not_in_reference.iter().map(|(n, _)| n.as_str()).collect();
    newer.sort_unstable();
    assert_eq!(newer, ["hipGetProcAddress", "hipLaunchHostFunc", "hipModuleLaunchCooperativeKernel"]);
    for (name, node) in &c.not_in_reference {
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

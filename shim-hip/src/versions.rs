//! The symbol version nodes libvitamin_hip.so exports its functions under, from
//! `shim-hip/symbol-versions.txt` (the one source of truth: the workspace's linker wrapper,
//! `scripts/cc-link.sh`, writes the library's version script from the same file).
//!
//! The file lists `[node]` headers, each followed by the symbols exported in that node; each node
//! inherits from the one before (libamdhip64's chain `hip_4.2` ← `hip_4.3` ← ... ← `hip_5.2`).
//! `#` starts a comment line. The tests check that the list versions exactly the exported
//! symbols ([`EXPORTS`]) and, in `tests/symbols.rs`, that the built library matches Debian's
//! `libamdhip64.so.5` for every symbol both export.

use std::collections::BTreeSet;

/// The committed list.
pub const LIST: &str = include_str!("../symbol-versions.txt");

/// Exports that are not in the hook table ([`crate::hooks::HOOKS`]): hipcc's start-up entry
/// points, `hipGetProcAddress` and HIP 5.2's C++ name of `hipExtModuleLaunchKernel`.
pub const EXTRA_EXPORTS: &[&str] =
    &["__hipRegisterFatBinary", "__hipRegisterFunction", "hipGetProcAddress", crate::ffi::EXT_MODULE_LAUNCH_KERNEL_CXX];

/// Every symbol the library exports: the hooks, then [`EXTRA_EXPORTS`].
pub fn exports() -> Vec<&'static str> {
    crate::hooks::HOOKS.iter().map(|h| h.symbol()).chain(EXTRA_EXPORTS.iter().copied()).collect()
}

/// One version node and the symbols exported in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// The node's name (`hip_4.2`).
    pub name: String,
    /// Its symbols, in file order.
    pub symbols: Vec<String>,
}

/// Why a list does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListError {
    /// A symbol came before the first `[node]` (line number, 1-based).
    SymbolOutsideNode(usize),
    /// A line is neither a header, a comment nor one C identifier (line number).
    BadLine(usize),
    /// A node is listed twice.
    DuplicateNode(String),
    /// A symbol is listed twice.
    DuplicateSymbol(String),
}

impl std::fmt::Display for ListError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListError::SymbolOutsideNode(l) => write!(f, "line {l}: a symbol before any [node]"),
            ListError::BadLine(l) => write!(f, "line {l}: expected `[node]`, `# comment` or one symbol name"),
            ListError::DuplicateNode(n) => write!(f, "node {n} is listed twice"),
            ListError::DuplicateSymbol(s) => write!(f, "symbol {s} is listed twice"),
        }
    }
}

impl std::error::Error for ListError {}

fn is_identifier(s: &str) -> bool {
    let mut c = s.chars();
    c.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_') && c.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Parses a list in `symbol-versions.txt`'s format.
pub fn parse(text: &str) -> Result<Vec<Node>, ListError> {
    let mut nodes: Vec<Node> = Vec::new();
    let (mut seen_nodes, mut seen_symbols) = (BTreeSet::new(), BTreeSet::new());
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c == '[' || c == ']') {
                return Err(ListError::BadLine(i + 1));
            }
            if !seen_nodes.insert(name.to_owned()) {
                return Err(ListError::DuplicateNode(name.to_owned()));
            }
            nodes.push(Node { name: name.to_owned(), symbols: Vec::new() });
            continue;
        }
        if !is_identifier(line) {
            return Err(ListError::BadLine(i + 1));
        }
        let Some(node) = nodes.last_mut() else { return Err(ListError::SymbolOutsideNode(i + 1)) };
        if !seen_symbols.insert(line.to_owned()) {
            return Err(ListError::DuplicateSymbol(line.to_owned()));
        }
        node.symbols.push(line.to_owned());
    }
    Ok(nodes)
}

/// The node `symbol` is listed in, if any.
pub fn node_of<'a>(nodes: &'a [Node], symbol: &str) -> Option<&'a str> {
    nodes.iter().find(|n| n.symbols.iter().any(|s| s == symbol)).map(|n| n.name.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_committed_list_versions_exactly_the_exports() {
        let nodes = parse(LIST).expect("symbol-versions.txt parses");
        let listed: BTreeSet<&str> = nodes.iter().flat_map(|n| n.symbols.iter().map(String::as_str)).collect();
        let exported: BTreeSet<&str> = exports().into_iter().collect();
        let unlisted: Vec<_> = exported.difference(&listed).collect();
        let stale: Vec<_> = listed.difference(&exported).collect();
        assert!(unlisted.is_empty(), "exported without a version node (add to symbol-versions.txt): {unlisted:?}");
        assert!(stale.is_empty(), "listed but not exported: {stale:?}");
        let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names[..7], ["hip_4.2", "hip_4.3", "hip_4.4", "hip_4.5", "hip_5.0", "hip_5.1", "hip_5.2"]);
        assert_eq!(node_of(&nodes, "hipLaunchKernel"), Some("hip_4.2"));
    }

    #[test]
    fn malformed_lists_are_errors() {
        assert_eq!(parse("hipA\n[hip_4.2]\n"), Err(ListError::SymbolOutsideNode(1)));
        assert_eq!(parse("[hip_4.2]\nhip A\n"), Err(ListError::BadLine(2)));
        assert_eq!(parse("[hip_4.2]\n[hip_4.2]\n"), Err(ListError::DuplicateNode("hip_4.2".into())));
        assert_eq!(parse("[a]\nhipA\n[b]\nhipA\n"), Err(ListError::DuplicateSymbol("hipA".into())));
        assert_eq!(parse("[]\n"), Err(ListError::BadLine(1)));
    }

    fn render(nodes: &[Node]) -> String {
        let mut s = String::from("# generated\n");
        for n in nodes {
            s += &format!("\n[{}]\n", n.name);
            for sym in &n.symbols {
                s += &format!("  {sym}\n");
            }
        }
        s
    }

    proptest! {
        /// Any list of distinct nodes with distinct symbols reads back as written.
        #[test]
        fn rendered_lists_parse_back(
            names in proptest::collection::btree_set("hip_[0-9]\\.[0-9]", 1..6),
            syms in proptest::collection::btree_set("[a-zA-Z_][a-zA-Z0-9_]{0,12}", 0..30),
            cuts in proptest::collection::vec(any::<proptest::sample::Index>(), 6),
        ) {
            let names: Vec<String> = names.into_iter().collect();
            let syms: Vec<String> = syms.into_iter().collect();
            let mut nodes: Vec<Node> = names.iter().map(|n| Node { name: n.clone(), symbols: vec![] }).collect();
            for (i, s) in syms.iter().enumerate() {
                let k = cuts[i % cuts.len()].index(nodes.len());
                nodes[k].symbols.push(s.clone());
            }
            let parsed = parse(&render(&nodes)).unwrap();
            prop_assert_eq!(&parsed, &nodes);
            for n in &nodes {
                for s in &n.symbols {
                    prop_assert_eq!(node_of(&parsed, s), Some(n.name.as_str()));
                }
            }
        }
    }
}

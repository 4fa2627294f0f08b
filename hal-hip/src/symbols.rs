//! Symbol-version comparison of shared libraries, for the interposer's and the test double's CI
//! checks: an `LD_PRELOAD` library (or a stand-in) that exports a `hip*` function must export it
//! under the same version node as the real `libamdhip64` (`hipLaunchKernel@@hip_4.2`), or an
//! application linked against versioned symbols would not bind to it.
//!
//! [`parse_objdump`] reads `objdump -T` output, [`exports`] runs it on a file, and [`compare`]
//! checks a candidate's exports against a reference (Debian's [`DEBIAN_LIBAMDHIP64`]). Plain data,
//! no FFI.

use std::collections::BTreeMap;
use std::path::Path;

/// Debian 12's HIP runtime (libamdhip64-5 5.2.3), the reference of the symbol checks.
pub const DEBIAN_LIBAMDHIP64: &str = "/usr/lib/x86_64-linux-gnu/libamdhip64.so.5";

/// One defined dynamic symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    /// Symbol name.
    pub name: String,
    /// Version node (`hip_4.2`), `None` when unversioned.
    pub version: Option<String>,
    /// Whether it is the default version (`@@`; objdump prints a hidden one in parentheses).
    pub default: bool,
}

/// The defined symbols of an `objdump -T` listing (undefined `*UND*` entries and the version
/// nodes' own `*ABS*` entries are skipped).
pub fn parse_objdump(text: &str) -> Vec<Export> {
    let mut out = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 5 || !fields[0].chars().all(|c| c.is_ascii_hexdigit()) || fields[0].len() < 8 {
            continue;
        }
        let n = fields.len();
        let (name, ver) = (fields[n - 1], fields[n - 2]);
        // The flag columns vary in count, and LLD leaves the version column of an unversioned
        // undefined symbol empty: the section is the first field naming one.
        let section = fields[1..].iter().find(|f| f.starts_with('*') || f.starts_with('.')).copied();
        if matches!(section, None | Some("*UND*") | Some("*ABS*")) {
            continue;
        }
        let (version, default) = if ver.starts_with('(') && ver.ends_with(')') {
            (Some(ver[1..ver.len() - 1].to_owned()), false)
        } else if ver == "Base" || ver.chars().all(|c| c.is_ascii_hexdigit()) {
            (None, true)
        } else {
            (Some(ver.to_owned()), true)
        };
        out.push(Export { name: name.to_owned(), version, default });
    }
    out
}

/// The defined dynamic symbols of `path` (runs `objdump -T`).
pub fn exports(path: &Path) -> Result<Vec<Export>, String> {
    let out = std::process::Command::new("objdump")
        .arg("-T")
        .arg(path)
        .output()
        .map_err(|e| format!("cannot run objdump ({e}): install binutils"))?;
    if !out.status.success() {
        return Err(format!("objdump -T {} failed: {}", path.display(), String::from_utf8_lossy(&out.stderr)));
    }
    Ok(parse_objdump(&String::from_utf8_lossy(&out.stdout)))
}

/// How a candidate's exports compare with a reference's, for names with given prefixes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Comparison {
    /// Exported by both under the same default version.
    pub matching: Vec<String>,
    /// Exported by both, but under another version (or not as the default): `(name, candidate's,
    /// reference's)`.
    pub mismatched: Vec<(String, Option<String>, Option<String>)>,
    /// Exported by the candidate only (newer API than the reference), with the candidate's version.
    pub not_in_reference: Vec<(String, Option<String>)>,
}

impl Comparison {
    /// Whether no shared symbol has another version.
    pub fn versions_match(&self) -> bool {
        self.mismatched.is_empty()
    }
}

/// Compares the candidate's exported symbols whose names start with one of `prefixes` with the
/// reference's default versions.
pub fn compare(candidate: &[Export], reference: &[Export], prefixes: &[&str]) -> Comparison {
    let wanted = |n: &str| prefixes.iter().any(|p| n.starts_with(p));
    let refs: BTreeMap<&str, &Export> =
        reference.iter().filter(|e| e.default && wanted(&e.name)).map(|e| (e.name.as_str(), e)).collect();
    let mut c = Comparison::default();
    let mut seen = std::collections::BTreeSet::new();
    for e in candidate.iter().filter(|e| wanted(&e.name)) {
        if !seen.insert(e.name.clone()) {
            continue;
        }
        match refs.get(e.name.as_str()) {
            Some(r) if r.version == e.version && e.default => c.matching.push(e.name.clone()),
            Some(r) => c.mismatched.push((e.name.clone(), e.version.clone(), r.version.clone())),
            None => c.not_in_reference.push((e.name.clone(), e.version.clone())),
        }
    }
    c
}

/// The version nodes an `objdump -p` listing defines, in order, each with its parent nodes (the
/// file's own base entry, flagged `0x01`, is skipped).
pub fn parse_version_definitions(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        if line.starts_with("Version definitions:") {
            inside = true;
            continue;
        }
        if !inside {
            continue;
        }
        if line.trim().is_empty() || line.starts_with("Version References") {
            break;
        }
        if line.starts_with(char::is_whitespace) {
            if let Some(last) = out.last_mut() {
                last.1.extend(line.split_whitespace().map(str::to_owned));
            }
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() >= 4 {
            // The base entry (flag 0x01, the file's soname) is kept until the end so that its
            // parent lines, if any, do not attach to the node before it.
            let base = u32::from_str_radix(f[1].trim_start_matches("0x"), 16).is_ok_and(|flags| flags & 1 != 0);
            out.push((if base { String::new() } else { f[3].to_owned() }, Vec::new()));
        }
    }
    out.retain(|(n, _)| !n.is_empty());
    out
}

/// The version nodes `path` defines (runs `objdump -p`).
pub fn version_definitions(path: &Path) -> Result<Vec<(String, Vec<String>)>, String> {
    let out = std::process::Command::new("objdump")
        .arg("-p")
        .arg(path)
        .output()
        .map_err(|e| format!("cannot run objdump ({e}): install binutils"))?;
    if !out.status.success() {
        return Err(format!("objdump -p {} failed: {}", path.display(), String::from_utf8_lossy(&out.stderr)));
    }
    Ok(parse_version_definitions(&String::from_utf8_lossy(&out.stdout)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
/usr/lib/x86_64-linux-gnu/libamdhip64.so.5:     file format elf64-x86-64

DYNAMIC SYMBOL TABLE:
0000000000000000      DF *UND*	0000000000000000 (GLIBC_2.3.4) __printf_chk
000000000022e610 g    DF .text	00000000000009b6  hip_4.2     hipLaunchKernel
000000000022efd0 g    DF .text	00000000000009d6  hip_5.2     hipLaunchKernel_spt
0000000000281480 g    DF .text	0000000000000d2a  (hip_4.2)   hipOld
0000000000000000 g    DO *ABS*	0000000000000000  hip_5.0     hip_5.0
0000000000001139 g    DF .text	0000000000000016  Base        plain
0000000000000000  w   D  *UND*	0000000000000000              __gmon_start__
";

    #[test]
    fn parses_versions_and_skips_undefined() {
        let e = parse_objdump(SAMPLE);
        let names: Vec<&str> = e.iter().map(|x| x.name.as_str()).collect();
        assert_eq!(names, ["hipLaunchKernel", "hipLaunchKernel_spt", "hipOld", "plain"]);
        assert_eq!(e[1].version.as_deref(), Some("hip_5.2"));
        assert!(!e[2].default);
        assert_eq!(e[3].version, None);
    }

    #[test]
    fn version_definitions_with_parents() {
        let text = "\
Version definitions:
1 0x01 0x01685fa5 libamdhip64.so.5
2 0x00 0x0f062772 hip_4.2
3 0x00 0x0f062773 hip_4.3
\thip_4.2 
4 0x02 0x0f062774 hip_4.4
\thip_4.3 

Version References:
";
        let d = parse_version_definitions(text);
        assert_eq!(
            d,
            [
                ("hip_4.2".to_string(), vec![]),
                ("hip_4.3".to_string(), vec!["hip_4.2".to_string()]),
                ("hip_4.4".to_string(), vec!["hip_4.3".to_string()])
            ]
        );
    }

    #[test]
    fn compare_sorts_matches_mismatches_and_extras() {
        let reference = parse_objdump(SAMPLE);
        let candidate = vec![
            Export { name: "hipLaunchKernel".into(), version: Some("hip_4.2".into()), default: true },
            Export { name: "hipLaunchKernel_spt".into(), version: Some("hip_4.2".into()), default: true },
            Export { name: "hipNew".into(), version: Some("hip_6.0".into()), default: true },
            Export { name: "other".into(), version: None, default: true },
        ];
        let c = compare(&candidate, &reference, &["hip"]);
        assert_eq!(c.matching, ["hipLaunchKernel"]);
        assert_eq!(c.mismatched, [("hipLaunchKernel_spt".into(), Some("hip_4.2".into()), Some("hip_5.2".into()))]);
        assert_eq!(c.not_in_reference, [("hipNew".into(), Some("hip_6.0".into()))]);
        assert!(!c.versions_match());
    }
}

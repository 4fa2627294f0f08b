//! `hal` and `runtime` never name a vendor (docs: DESIGN.md, "Layers"): their code (every `.rs`
//! file under `hal/src` and `runtime/src`, comments stripped, string literals kept) holds none of
//! the words below. Comments may cite where something was measured; the simulated device presets
//! (`hal/src/sim/presets.toml`) are data, not code, and are not scanned.
//!
//! A word matches when an identifier-ish token starts with it: tokens split at every character
//! that is not a letter or digit (so `hal_cuda` and `VITAMIN_HIP_X` split) and at lower-to-upper
//! case changes (so `CudaBackend` and `hipStream` split). Prefix matching is deliberate: it also
//! catches `hiprtc`, `cudart` or `amdgpu`; an innocent word it catches can be renamed.

use std::path::{Path, PathBuf};

const WORDS: &[&str] = &["cuda", "hip", "nvidia", "amd", "h200", "mi300"];

/// `src` with every comment replaced by blanks (newlines kept, so line numbers stay): `//`
/// comments to the end of the line, `/* */` comments (nested), outside string and character
/// literals.
fn strip_comments(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    let blank = |out: &mut String, bytes: &[u8]| {
        for &c in bytes {
            out.push(if c == b'\n' { '\n' } else { ' ' });
        }
    };
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            let end = rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (1, 2);
            while j < rest.len() && depth > 0 {
                if rest[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if rest[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            blank(&mut out, &rest[..j]);
            i += j;
        } else if let Some(len) = raw_string_len(rest) {
            out.push_str(&src[i..i + len]);
            i += len;
        } else if rest[0] == b'"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(rest.len());
            out.push_str(&src[i..i + end]);
            i += end;
        } else if rest[0] == b'\'' {
            // A character literal ('x', '\n', '\u{..}') or a lifetime ('a): copy either.
            let len = match rest.get(1) {
                Some(b'\\') => rest.iter().skip(2).position(|&c| c == b'\'').map_or(rest.len(), |p| p + 3),
                Some(_) => {
                    let c = src[i + 1..].chars().next().map_or(1, char::len_utf8);
                    if rest.get(1 + c) == Some(&b'\'') {
                        2 + c
                    } else {
                        1
                    }
                }
                None => 1,
            };
            out.push_str(&src[i..i + len]);
            i += len;
        } else {
            let c = src[i..].chars().next().expect("in bounds");
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The length of a raw string literal (`r"..."`, `r#"..."#`, `br"..."`) at the start of `s`.
fn raw_string_len(s: &[u8]) -> Option<usize> {
    let start = if s.starts_with(b"br") {
        2
    } else if s.starts_with(b"r") {
        1
    } else {
        return None;
    };
    let hashes = s[start..].iter().take_while(|&&c| c == b'#').count();
    if s.get(start + hashes) != Some(&b'"') {
        return None;
    }
    let body = start + hashes + 1;
    let mut close = vec![b'#'; hashes + 1];
    close[0] = b'"';
    let end =
        s[body..].windows(close.len()).position(|w| w == close.as_slice()).map_or(s.len(), |p| body + p + close.len());
    Some(end)
}

/// The tokens of `code` that start with a vendor word, with their 1-based line numbers.
fn vendor_words(code: &str) -> Vec<(usize, String)> {
    let mut hits = Vec::new();
    for (n, line) in code.lines().enumerate() {
        for run in line.split(|c: char| !c.is_ascii_alphanumeric()).filter(|r| !r.is_empty()) {
            let mut token = String::new();
            let mut prev_lower = false;
            for c in run.chars().chain(std::iter::once(' ')) {
                if c == ' ' || (prev_lower && c.is_ascii_uppercase()) {
                    let t = token.to_ascii_lowercase();
                    if WORDS.iter().any(|w| t.starts_with(w)) {
                        hits.push((n + 1, token.clone()));
                    }
                    token.clear();
                }
                prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
                token.push(c);
            }
        }
    }
    hits
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn hal_and_runtime_code_names_no_vendor() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for dir in ["hal/src", "runtime/src"] {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 20, "found only {files:?}");
    let mut hits = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        for (line, word) in vendor_words(&strip_comments(&text)) {
            hits.push(format!("{}:{line}: {word}", f.strip_prefix(&root).unwrap_or(f).display()));
        }
    }
    assert!(hits.is_empty(), "vendor names in hal/runtime code:\n{}", hits.join("\n"));
}

#[test]
fn the_scan_sees_code_and_strings_but_not_comments() {
    let src = r####"
        // a CUDA comment
        /* an AMD /* nested */ block */ let x = 1;
        /// doc on the H200
        let s = "hip string"; let c = '"'; let l: &'static str = "";
        let r = r#"raw "nvidia" text"#;
        fn f<'a>(v: &'a CudaThing) {} // trailing mi300x
        let q = "quote \" then Amd"; let id = hal_cuda; let t = VITAMIN_HIP_X; let u = cudaMalloc;
        let fine = ship + chip + gradient + cu_mask;
    "####;
    let hits: Vec<(usize, String)> = vendor_words(&strip_comments(src));
    let words: Vec<&str> = hits.iter().map(|(_, w)| w.as_str()).collect();
    assert_eq!(words, ["hip", "nvidia", "Cuda", "Amd", "cuda", "HIP", "cuda"], "{hits:?}");
    assert_eq!(hits[0].0, 5, "line numbers survive stripping");
}

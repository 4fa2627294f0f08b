//! Generates the hooks of the `Native` family from `data/native_entry_points.txt` (every driver
//! ABI that takes a stream, and the lifetime entry points, derived from CUDA 13.0's
//! `cudaTypedefs.h` by the test `table::tests::native_entry_points_match_the_header`): for each row
//! that the hand-written table of `src/table.rs` lacks, a table row (`native_rows.rs`, the macro
//! `with_native_rows!`) and a hook with the row's C signature whose bind handler is the row's
//! class (`native_hooks.rs`, included by `src/hooks/native.rs`).
//!
//! Exported symbol names follow cuda.h's convention: a base's ABIs in version order are `base`,
//! `base_v2`, `base_v3`, ...; a per-thread row is the symbol of the newest legacy ABI at or before
//! its version plus `_ptsz`/`_ptds` (checked against cuda.h's macros by the table's
//! `header_cross_check`).

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write;

struct Row {
    base: String,
    abi: u32,
    flavor: String,
    class: String,
    stream: Option<usize>,
    params: Vec<String>,
}

/// The Rust type of a C parameter type as the driver passes it (x86-64 / aarch64 C ABI).
fn rust_type(c: &str) -> &'static str {
    if c.contains('*') {
        return "*mut c_void";
    }
    match c.trim_start_matches("const ") {
        "CUstream" => "CUstream",
        "CUdeviceptr_v2" | "CUdeviceptr" | "unsigned long long" | "cuuint64_t" => "u64",
        "CUdeviceptr_v1" | "unsigned int" | "cuuint32_t" => "u32",
        "size_t" => "usize",
        "int" | "CUdevice_v1" | "CUdevice" | "CUstreamCaptureMode" | "CUstreamAttrID" => "i32",
        "unsigned char" => "u8",
        "unsigned short" => "u16",
        "CUmemLocation_v1" | "CUmemLocation" => "MemLocation",
        "CUcontext" | "CUgraph" | "CUgraphExec" | "CUevent" | "CUarray" | "CUmemoryPool" | "CUfunction"
        | "CUmodule" | "CUlibrary" | "CUhostFn" | "CUstreamCallback" => "*mut c_void",
        other => panic!("data/native_entry_points.txt: no Rust type for the C type `{other}`; add it to build.rs"),
    }
}

fn main() {
    println!("cargo:rerun-if-changed=data/native_entry_points.txt");
    println!("cargo:rerun-if-changed=src/table.rs");
    let list = std::fs::read_to_string("data/native_entry_points.txt").expect("data/native_entry_points.txt");
    let table = std::fs::read_to_string("src/table.rs").expect("src/table.rs");
    // The hand-written rows: `[Family module symbol "base" abi Flavor]`.
    let manual: HashSet<(String, u32, String)> = table
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.trim().trim_start_matches('[').trim_end_matches(']').split_whitespace().collect();
            let ok = l.trim().starts_with('[') && w.len() == 6 && w[3].starts_with('"');
            let abi: u32 = if ok { w[4].parse().ok()? } else { return None };
            Some((w[3].trim_matches('"').to_string(), abi, w[5].to_lowercase()))
        })
        .collect();
    let rows: Vec<Row> = list
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (head, params) = l.split_once(" | ").expect("`|` in every row");
            let w: Vec<&str> = head.split_whitespace().collect();
            let c_params = params.split(", ").map(|p| {
                let (ty, name) = p.rsplit_once(' ').expect("a named C parameter");
                format!("{ty}{}", "*".repeat(name.matches('*').count()))
            });
            Row {
                base: w[0].into(),
                abi: w[1].parse().expect("an ABI version"),
                flavor: w[2].into(),
                class: w[3].into(),
                stream: w[4].parse().ok(),
                params: c_params.collect(),
            }
        })
        .collect();
    let mut legacy: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.flavor == "legacy") {
        legacy.entry(&r.base).or_default().push(r.abi);
    }
    let symbol = |r: &Row| {
        let abis = legacy.get(r.base.as_str()).map(Vec::as_slice).unwrap_or(&[]);
        let k = abis.iter().filter(|&&a| a <= r.abi).count().max(1);
        let version = if k == 1 { String::new() } else { format!("_v{k}") };
        let suffix = if r.flavor == "legacy" { String::new() } else { format!("_{}", r.flavor) };
        format!("{}{version}{suffix}", r.base)
    };
    let (mut table_rows, mut hooks) = (String::new(), String::new());
    for r in rows.iter().filter(|r| !manual.contains(&(r.base.clone(), r.abi, r.flavor.clone()))) {
        assert_ne!(r.class, "model", "{} {}: class `model` without a hand-written row", r.base, r.abi);
        let sym = symbol(r);
        let flavor = match r.flavor.as_str() {
            "ptsz" => "Ptsz",
            "ptds" => "Ptds",
            _ => "Legacy",
        };
        writeln!(table_rows, "[Native native {sym} {:?} {} {flavor}]", r.base, r.abi).unwrap();
        let args: Vec<String> = r.params.iter().enumerate().map(|(i, p)| format!("a{i}: {}", rust_type(p))).collect();
        let stream = r.stream.map_or("std::ptr::null_mut()".to_string(), |i| format!("a{i}"));
        let class = match r.class.as_str() {
            "enqueue" => "Enqueue",
            "wait" => "Wait",
            "order" => "Order",
            "query" => "Query",
            "lifetime" => "Lifetime",
            other => panic!("unknown class {other}"),
        };
        writeln!(
            hooks,
            "fn [{sym}] ({}) | h_{sym};\n#[allow(non_snake_case)]\nfn h_{sym}(id: HookId, real: &dyn Fn() -> CUresult, {}) -> CUresult {{ {} calls::native_call(id, real, {stream}, NativeClass::{class}) }}",
            args.join(", "),
            args.join(", "),
            (0..r.params.len()).map(|i| format!("let _ = a{i};")).collect::<String>(),
        )
        .unwrap();
    }
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let rows_rs = format!(
        "macro_rules! with_native_rows {{\n    ($callback:ident [$($rows:tt)*]) => {{\n        $callback! {{ $($rows)*\n{table_rows}        }}\n    }};\n}}\n"
    );
    std::fs::write(out.join("native_rows.rs"), rows_rs).unwrap();
    // Handlers are plain functions after the hook items (the macro takes one item per row).
    let (items, handlers): (Vec<&str>, Vec<&str>) = hooks.lines().partition(|l| l.starts_with("fn ["));
    let hooks_rs = format!("driver_hooks! {{\n{}\n}}\n{}\n", items.join("\n"), handlers.join("\n"));
    std::fs::write(out.join("native_hooks.rs"), hooks_rs).unwrap();
}

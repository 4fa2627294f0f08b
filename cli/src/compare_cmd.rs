//! `vitamin compare A B [C ...]`: compares determinism records (suite or application kind).
//!
//! Every record after the first is compared with the first, case by case: a case of A pairs with
//! the case of B with the same name, dtype and seed and the same variant, or any variant where one
//! side is the CPU reference (variant `cpu`). Per pair: whether the outputs agree bitwise (their
//! SHA-256), and where not (and both records kept the bytes) the number of differing elements,
//! the first differing index, the largest absolute and relative error, the largest ULP distance
//! and a ULP-distance histogram (PNG); next to it each side's within-host invariance (trials on
//! random pool nodes that were bitwise equal). Per record also whether its compile variants agree
//! with each other (FMA contraction on vs off).
//!
//! Writes `report.md`, `report.html` and `histograms/*.png` into `--out DIR`, the JSON report
//! (schema `vitamin.compare.v1`) with `--json FILE` (`-` for stdout), and a summary on stdout.
//! Exit status: 0 when every pair matched bitwise, no case lacked a partner and every
//! within-host trial was bitwise equal; 1 otherwise; 2 for usage or input errors.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::record::{Case, Invariance, Record, CPU_VARIANT};
use crate::ulp::{self, Diff};

/// Schema of the JSON report.
pub const SCHEMA: &str = "vitamin.compare.v1";

/// Options of `vitamin compare`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Records (the first is the baseline every other is compared with).
    #[arg(required = true, num_args = 2.., value_name = "RECORD")]
    records: Vec<PathBuf>,
    /// Write report.md, report.html and the histogram PNGs into this folder.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Write the JSON report to this file (`-` for stdout).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

/// One record's summary in the report.
#[derive(Debug, Clone, Serialize)]
pub struct RecordSummary {
    /// `A`, `B`, ...
    pub label: String,
    /// File it came from.
    pub file: String,
    /// Record kind.
    pub kind: String,
    /// `vendor device (backend)`.
    pub host: String,
    /// Driver.
    pub driver: String,
    /// Compiler.
    pub compiler: String,
    /// Variants and their options.
    pub variants: Vec<String>,
    /// When it was made.
    pub created_utc: String,
    /// Cases in it.
    pub cases: usize,
    /// Cases whose within-host trials were not all bitwise equal.
    pub not_invariant: Vec<String>,
    /// Per `name/dtype/seed` with several variants: whether all variants agree bitwise.
    pub variants_agree: BTreeMap<String, bool>,
}

/// One paired case.
#[derive(Debug, Clone, Serialize)]
pub struct CaseComparison {
    /// `name/dtype/seed`.
    pub key: String,
    /// Variant on A's side.
    pub variant_a: String,
    /// Variant on B's side.
    pub variant_b: String,
    /// Whether the output bytes are identical.
    pub bitwise_equal: bool,
    /// A's digest.
    pub sha256_a: String,
    /// B's digest.
    pub sha256_b: String,
    /// Element-wise comparison (`None` when equal or when a side kept no bytes).
    pub diff: Option<Diff>,
    /// Why there is no diff for a mismatch (bytes left out, lengths differ).
    pub note: Option<String>,
    /// The histogram image, relative to the report folder.
    pub histogram_png: Option<String>,
    /// A's within-host invariance.
    pub invariance_a: Option<Invariance>,
    /// B's within-host invariance.
    pub invariance_b: Option<Invariance>,
    /// A's and B's decompositions, when they differ.
    pub structure: Option<(String, String)>,
}

/// A compared with one other record.
#[derive(Debug, Clone, Serialize)]
pub struct PairReport {
    /// Baseline label.
    pub a: String,
    /// Other label.
    pub b: String,
    /// Paired cases.
    pub cases: Vec<CaseComparison>,
    /// Cases of A without a partner in B (`key [variant]`).
    pub only_in_a: Vec<String>,
    /// Cases of B without a partner in A.
    pub only_in_b: Vec<String>,
    /// Paired cases that agree bitwise.
    pub matched: usize,
    /// Paired cases that do not.
    pub mismatched: usize,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// The records.
    pub records: Vec<RecordSummary>,
    /// A against each other record.
    pub pairs: Vec<PairReport>,
    /// Everything matched (the exit status).
    pub all_match: bool,
}

fn label(i: usize) -> String {
    let mut s = String::new();
    let mut i = i;
    loop {
        s.insert(0, (b'A' + (i % 26) as u8) as char);
        if i < 26 {
            break s;
        }
        i = i / 26 - 1;
    }
}

fn summarize(label: String, file: &Path, r: &Record) -> RecordSummary {
    let mut by_key: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for c in &r.cases {
        by_key.entry(c.key()).or_default().push(&c.output.sha256);
    }
    RecordSummary {
        label,
        file: file.display().to_string(),
        kind: format!("{:?}", r.kind).to_lowercase(),
        host: format!("{} {} ({})", r.host.vendor, r.host.device, r.host.backend),
        driver: r.host.driver.clone().unwrap_or_else(|| "-".into()),
        compiler: r.host.compiler.clone(),
        variants: r.variants.iter().map(|v| format!("{} [{}]", v.name, v.options.join(" "))).collect(),
        created_utc: r.created_utc.clone(),
        cases: r.cases.len(),
        not_invariant: r
            .cases
            .iter()
            .filter(|c| c.invariance.as_ref().is_some_and(|i| i.bitwise_equal < i.runs))
            .map(|c| format!("{} [{}]", c.key(), c.variant))
            .collect(),
        variants_agree: by_key
            .into_iter()
            .filter(|(_, d)| d.len() > 1)
            .map(|(k, d)| (k, d.iter().all(|x| *x == d[0])))
            .collect(),
    }
}

fn pairs_with(a: &Case, b: &Case) -> bool {
    a.key() == b.key() && (a.variant == b.variant || a.variant == CPU_VARIANT || b.variant == CPU_VARIANT)
}

fn file_safe(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '_' }).collect()
}

/// Histogram images: `(path relative to the report folder, PNG bytes)`.
pub type Images = Vec<(String, Vec<u8>)>;

fn compare_case(a: &Case, b: &Case, pair: &str, pngs: &mut Images) -> Result<CaseComparison> {
    let bitwise_equal = a.output.sha256 == b.output.sha256 && a.output.bytes == b.output.bytes;
    let (mut diff, mut note, mut histogram_png) = (None, None, None);
    if !bitwise_equal {
        match (a.output.decode()?, b.output.decode()?) {
            (Some(x), Some(y)) => match ulp::diff(&a.output.dtype, &x, &y) {
                Ok(d) => {
                    if !d.ulp_histogram.is_empty() {
                        let name = format!(
                            "histograms/{}_{}_{}_{}.png",
                            pair,
                            file_safe(&a.key()),
                            file_safe(&a.variant),
                            file_safe(&b.variant)
                        );
                        pngs.push((name.clone(), ulp::histogram_png(&d.ulp_histogram)?));
                        histogram_png = Some(name);
                    }
                    diff = Some(d);
                }
                Err(e) => note = Some(e.to_string()),
            },
            _ => note = Some("a record left the output bytes out (digests only)".into()),
        }
        if a.output.dtype != b.output.dtype {
            note = Some(format!("dtypes differ: {} vs {}", a.output.dtype, b.output.dtype));
        }
    }
    let structure = match (&a.launch, &b.launch) {
        (Some(x), Some(y)) if x.decomposition != y.decomposition => {
            Some((x.decomposition.clone(), y.decomposition.clone()))
        }
        _ => None,
    };
    Ok(CaseComparison {
        key: a.key(),
        variant_a: a.variant.clone(),
        variant_b: b.variant.clone(),
        bitwise_equal,
        sha256_a: a.output.sha256.clone(),
        sha256_b: b.output.sha256.clone(),
        diff,
        note,
        histogram_png,
        invariance_a: a.invariance.clone(),
        invariance_b: b.invariance.clone(),
        structure,
    })
}

/// Compares `records` (labelled A, B, ...): the report and the PNGs (`(relative path, bytes)`).
pub fn compare(records: &[(PathBuf, Record)]) -> Result<(Report, Images)> {
    if records.len() < 2 {
        bail!("compare needs at least two records");
    }
    let summaries: Vec<RecordSummary> =
        records.iter().enumerate().map(|(i, (p, r))| summarize(label(i), p, r)).collect();
    let mut pngs = Vec::new();
    let mut pairs = Vec::new();
    let a = &records[0].1;
    for (i, (_, b)) in records.iter().enumerate().skip(1) {
        let pair = format!("A{}", label(i));
        let mut cases = Vec::new();
        let mut b_used = vec![false; b.cases.len()];
        let mut only_in_a = Vec::new();
        for ca in &a.cases {
            let mut found = false;
            for (j, cb) in b.cases.iter().enumerate() {
                if pairs_with(ca, cb) {
                    found = true;
                    b_used[j] = true;
                    cases.push(compare_case(ca, cb, &pair, &mut pngs)?);
                }
            }
            if !found {
                only_in_a.push(format!("{} [{}]", ca.key(), ca.variant));
            }
        }
        let only_in_b = b
            .cases
            .iter()
            .zip(&b_used)
            .filter(|(_, u)| !**u)
            .map(|(c, _)| format!("{} [{}]", c.key(), c.variant))
            .collect();
        let matched = cases.iter().filter(|c| c.bitwise_equal).count();
        pairs.push(PairReport {
            a: label(0),
            b: label(i),
            mismatched: cases.len() - matched,
            matched,
            cases,
            only_in_a,
            only_in_b,
        });
    }
    let all_match = pairs.iter().all(|p| p.mismatched == 0 && p.only_in_a.is_empty() && p.only_in_b.is_empty())
        && summaries.iter().all(|s| s.not_invariant.is_empty());
    Ok((Report { schema: SCHEMA, records: summaries, pairs, all_match }, pngs))
}

fn inv(i: &Option<Invariance>) -> String {
    i.as_ref().map_or_else(|| "-".into(), |i| format!("{}/{}", i.bitwise_equal, i.runs))
}

fn num(v: f64) -> String {
    if v.is_nan() {
        "-".into()
    } else {
        format!("{v:.3e}")
    }
}

/// One row's cells (shared by Markdown and HTML).
fn cells(c: &CaseComparison) -> Vec<String> {
    let d = c.diff.as_ref();
    vec![
        c.key.clone(),
        if c.variant_a == c.variant_b { c.variant_a.clone() } else { format!("{} / {}", c.variant_a, c.variant_b) },
        if c.bitwise_equal { "yes".into() } else { "**no**".into() },
        d.map_or_else(|| c.note.clone().unwrap_or_else(|| "-".into()), |d| format!("{}/{}", d.differing, d.elems)),
        d.and_then(|d| d.first_differing_index).map_or_else(|| "-".into(), |i| i.to_string()),
        d.map_or_else(|| "-".into(), |d| num(d.max_abs_error)),
        d.map_or_else(|| "-".into(), |d| num(d.max_rel_error)),
        d.map_or_else(|| "-".into(), |d| d.max_ulp.to_string()),
        inv(&c.invariance_a),
        inv(&c.invariance_b),
        c.structure.as_ref().map_or_else(String::new, |(a, b)| format!("{a} vs {b}")),
    ]
}

const HEADER: [&str; 11] = [
    "case",
    "variant",
    "bitwise",
    "differing",
    "first diff",
    "max abs",
    "max rel",
    "max ULP",
    "A invariance",
    "B invariance",
    "structure",
];

/// The report as Markdown (images referenced relative to the report's folder).
pub fn markdown(r: &Report) -> String {
    let mut s = String::from("# vitamin compare\n\n");
    let _ = writeln!(s, "Everything matched: **{}**\n", if r.all_match { "yes" } else { "no" });
    s += "| record | file | kind | host | driver | compiler | variants | created | cases |\n";
    s += "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
    for x in &r.records {
        let _ = writeln!(
            s,
            "| {} | `{}` | {} | {} | {} | {} | {} | {} | {} |",
            x.label,
            x.file,
            x.kind,
            x.host,
            x.driver,
            x.compiler,
            x.variants.join("; "),
            x.created_utc,
            x.cases
        );
    }
    s += "\n## Within each host\n\n";
    for x in &r.records {
        let agree = x.variants_agree.values().filter(|v| **v).count();
        let _ = writeln!(
            s,
            "- {}: trials on random pool nodes not all bitwise equal: {}; cases whose variants agree bitwise: {}/{}{}",
            x.label,
            if x.not_invariant.is_empty() { "none".to_owned() } else { x.not_invariant.join(", ") },
            agree,
            x.variants_agree.len(),
            {
                let differ: Vec<&str> =
                    x.variants_agree.iter().filter(|(_, v)| !**v).map(|(k, _)| k.as_str()).collect();
                if differ.is_empty() {
                    String::new()
                } else {
                    format!(" (differ: {})", differ.join(", "))
                }
            }
        );
    }
    for p in &r.pairs {
        let _ = writeln!(
            s,
            "\n## {} vs {}: {} of {} paired cases bitwise equal\n",
            p.a,
            p.b,
            p.matched,
            p.matched + p.mismatched
        );
        if !p.only_in_a.is_empty() {
            let _ = writeln!(s, "Only in {}: {}\n", p.a, p.only_in_a.join(", "));
        }
        if !p.only_in_b.is_empty() {
            let _ = writeln!(s, "Only in {}: {}\n", p.b, p.only_in_b.join(", "));
        }
        let _ = writeln!(s, "| {} |", HEADER.join(" | "));
        let _ = writeln!(s, "|{}", " --- |".repeat(HEADER.len()));
        for c in &p.cases {
            let _ = writeln!(s, "| {} |", cells(c).join(" | "));
        }
        for c in p.cases.iter().filter(|c| c.histogram_png.is_some()) {
            let d = c.diff.as_ref().expect("a histogram comes with a diff");
            let _ = writeln!(s, "\n### {} [{} vs {}]\n", c.key, c.variant_a, c.variant_b);
            let _ = writeln!(s, "![ULP distances]({})\n", c.histogram_png.as_deref().unwrap_or_default());
            let _ = writeln!(s, "| ULP distance | elements |\n| --- | --- |");
            for (l, n) in &d.ulp_histogram {
                let _ = writeln!(s, "| {l} | {n} |");
            }
        }
    }
    s
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The report as one HTML page (images referenced relative to it).
pub fn html(r: &Report) -> String {
    let mut s = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>vitamin compare</title><style>body{font-family:\
         sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;\
         font-size:13px}.no{background:#fdd}.yes{background:#dfd}</style></head><body><h1>vitamin compare</h1>",
    );
    let _ = write!(s, "<p>Everything matched: <b>{}</b></p><table><tr>", if r.all_match { "yes" } else { "no" });
    for h in ["record", "file", "kind", "host", "driver", "compiler", "variants", "created", "cases"] {
        let _ = write!(s, "<th>{h}</th>");
    }
    s += "</tr>";
    for x in &r.records {
        let _ = write!(s, "<tr>");
        for v in [
            &x.label,
            &x.file,
            &x.kind,
            &x.host,
            &x.driver,
            &x.compiler,
            &x.variants.join("; "),
            &x.created_utc,
            &x.cases.to_string(),
        ] {
            let _ = write!(s, "<td>{}</td>", esc(v));
        }
        s += "</tr>";
    }
    s += "</table><h2>Within each host</h2><ul>";
    for x in &r.records {
        let differ: Vec<&str> = x.variants_agree.iter().filter(|(_, v)| !**v).map(|(k, _)| k.as_str()).collect();
        let _ = write!(
            s,
            "<li>{}: trials not all bitwise equal: {}; variants differ for: {}</li>",
            esc(&x.label),
            esc(&if x.not_invariant.is_empty() { "none".to_owned() } else { x.not_invariant.join(", ") }),
            esc(&if differ.is_empty() { "none".to_owned() } else { differ.join(", ") })
        );
    }
    s += "</ul>";
    for p in &r.pairs {
        let _ = write!(
            s,
            "<h2>{} vs {}: {} of {} paired cases bitwise equal</h2>",
            p.a,
            p.b,
            p.matched,
            p.matched + p.mismatched
        );
        for (who, list) in [(&p.a, &p.only_in_a), (&p.b, &p.only_in_b)] {
            if !list.is_empty() {
                let _ = write!(s, "<p>Only in {}: {}</p>", esc(who), esc(&list.join(", ")));
            }
        }
        s += "<table><tr>";
        for h in HEADER.iter().chain(&["histogram"]) {
            let _ = write!(s, "<th>{h}</th>");
        }
        s += "</tr>";
        for c in &p.cases {
            let _ = write!(s, "<tr class=\"{}\">", if c.bitwise_equal { "yes" } else { "no" });
            for v in cells(c) {
                let _ = write!(s, "<td>{}</td>", esc(&v.replace("**", "")));
            }
            let hist = match (&c.histogram_png, &c.diff) {
                (Some(png), Some(d)) => {
                    let title: Vec<String> = d.ulp_histogram.iter().map(|(l, n)| format!("{l}: {n}")).collect();
                    format!(
                        "<img src=\"{}\" title=\"{}\"><br>{}",
                        esc(png),
                        esc(&title.join(", ")),
                        esc(&title.join(", "))
                    )
                }
                _ => String::new(),
            };
            let _ = write!(s, "<td>{hist}</td></tr>");
        }
        s += "</table>";
    }
    s += "</body></html>\n";
    s
}

/// Short text summary for the terminal.
pub fn summary(r: &Report) -> String {
    let mut s = String::new();
    for x in &r.records {
        let _ = writeln!(s, "{}: {} ({}, {} cases) {}", x.label, x.host, x.compiler, x.cases, x.file);
    }
    for x in r.records.iter().filter(|x| !x.not_invariant.is_empty()) {
        let _ = writeln!(s, "{}: not invariant across its partitions: {}", x.label, x.not_invariant.join(", "));
    }
    for p in &r.pairs {
        let _ = writeln!(
            s,
            "{} vs {}: {}/{} paired cases bitwise equal, {} only in {}, {} only in {}",
            p.a,
            p.b,
            p.matched,
            p.matched + p.mismatched,
            p.only_in_a.len(),
            p.a,
            p.only_in_b.len(),
            p.b
        );
        for c in p.cases.iter().filter(|c| !c.bitwise_equal) {
            let d = c.diff.as_ref();
            let _ = writeln!(
                s,
                "  differ: {} [{} vs {}]{}",
                c.key,
                c.variant_a,
                c.variant_b,
                d.map_or_else(
                    || format!(": {}", c.note.clone().unwrap_or_default()),
                    |d| format!(
                        ": {}/{} elements, first at {}, max ULP {}, max rel {}",
                        d.differing,
                        d.elems,
                        d.first_differing_index.map_or_else(|| "-".into(), |i| i.to_string()),
                        d.max_ulp,
                        num(d.max_rel_error)
                    )
                )
            );
        }
    }
    let _ = writeln!(s, "everything matched: {}", if r.all_match { "yes" } else { "no" });
    s
}

/// Runs `vitamin compare`; `Ok(true)` when everything matched.
pub fn run(args: &Args) -> Result<bool> {
    let records: Vec<(PathBuf, Record)> =
        args.records.iter().map(|p| Record::load(p).map(|r| (p.clone(), r))).collect::<Result<_>>()?;
    let (report, pngs) = compare(&records)?;
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir.join("histograms")).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::write(dir.join("report.md"), markdown(&report))?;
        std::fs::write(dir.join("report.html"), html(&report))?;
        for (name, bytes) in &pngs {
            std::fs::write(dir.join(name), bytes).with_context(|| format!("writing {name}"))?;
        }
    }
    let json = serde_json::to_string_pretty(&report)?;
    match &args.json {
        Some(p) if p.as_os_str() == "-" => {
            eprint!("{}", summary(&report));
            println!("{json}");
        }
        Some(p) => {
            std::fs::write(p, json).with_context(|| format!("writing {}", p.display()))?;
            print!("{}", summary(&report));
        }
        None => print!("{}", summary(&report)),
    }
    Ok(report.all_match)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Host, Output, RecordKind, Tool};

    fn rec(cases: Vec<Case>) -> Record {
        Record {
            schema: crate::record::SCHEMA.into(),
            kind: RecordKind::Application,
            created_unix_s: 0,
            created_utc: "1970-01-01T00:00:00Z".into(),
            host: Host::default(),
            tool: Tool { name: "test".into(), version: "0".into(), commit: None },
            source: None,
            variants: Vec::new(),
            config: None,
            cases,
        }
    }

    fn case(name: &str, variant: &str, vals: &[f32]) -> Case {
        let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        Case {
            name: name.into(),
            dtype: "f32".into(),
            seed: Some(1),
            variant: variant.into(),
            problem: None,
            launch: None,
            output: Output::new("f32", vec![vals.len() as u64], &bytes, true).expect("output"),
            invariance: None,
            rel_error_vs_fp64: None,
        }
    }

    #[test]
    fn labels() {
        assert_eq!([0, 1, 25, 26, 27].map(label), ["A", "B", "Z", "AA", "AB"]);
    }

    #[test]
    fn cpu_cases_pair_with_every_variant_and_mismatches_are_reported() {
        let a = rec(vec![
            case("k", "default", &[1.0, 2.0]),
            case("k", "nocontract", &[1.0, 2.5]),
            case("j", "default", &[0.0]),
        ]);
        let b = rec(vec![case("k", CPU_VARIANT, &[1.0, 2.5])]);
        let (r, pngs) = compare(&[("a".into(), a), ("b".into(), b)]).expect("compare");
        let p = &r.pairs[0];
        assert_eq!((p.matched, p.mismatched), (1, 1));
        assert_eq!(p.only_in_a, ["j/f32/seed 1 [default]"]);
        let bad = p.cases.iter().find(|c| !c.bitwise_equal).expect("a mismatch");
        let d = bad.diff.as_ref().expect("diff");
        assert_eq!((d.differing, d.first_differing_index), (1, Some(1)));
        assert!((d.max_abs_error - 0.5).abs() < 1e-12 && (d.max_rel_error - 0.25).abs() < 1e-12);
        assert!(!r.all_match);
        assert_eq!(pngs.len(), 1);
        assert!(!r.records[0].variants_agree["k/f32/seed 1"]);
        let md = markdown(&r);
        assert!(md.contains("| k/f32/seed 1 | default / cpu | **no** | 1/2 | 1 |"), "{md}");
        assert!(html(&r).contains("<tr class=\"no\">"));
    }

    #[test]
    fn identical_records_match() {
        let a = rec(vec![case("k", "app", &[1.0])]);
        let (r, pngs) = compare(&[("a".into(), a.clone()), ("b".into(), a)]).expect("compare");
        assert!(r.all_match && pngs.is_empty());
        assert!(summary(&r).ends_with("everything matched: yes\n"));
    }
}

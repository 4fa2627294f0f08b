//! The Azure LLM inference trace (2023, conversation service), shipped with the project.
//!
//! Source: Azure/AzurePublicDataset `AzureLLMInferenceTrace_conv.csv`, unmodified, CC-BY 4.0
//! (Patel et al., "Splitwise", ISCA 2024); see `runtime/data/azure-llm-2023-README.md`.

/// The trace file, embedded.
pub const AZURE_CONV_CSV: &str = include_str!("../../data/azure-llm-2023-conv.csv");

/// One request of the trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TraceRequest {
    /// Arrival, ns after the first request of the trace.
    pub arrival_ns: u64,
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Generated tokens.
    pub output_tokens: u32,
}

fn parse_time_ns(s: &str) -> Option<u64> {
    // "2023-11-16 18:15:46.6805900": the date is constant within the trace; use time of day.
    let time = s.split_whitespace().nth(1)?;
    let mut it = time.split(':');
    let h: u64 = it.next()?.parse().ok()?;
    let m: u64 = it.next()?.parse().ok()?;
    let sec = it.next()?;
    let (whole, frac) = sec.split_once('.').unwrap_or((sec, "0"));
    let whole: u64 = whole.parse().ok()?;
    let mut frac_ns = frac.to_owned();
    frac_ns.truncate(9);
    while frac_ns.len() < 9 {
        frac_ns.push('0');
    }
    let frac: u64 = frac_ns.parse().ok()?;
    Some(((h * 60 + m) * 60 + whole) * 1_000_000_000 + frac)
}

/// Parses the trace CSV (header `TIMESTAMP,ContextTokens,GeneratedTokens`). Arrivals are made
/// relative to the first request. Malformed lines are errors with their line number.
pub fn parse(csv: &str) -> Result<Vec<TraceRequest>, String> {
    let mut out = Vec::new();
    let mut t0 = None;
    for (i, line) in csv.lines().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        let bad = || format!("trace line {}: malformed: {line:?}", i + 1);
        let mut f = line.split(',');
        let t = parse_time_ns(f.next().ok_or_else(bad)?).ok_or_else(bad)?;
        let prompt = f.next().and_then(|x| x.trim().parse().ok()).ok_or_else(bad)?;
        let output = f.next().and_then(|x| x.trim().parse().ok()).ok_or_else(bad)?;
        let t0 = *t0.get_or_insert(t);
        out.push(TraceRequest { arrival_ns: t.saturating_sub(t0), prompt_tokens: prompt, output_tokens: output });
    }
    Ok(out)
}

/// The first `n` requests of the embedded trace, arrivals divided by `speedup`.
pub fn azure_conv(n: usize, speedup: f64) -> Vec<TraceRequest> {
    let mut v = parse(AZURE_CONV_CSV).expect("the embedded trace parses");
    v.truncate(n);
    for r in &mut v {
        r.arrival_ns = (r.arrival_ns as f64 / speedup) as u64;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_trace_parses_whole() {
        let v = parse(AZURE_CONV_CSV).expect("parses");
        // 19,366 data rows (the source README says 19,365; its last line has no newline).
        assert_eq!(v.len(), 19_366);
        assert_eq!(v[0], TraceRequest { arrival_ns: 0, prompt_tokens: 374, output_tokens: 44 });
        // second request: 18:15:50.9951690 - 18:15:46.6805900
        assert_eq!(v[1].arrival_ns, 4_314_579_000);
        assert!(v.windows(2).all(|w| w[0].arrival_ns <= w[1].arrival_ns), "arrivals are sorted");
    }

    #[test]
    fn malformed_lines_are_reported_with_their_number() {
        let e = parse("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,12,x\n").unwrap_err();
        assert!(e.contains("line 2"), "{e}");
    }
}

//! The determinism record: one host's outputs of the fixed-structure suite (or of an
//! application's chosen tensors), what produced them, and how invariant they were across that
//! host's partitions. `vitamin determinism --record` writes one; `scripts/vitamin_record.py`
//! writes the application kind; `vitamin compare` reads several. Format: docs/determinism.md.
//!
//! JSON, optionally gzip-compressed as a whole (a file name ending in `.gz`; readers detect the
//! gzip magic). Each output carries its SHA-256 and, unless left out, a copy of its bytes
//! (zlib, then base64). Versioned by `schema`; fields are only ever added within a version.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;

use anyhow::{bail, Context, Result};
use base64::Engine;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use vitamin_kernels_cuda::plan::Problem;

/// The schema this build writes.
pub const SCHEMA: &str = "vitamin.determinism.record.v1";
/// Encoding of [`Output::data`].
pub const ENCODING: &str = "zlib+base64";
/// The variant name of outputs that do not depend on compile options (the CPU reference): it
/// pairs with every variant of another record.
pub const CPU_VARIANT: &str = "cpu";

/// What a record holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordKind {
    /// vitamin's fixed-structure kernel suite.
    Suite,
    /// Tensors chosen by an application (`scripts/vitamin_record.py`).
    Application,
}

/// A whole record.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    /// [`SCHEMA`].
    pub schema: String,
    /// Suite or application.
    pub kind: RecordKind,
    /// Creation time, seconds since the Unix epoch.
    pub created_unix_s: u64,
    /// Creation time, `YYYY-MM-DDTHH:MM:SSZ`.
    pub created_utc: String,
    /// Where it ran.
    pub host: Host,
    /// What wrote it.
    pub tool: Tool,
    /// Hashes of the kernel source (suite records).
    #[serde(default)]
    pub source: Option<SourceInfo>,
    /// Compile-option sets the outputs were built with.
    #[serde(default)]
    pub variants: Vec<VariantInfo>,
    /// Suite settings (suite records).
    #[serde(default)]
    pub config: Option<SuiteConfig>,
    /// The outputs.
    pub cases: Vec<Case>,
}

/// The machine and software a record came from.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Host {
    /// `NVIDIA`, `AMD`, or `CPU reference` for the simulated device.
    pub vendor: String,
    /// Device name.
    pub device: String,
    /// vitamin backend (`cuda`, `hip`, `sim`) or `torch` for application records.
    pub backend: String,
    /// Driver version, where there is one.
    #[serde(default)]
    pub driver: Option<String>,
    /// Compiler and version (`NVRTC 13.0`, `hipRTC 6.2`, `rustc CPU reference`).
    pub compiler: String,
    /// Whether the device is simulated.
    #[serde(default)]
    pub simulated: bool,
    /// Host name, when readable.
    #[serde(default)]
    pub hostname: Option<String>,
    /// Anything else worth keeping (architecture, library versions).
    #[serde(default)]
    pub extra: BTreeMap<String, String>,
}

/// The program that wrote a record.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tool {
    /// `vitamin` or `vitamin_record.py`.
    pub name: String,
    /// Its version.
    pub version: String,
    /// Source commit, when known (`VITAMIN_COMMIT`).
    #[serde(default)]
    pub commit: Option<String>,
}

/// Hashes of the kernel source.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SourceInfo {
    /// SHA-256 of the shared suite source (`kernels/common/suite.cu`): equal across vendors.
    pub suite_sha256: String,
    /// Which prelude (`cuda`, `hip`, `cpu`).
    pub prelude: String,
    /// SHA-256 of the prelude text (empty for the CPU reference).
    pub prelude_sha256: String,
}

/// One compile-option set.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VariantInfo {
    /// `default`, `nocontract`, `fastmath`, or [`CPU_VARIANT`].
    pub name: String,
    /// Every option passed to the compiler.
    pub options: Vec<String>,
    /// SHA-256 of the exact text compiled (prelude + suite).
    pub source_sha256: String,
    /// What the option set means for the bits.
    #[serde(default)]
    pub note: String,
}

/// Suite settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SuiteConfig {
    /// Trials per case on random pool nodes.
    pub trials: usize,
    /// Input seeds.
    pub seeds: Vec<u64>,
    /// Whether a co-runner kept a disjoint node busy during each trial.
    pub corunner: bool,
    /// Pool nodes the trials drew from.
    pub nodes: usize,
    /// Kernels recorded with a reshaped decomposition instead of the fixed one (a test aid).
    #[serde(default)]
    pub perturbed: Vec<String>,
}

/// One output: a kernel, dtype, input seed and variant (or an application tensor).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Case {
    /// Suite kernel name, or the tensor's name.
    pub name: String,
    /// Input dtype of a suite kernel (`f32`, `bf16`, `f16`), or the tensor's dtype.
    pub dtype: String,
    /// Input seed (suite).
    #[serde(default)]
    pub seed: Option<u64>,
    /// Compile-option set ([`VariantInfo::name`]).
    pub variant: String,
    /// Problem sizes (suite).
    #[serde(default)]
    pub problem: Option<Problem>,
    /// The launches that produced it (suite).
    #[serde(default)]
    pub launch: Option<LaunchStructure>,
    /// The output.
    pub output: Output,
    /// Bitwise invariance across the host's partitions (suite).
    #[serde(default)]
    pub invariance: Option<Invariance>,
    /// `max|out - fp64| / max|fp64|` (suite).
    #[serde(default)]
    pub rel_error_vs_fp64: Option<f64>,
}

impl Case {
    /// `name/dtype/seed` (without the variant).
    pub fn key(&self) -> String {
        match self.seed {
            Some(s) => format!("{}/{}/seed {s}", self.name, self.dtype),
            None => format!("{}/{}", self.name, self.dtype),
        }
    }
}

/// The parallel structure of a suite case.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LaunchStructure {
    /// `grid 1056`, `split-K 9`, `512 threads/row`.
    pub decomposition: String,
    /// Launches in stream order.
    pub launches: Vec<LaunchInfo>,
}

/// One launch.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LaunchInfo {
    /// Kernel name.
    pub kernel: String,
    /// Grid in blocks.
    pub grid: [u32; 3],
    /// Block in threads.
    pub block: [u32; 3],
    /// Dynamic shared memory in bytes (static shared memory is part of the source).
    pub smem: u32,
}

/// Invariance of one case across the host's pool nodes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Invariance {
    /// Trials on random nodes.
    pub runs: usize,
    /// Trials bitwise equal to the whole-device output.
    pub bitwise_equal: usize,
    /// Distinct outputs seen (the whole-device one included).
    pub distinct_outputs: usize,
    /// Distinct nodes used.
    pub nodes_used: usize,
    /// Whether a co-runner ran on a disjoint node.
    pub corunner: bool,
}

/// An output's identity and (optionally) its bytes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Output {
    /// Element type of the bytes (`f32`, `bf16`, `f16`, `f64`, or another name: compared bytewise).
    pub dtype: String,
    /// Shape (row-major).
    pub shape: Vec<u64>,
    /// Byte length.
    pub bytes: u64,
    /// SHA-256 of the bytes (little-endian element order), lowercase hex.
    pub sha256: String,
    /// [`ENCODING`] when `data` is present.
    #[serde(default)]
    pub encoding: Option<String>,
    /// The bytes, zlib-compressed then base64 (standard alphabet, padded).
    #[serde(default)]
    pub data: Option<String>,
}

impl Output {
    /// Describes `bytes`, keeping a compressed copy when `keep` is set.
    pub fn new(dtype: &str, shape: Vec<u64>, bytes: &[u8], keep: bool) -> Result<Output> {
        let data = if keep {
            let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
            z.write_all(bytes)?;
            Some(base64::engine::general_purpose::STANDARD.encode(z.finish()?))
        } else {
            None
        };
        Ok(Output {
            dtype: dtype.to_owned(),
            shape,
            bytes: bytes.len() as u64,
            sha256: sha256_hex(bytes),
            encoding: keep.then(|| ENCODING.to_owned()),
            data,
        })
    }

    /// The bytes, when the record kept them; checked against the length and digest.
    pub fn decode(&self) -> Result<Option<Vec<u8>>> {
        let Some(data) = &self.data else { return Ok(None) };
        match self.encoding.as_deref() {
            Some(ENCODING) | None => {}
            Some(other) => bail!("unknown output encoding {other:?} (this build reads {ENCODING})"),
        }
        let z = base64::engine::general_purpose::STANDARD.decode(data.trim()).context("output data is not base64")?;
        let mut bytes = Vec::with_capacity(self.bytes as usize);
        flate2::read::ZlibDecoder::new(&z[..])
            .take(self.bytes.saturating_add(1))
            .read_to_end(&mut bytes)
            .context("output data is not zlib")?;
        if bytes.len() as u64 != self.bytes || sha256_hex(&bytes) != self.sha256 {
            bail!("output data does not match its length ({} bytes) and SHA-256", self.bytes);
        }
        Ok(Some(bytes))
    }
}

/// Lowercase hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// `YYYY-MM-DDTHH:MM:SSZ` for seconds since the epoch (proleptic Gregorian, UTC).
pub fn utc_string(unix_s: u64) -> String {
    let (days, secs) = ((unix_s / 86_400) as i64, unix_s % 86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", secs / 3600, secs / 60 % 60, secs % 60)
}

/// Seconds since the epoch and their UTC string.
pub fn now() -> (u64, String) {
    let s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    (s, utc_string(s))
}

/// This machine's host name, when readable.
pub fn hostname() -> Option<String> {
    std::fs::read_to_string("/etc/hostname").ok().map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
}

impl Record {
    /// Reads a record (plain or gzip-compressed JSON) and checks its schema.
    pub fn load(path: &Path) -> Result<Record> {
        let raw = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let text = if raw.starts_with(&[0x1f, 0x8b]) {
            let mut s = String::new();
            flate2::read::GzDecoder::new(&raw[..])
                .read_to_string(&mut s)
                .with_context(|| format!("{}: not valid gzip", path.display()))?;
            s
        } else {
            String::from_utf8(raw).with_context(|| format!("{}: neither gzip nor UTF-8 JSON", path.display()))?
        };
        let value: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
        match value.get("schema").and_then(|s| s.as_str()) {
            Some(SCHEMA) => {}
            Some(other) => bail!("{}: schema {other:?}, this build reads {SCHEMA}", path.display()),
            None => bail!("{}: not a vitamin determinism record (no \"schema\")", path.display()),
        }
        serde_json::from_value(value).with_context(|| format!("{}: malformed record", path.display()))
    }

    /// Writes the record as JSON, gzip-compressed when the file name ends in `.gz`.
    pub fn save(&self, path: &Path) -> Result<()> {
        let json = serde_json::to_vec_pretty(self)?;
        let bytes = if path.extension().is_some_and(|e| e == "gz") {
            let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            z.write_all(&json)?;
            z.finish()?
        } else {
            json
        };
        std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_strings() {
        assert_eq!(utc_string(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_string(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_string(1_796_139_296), "2026-12-01T15:34:56Z");
    }

    #[test]
    fn outputs_round_trip_and_detect_corruption() {
        let bytes: Vec<u8> = (0..1000u32).flat_map(|i| (i as f32).to_le_bytes()).collect();
        let o = Output::new("f32", vec![1000], &bytes, true).expect("encode");
        assert_eq!(o.sha256, sha256_hex(&bytes));
        assert_eq!(o.decode().expect("decode").as_deref(), Some(&bytes[..]));
        let mut bad = o.clone();
        bad.sha256 = sha256_hex(b"other");
        assert!(bad.decode().is_err());
        let mut bad = o.clone();
        bad.data = Some("not base64!".into());
        assert!(bad.decode().is_err());
        assert_eq!(Output::new("f32", vec![1000], &bytes, false).expect("digest only").decode().expect("ok"), None);
    }

    #[test]
    fn sha256_of_abc() {
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }
}

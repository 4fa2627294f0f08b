//! Execution-time profiles: for each recurring launch configuration, its time at every pool size.
//!
//! Policies turn profiles into the scaling curve `P(m) = T(m_min) / T(m)` (normalized progress
//! on `m` units). Profiles are measured by [`measure`] on a backend (`vitamin profile`, simulated
//! scenarios) or recorded while an application runs ([`ProfileRecorder`], bind mode's
//! `profile_out` key), stored as a versioned JSON file ([`Profiles::save`] / [`Profiles::load`];
//! bind mode's `profiles` key, `vitamin daemon --profiles`), and modelled by
//! [`Profiles::estimate_ns`] when a configuration was never profiled: the fallback is the wave model
//! `T(m) = fixed + ceil(blocks / (m * r)) * per_wave` with the launch's occupancy `r` (blocks one
//! unit holds at once, as the interposer learnt it from the driver, capped at
//! [`MODEL_RESIDENT_BLOCKS`], which is also the value when unknown) and a per-wave cost scaled from the closest profiled size of the same kernel if one
//! exists. The occupancy matters: a kernel of one block per SM sized for the whole device loses a
//! third of its rate on 116 of 132 SMs (3 waves instead of 2, `docs/results/prio-probe.md`), which
//! a model assuming 4 blocks per SM cannot see.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;
use vitamin_hal::{Backend, KernelLaunch, LaunchConfig, OpDesc, PhysicalPartition};

/// Current on-disk format version.
pub const PROFILE_FORMAT_VERSION: u32 = 1;

/// Occupancy assumed by the fallback model when the launch's is unknown (blocks per unit).
pub const MODEL_RESIDENT_BLOCKS: u64 = 4;
/// Launch overhead assumed by the fallback model, ns.
pub const MODEL_FIXED_NS: f64 = 3_000.0;
/// Per-wave time assumed by the fallback model when nothing about the kernel is known, ns.
pub const MODEL_WAVE_NS: f64 = 10_000.0;

/// Errors reading or writing profiles.
#[derive(Debug, Error)]
pub enum ProfileError {
    /// The file could not be read or written.
    #[error("profile file {path}: {source}")]
    Io {
        /// File path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The file is not valid profile JSON.
    #[error("profile file {path} is malformed: {source}")]
    Format {
        /// File path.
        path: String,
        /// Cause.
        source: serde_json::Error,
    },
    /// The file's version is not one this build reads.
    #[error("profile file {path} has format version {found}; this vitamin reads version {PROFILE_FORMAT_VERSION}: re-run `vitamin profile`")]
    Version {
        /// File path.
        path: String,
        /// Version found.
        found: u32,
    },
    /// Measuring failed on the backend.
    #[error("profiling failed: {0}")]
    Backend(#[from] vitamin_hal::HalError),
}

/// Measured times of one launch configuration, by unit count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileEntry {
    /// The configuration.
    pub config: LaunchConfig,
    /// `(units, median ns)`, ascending by units.
    pub times: Vec<(usize, f64)>,
}

impl ProfileEntry {
    /// Time on `m` units: exact if measured, else interpolated linearly in `1/m` between the
    /// neighbouring sizes (clamped at the ends).
    pub fn time_ns(&self, m: usize) -> Option<f64> {
        let t = &self.times;
        if t.is_empty() {
            return None;
        }
        match t.binary_search_by_key(&m, |&(u, _)| u) {
            Ok(i) => Some(t[i].1),
            Err(0) => Some(t[0].1),
            Err(i) if i >= t.len() => Some(t[t.len() - 1].1),
            Err(i) => {
                let ((m0, t0), (m1, t1)) = (t[i - 1], t[i]);
                let (x0, x1, x) = (1.0 / m0 as f64, 1.0 / m1 as f64, 1.0 / m as f64);
                Some(t0 + (t1 - t0) * (x - x0) / (x1 - x0))
            }
        }
    }
}

/// A profile file: device identity plus entries.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Profiles {
    /// Format version ([`PROFILE_FORMAT_VERSION`]).
    pub version: u32,
    /// Device the profiles were measured on.
    pub device: String,
    /// Entries keyed by `kernel|grid|block|smem`.
    entries: BTreeMap<String, ProfileEntry>,
}

fn key(c: &LaunchConfig) -> String {
    format!("{}|{}|{}|{}", c.kernel, c.grid, c.block, c.shared_mem_bytes)
}

impl Profiles {
    /// Empty profiles for a device.
    pub fn new(device: impl Into<String>) -> Self {
        Profiles { version: PROFILE_FORMAT_VERSION, device: device.into(), entries: BTreeMap::new() }
    }

    /// Adds or replaces an entry.
    pub fn insert(&mut self, entry: ProfileEntry) {
        self.entries.insert(key(&entry.config), entry);
    }

    /// The entry of a configuration, if profiled.
    pub fn get(&self, config: &LaunchConfig) -> Option<&ProfileEntry> {
        self.entries.get(&key(config))
    }

    /// Adds `times` (`(units, ns)`) to the entry of `config`: a size already there takes the new
    /// time; the entry is created if there is none.
    pub fn merge_times(&mut self, config: LaunchConfig, times: Vec<(usize, f64)>) {
        let entry = self.entries.entry(key(&config)).or_insert_with(|| ProfileEntry { config, times: Vec::new() });
        let mut merged: BTreeMap<usize, f64> = entry.times.iter().copied().collect();
        merged.extend(times);
        entry.times = merged.into_iter().collect();
    }

    /// Adds every entry of `other` ([`Profiles::merge_times`]: a size both hold takes `other`'s
    /// time). Profiles of two devices are not merged: `Err` names both.
    pub fn merge(&mut self, other: &Profiles) -> Result<(), String> {
        if other.device != self.device {
            return Err(format!("profiles of {:?} and {:?}: different devices", self.device, other.device));
        }
        for e in other.entries.values() {
            self.merge_times(e.config.clone(), e.times.clone());
        }
        Ok(())
    }

    /// Number of profiled configurations.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing was profiled.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Estimated time of a launch on `m` units: the profile if there is one, else the wave model.
    /// Between profiled sizes the profile is interpolated ([`ProfileEntry::time_ns`]); beyond them
    /// (an entry recorded at a few sizes only, `profile_out`) the nearest profiled time is scaled by
    /// the wave model's ratio between the two sizes, so a launch seen only on small nodes is not
    /// taken to gain nothing from wider ones.
    pub fn estimate_ns(&self, k: &KernelLaunch, m: usize) -> f64 {
        let m = m.max(1);
        if let Some(e) = self.get(&k.config()) {
            if let (Some(&(lo, t_lo)), Some(&(hi, t_hi))) = (e.times.first(), e.times.last()) {
                return if m < lo {
                    t_lo * self.model_ns(k, m) / self.model_ns(k, lo)
                } else if m > hi {
                    t_hi * self.model_ns(k, m) / self.model_ns(k, hi)
                } else {
                    e.time_ns(m).unwrap_or(t_hi)
                };
            }
        }
        self.model_ns(k, m)
    }

    /// The wave model's time of a launch on `m` units (see the module docs).
    fn model_ns(&self, k: &KernelLaunch, m: usize) -> f64 {
        let m = m.max(1);
        // The launch's occupancy where the interposer asked the driver, at most the conservative
        // guess: the model takes co-resident blocks as free, but past a few they share the unit's
        // issue slots and memory bandwidth, so a higher occupancy is not counted as more capacity
        // (it would squeeze small kernels onto fewer units than before); a lower one is, which is
        // where waves cost (one block per SM: `docs/results/prio-probe.md`).
        let resident =
            k.resident_per_unit().map_or(MODEL_RESIDENT_BLOCKS, |r| u64::from(r).clamp(1, MODEL_RESIDENT_BLOCKS));
        let waves = |units: usize| k.blocks().div_ceil(units as u64 * resident).max(1) as f64;
        // Scale from another profiled grid of the same kernel if there is one: per-wave cost carries over.
        let per_wave = self
            .entries
            .values()
            .filter(|e| e.config.kernel == k.function().name() && e.config.block == k.block())
            .find_map(|e| {
                let &(u, t) = e.times.last()?;
                let w = e.config.grid.volume().div_ceil(u as u64 * resident).max(1) as f64;
                Some(((t - MODEL_FIXED_NS).max(1.0)) / w)
            })
            .unwrap_or(MODEL_WAVE_NS);
        MODEL_FIXED_NS + waves(m) * per_wave
    }

    /// Normalized progress `P(m) = T(m_min) / T(m)` of a launch.
    pub fn progress(&self, k: &KernelLaunch, m_min: usize, m: usize) -> f64 {
        self.estimate_ns(k, m_min) / self.estimate_ns(k, m).max(1e-9)
    }

    /// Writes the profiles as pretty JSON.
    pub fn save(&self, path: &Path) -> Result<(), ProfileError> {
        let p = path.display().to_string();
        let json =
            serde_json::to_string_pretty(self).map_err(|source| ProfileError::Format { path: p.clone(), source })?;
        std::fs::write(path, json).map_err(|source| ProfileError::Io { path: p, source })
    }

    /// Reads profiles, checking the format version.
    pub fn load(path: &Path) -> Result<Self, ProfileError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ProfileError::Io { path: p.clone(), source })?;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|source| ProfileError::Format { path: p.clone(), source })?;
        let found = v.get("version").and_then(|x| x.as_u64()).unwrap_or(0) as u32;
        if found != PROFILE_FORMAT_VERSION {
            return Err(ProfileError::Version { path: p, found });
        }
        serde_json::from_value(v).map_err(|source| ProfileError::Format { path: p, source })
    }
}

/// Samples [`ProfileRecorder`] keeps per launch configuration and node size (the latest).
pub const RECORD_SAMPLES: usize = 32;

/// Execution times observed while an application ran (the `profile_out` key): per launch
/// configuration and node size, the latest [`RECORD_SAMPLES`] times, turned into a profile file's
/// entries (the median per size) by [`ProfileRecorder::to_profiles`]. The dispatcher records only
/// launches submitted to an idle lane, timed from submission to the completion it observed: their
/// times include the launch latency and the polling delay, which the median of many keeps small
/// against kernels of more than a few tens of microseconds.
#[derive(Debug, Default)]
pub struct ProfileRecorder {
    /// Index into `configs` by (function handle, grid, block, dynamic shared memory): no string
    /// is built per sample.
    index: rustc_hash::FxHashMap<(u64, [u32; 3], [u32; 3], u32), usize>,
    /// Per configuration: per node size, a ring of the latest samples.
    configs: Vec<(LaunchConfig, BTreeMap<usize, Ring>)>,
    samples: u64,
}

/// The latest samples (ns) of one configuration and size, and the slot the next one takes.
type Ring = (Vec<f64>, usize);

impl ProfileRecorder {
    /// Records one execution of `k` on a node of `units` units that took `ns`.
    pub fn record(&mut self, k: &KernelLaunch, units: usize, ns: u64) {
        let (g, b) = (k.grid(), k.block());
        let key = (k.function().handle(), [g.x, g.y, g.z], [b.x, b.y, b.z], k.shared_mem_bytes());
        let next = self.configs.len();
        let i = *self.index.entry(key).or_insert(next);
        if i == next {
            self.configs.push((k.config(), BTreeMap::new()));
        }
        let (ring, at) = self.configs[i].1.entry(units).or_insert_with(|| (Vec::with_capacity(RECORD_SAMPLES), 0));
        if ring.len() < RECORD_SAMPLES {
            ring.push(ns as f64);
        } else {
            ring[*at] = ns as f64;
        }
        *at = (*at + 1) % RECORD_SAMPLES;
        self.samples += 1;
    }

    /// Samples recorded in all.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Launch configurations recorded.
    pub fn configurations(&self) -> usize {
        self.configs.len()
    }

    /// `base` (the profiles the run started with) with the recorded medians: per configuration,
    /// each recorded size's median replaces or adds to the base's times.
    pub fn to_profiles(&self, base: &Profiles) -> Profiles {
        let mut out = base.clone();
        for (config, sizes) in &self.configs {
            let times = sizes.iter().map(|(&u, (ring, _))| (u, median(ring))).collect();
            out.merge_times(config.clone(), times);
        }
        out
    }
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => 0.0,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// Measures `launch` on each partition (one per pool size), `reps` times each after one warm-up,
/// and returns the median times. Partitions must be idle; the backend's clock is used, so on the
/// simulated device this measures the cost model exactly.
pub fn measure<B: Backend>(
    backend: &B,
    partitions: &[&B::Partition],
    launch: &KernelLaunch,
    reps: usize,
) -> Result<ProfileEntry, ProfileError> {
    let op = Arc::new(OpDesc::Kernel(launch.clone()));
    let mut times = Vec::new();
    for part in partitions {
        let mut samples = Vec::with_capacity(reps);
        for rep in 0..=reps {
            let t0 = backend.now_ns();
            part.submit(0, &op)?;
            let mut done = Vec::new();
            while done.is_empty() {
                part.poll(&mut done)?;
                if done.is_empty() {
                    backend.wait_for_progress(Duration::from_micros(50))?;
                }
            }
            if rep > 0 {
                samples.push((backend.now_ns() - t0) as f64);
            }
        }
        samples.sort_by(f64::total_cmp);
        let median = samples.get(samples.len() / 2).copied().unwrap_or(0.0);
        times.push((part.units().len(), median));
    }
    times.sort_by_key(|&(u, _)| u);
    times.dedup_by_key(|&mut (u, _)| u);
    Ok(ProfileEntry { config: launch.config(), times })
}

/// Profiles every distinct launch configuration of `launches` at every pool size of the backend
/// (one partition per distinct size, taken from the pool hierarchy), `reps` timed runs each.
/// This is the profiling mode: run it on an otherwise idle device.
pub fn profile_all<B: Backend>(backend: &B, launches: &[KernelLaunch], reps: usize) -> Result<Profiles, ProfileError> {
    let hierarchy = crate::pool::Hierarchy::build(backend.topology());
    let mut seen_sizes = std::collections::BTreeSet::new();
    let mut parts = Vec::new();
    for &id in hierarchy.nodes_by_size() {
        let node = hierarchy.node(id);
        if seen_sizes.insert(node.size()) {
            parts.push(backend.create_partition(&node.units, 1)?);
        }
    }
    let refs: Vec<&B::Partition> = parts.iter().collect();
    let mut profiles = Profiles::new(backend.topology().device_name());
    for k in launches {
        if profiles.get(&k.config()).is_none() {
            profiles.insert(measure(backend, &refs, k, reps)?);
        }
    }
    Ok(profiles)
}

#[cfg(test)]
mod tests {
    use vitamin_hal::sim::SimBackend;
    use vitamin_hal::{Dim3, KernelArgs, LaunchAttributes, UnitSet};

    use super::*;

    fn busy(b: &SimBackend, grid: u32) -> KernelLaunch {
        KernelLaunch::new(
            b.kernel("busy").expect("builtin"),
            Dim3::x(grid),
            Dim3::x(128),
            0,
            KernelArgs::pack(&[&10_000u32.to_le_bytes()]),
            LaunchAttributes::none(),
        )
    }

    proptest::proptest! {
        /// Against the plain model (every sample kept): each configuration and size recorded has
        /// the median of its latest RECORD_SAMPLES samples, and nothing else is in the profile.
        #[test]
        fn recorded_medians_match_the_latest_samples(
            samples in proptest::collection::vec((0u32..3, 0usize..3, 1u64..1_000_000), 0..200),
        ) {
            let b = SimBackend::default_device();
            let kernels: Vec<_> = [132u32, 264, 528].iter().map(|&g| busy(&b, g)).collect();
            let sizes = [8usize, 16, 132];
            let mut r = ProfileRecorder::default();
            let mut model: BTreeMap<(u32, usize), Vec<f64>> = BTreeMap::new();
            for &(k, u, ns) in &samples {
                r.record(&kernels[k as usize], sizes[u], ns);
                model.entry((k, sizes[u])).or_default().push(ns as f64);
            }
            proptest::prop_assert_eq!(r.samples(), samples.len() as u64);
            let p = r.to_profiles(&Profiles::new("sim"));
            let configs: std::collections::BTreeSet<u32> = model.keys().map(|&(k, _)| k).collect();
            proptest::prop_assert_eq!(p.len(), configs.len());
            proptest::prop_assert_eq!(r.configurations(), configs.len());
            for k in 0..3u32 {
                let want: Vec<(usize, f64)> = model
                    .iter()
                    .filter(|((kk, _), _)| *kk == k)
                    .map(|(&(_, u), all)| (u, median(&all[all.len().saturating_sub(RECORD_SAMPLES)..])))
                    .collect();
                let got = p.get(&kernels[k as usize].config()).map(|e| e.times.clone()).unwrap_or_default();
                proptest::prop_assert_eq!(got, want);
            }
        }
    }

    #[test]
    fn recorded_sizes_replace_or_add_to_the_base_profile() {
        let b = SimBackend::default_device();
        let k = busy(&b, 528);
        let mut base = Profiles::new("sim");
        base.insert(ProfileEntry { config: k.config(), times: vec![(8, 800.0), (64, 100.0)] });
        let mut r = ProfileRecorder::default();
        for ns in [50, 70, 60] {
            r.record(&k, 64, ns);
        }
        r.record(&k, 132, 40);
        let p = r.to_profiles(&base);
        assert_eq!(p.get(&k.config()).expect("entry").times, vec![(8, 800.0), (64, 60.0), (132, 40.0)]);
        // An even count takes the mean of the middle two.
        assert_eq!(median(&[1.0, 4.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn merging_profiles_of_one_device_unites_their_sizes() {
        let b = SimBackend::default_device();
        let (k, other) = (busy(&b, 528), busy(&b, 64));
        let mut a = Profiles::new("sim");
        a.insert(ProfileEntry { config: k.config(), times: vec![(8, 800.0), (64, 100.0)] });
        let mut c = Profiles::new("sim");
        c.insert(ProfileEntry { config: k.config(), times: vec![(64, 90.0), (132, 50.0)] });
        c.insert(ProfileEntry { config: other.config(), times: vec![(16, 5.0)] });
        a.merge(&c).expect("one device");
        assert_eq!(a.get(&k.config()).unwrap().times, vec![(8, 800.0), (64, 90.0), (132, 50.0)]);
        assert_eq!(a.get(&other.config()).unwrap().times, vec![(16, 5.0)]);
        let err = a.merge(&Profiles::new("another GPU")).unwrap_err();
        assert!(err.contains("another GPU") && err.contains("sim"), "{err}");
    }

    #[test]
    fn measuring_the_sim_recovers_its_wave_model() {
        let b = SimBackend::default_device();
        let parts: Vec<_> = [8usize, 16, 32, 64, 132]
            .iter()
            .map(|&m| {
                let units = if m == 132 { UnitSet::first_n(132) } else { UnitSet::first_n(m) };
                b.create_partition(&units, 1).expect("union of leaves")
            })
            .collect();
        let refs: Vec<_> = parts.iter().collect();
        let k = busy(&b, 528);
        let e = measure(&b, &refs, &k, 3).expect("measure");
        // sim: fixed 2 us + ceil(528 / (m*4)) waves of 10 us
        let expect = |m: u64| 2_000.0 + 528u64.div_ceil(m * 4) as f64 * 10_000.0;
        for &(m, t) in &e.times {
            assert!((t - expect(m as u64)).abs() <= 1.0, "m={m}: measured {t}, model {}", expect(m as u64));
        }
        let mut p = Profiles::new("sim");
        p.insert(e);
        assert!((p.progress(&k, 8, 132) - expect(8) / expect(132)).abs() < 1e-6);
    }

    #[test]
    fn interpolation_and_fallback() {
        let b = SimBackend::default_device();
        let k = busy(&b, 100);
        let mut p = Profiles::new("sim");
        assert!(p.estimate_ns(&k, 8) > p.estimate_ns(&k, 64), "model: more units, less time");
        p.insert(ProfileEntry { config: k.config(), times: vec![(8, 800.0), (16, 400.0)] });
        assert_eq!(p.estimate_ns(&k, 8), 800.0);
        let mid = p.estimate_ns(&k, 12);
        assert!(mid < 800.0 && mid > 400.0);
        // Past the largest profiled size: that time, scaled as the wave model scales (100 blocks:
        // two waves on 16 units, one on 132).
        let scaled = p.estimate_ns(&k, 132);
        assert_eq!(scaled, 400.0 * p.model_ns(&k, 132) / p.model_ns(&k, 16));
        assert!(scaled < 400.0, "wider is faster where the model says so: {scaled}");
        // Below the smallest: scaled the same way from it.
        assert_eq!(p.estimate_ns(&k, 4), 800.0 * p.model_ns(&k, 4) / p.model_ns(&k, 8));
        assert!(p.estimate_ns(&k, 4) > 800.0);
    }

    #[test]
    fn the_fallback_model_counts_waves_with_the_launch_s_occupancy() {
        let b = SimBackend::default_device();
        let p = Profiles::new("sim");
        // 264 blocks, one per SM: two full waves on 132 SMs, three on 116 (the probe's kernel shape).
        let known = busy(&b, 264).with_resident_per_unit(1);
        let wave = |m: usize| (p.estimate_ns(&known, m) - MODEL_FIXED_NS) / MODEL_WAVE_NS;
        assert_eq!(wave(132), 2.0);
        assert_eq!(wave(116), 3.0);
        assert_eq!(wave(64), 5.0);
        // Unknown occupancy: the conservative guess of 4 blocks per SM, one wave from 66 SMs on.
        let unknown = busy(&b, 264);
        assert_eq!(unknown.resident_per_unit(), None);
        assert_eq!(p.estimate_ns(&unknown, 66), p.estimate_ns(&unknown, 132));
        assert!(p.estimate_ns(&known, 66) > p.estimate_ns(&known, 132));
        // A high occupancy counts as the guess: small kernels are not squeezed onto fewer units.
        let high = busy(&b, 264).with_resident_per_unit(16);
        for m in [8, 16, 32, 66, 132] {
            assert_eq!(p.estimate_ns(&high, m), p.estimate_ns(&unknown, m));
        }
        // A profile, where there is one, wins over the model whatever the occupancy.
        let mut measured = Profiles::new("sim");
        measured.insert(ProfileEntry { config: known.config(), times: vec![(8, 900.0), (132, 300.0)] });
        assert_eq!(measured.estimate_ns(&known, 132), 300.0);
    }

    #[test]
    fn save_load_roundtrip_and_version_check() {
        let dir = std::env::temp_dir().join(format!("vitamin-profile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp");
        let path = dir.join("p.json");
        let b = SimBackend::default_device();
        let mut p = Profiles::new(b.topology().device_name());
        p.insert(ProfileEntry { config: busy(&b, 10).config(), times: vec![(8, 1.0), (16, 0.5)] });
        p.save(&path).expect("save");
        let back = Profiles::load(&path).expect("load");
        assert_eq!(back.len(), 1);
        assert_eq!(back.get(&busy(&b, 10).config()), p.get(&busy(&b, 10).config()));
        std::fs::write(&path, r#"{"version": 99, "device": "x", "entries": {}}"#).expect("write");
        assert!(matches!(Profiles::load(&path), Err(ProfileError::Version { found: 99, .. })));
        std::fs::write(&path, "not json").expect("write");
        assert!(matches!(Profiles::load(&path), Err(ProfileError::Format { .. })));
        std::fs::remove_dir_all(&dir).ok();
    }
}

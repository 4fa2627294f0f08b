//! The backend's settings, read through the process's one configuration
//! (`vitamin_runtime::config`, docs/config.md): all are configuration-file keys without an
//! environment variable. Only the runtime library's path ([`crate::driver::LIBRARY_ENV`]) stays an
//! environment variable, because the interposer and the tests choose the library per process.
//!
//! | key | default | here |
//! | --- | --- | --- |
//! | `device` | `0` | the HIP device ordinal |
//! | `max_lanes`, `max_streams` | `8`, `512` | the stream bound ([`crate::StreamLimits`]) |
//! | `fence` | `hybrid` | `memory`: `hipStreamWriteValue64` fences; `event` or `hybrid`: events |
//! | `leaf_units` | `auto` | leaf size in CUs ([`crate::probe::leaf_layout`]) |
//! | `domains` | `auto` | XCD count (else from the architecture, [`crate::probe::xcds_for`]) |
//! | `paired_units` | `auto` | WGP mode, `1`/`0` (else [`crate::probe::wgp_mode_for`]) |
//! | `rtc_library` | `auto` | the hipRTC library's path ([`crate::rtc`]) |
//! | `partitions` | `auto` | `cu-mask`, `green-context` or `auto` ([`crate::PartitionRealization`]) |
//!
//! Every parser takes the lookup as an argument (the process's configuration in the backend, a
//! map in tests); a malformed value is an error naming the key, never a silent default.

use vitamin_hal::HalError;

/// The device ordinal (a user key).
pub const DEVICE: &str = "device";
/// Most lanes one partition may have.
pub const MAX_LANES: &str = "max_lanes";
/// Most streams of all partitions together.
pub const MAX_STREAMS: &str = "max_streams";
/// How lanes are fenced (shared with the other backends: `memory`, `event`, `hybrid`).
pub const FENCE: &str = "fence";
/// Leaf size in CUs.
pub const LEAF_UNITS: &str = "leaf_units";
/// XCD count.
pub const DOMAINS: &str = "domains";
/// WGP mode (CU masks hold CU pairs).
pub const PAIRED_UNITS: &str = "paired_units";
/// Path of the hipRTC library.
pub const RTC_LIBRARY: &str = "rtc_library";

/// How partitions are realized: `auto`, `cu-mask`, `green-context` ([`crate::PartitionRealization`]).
pub const PARTITIONS: &str = "partitions";

/// Every key this backend reads that the process configuration knows.
pub const KEYS: &[&str] =
    &[DEVICE, MAX_LANES, MAX_STREAMS, FENCE, LEAF_UNITS, DOMAINS, PAIRED_UNITS, RTC_LIBRARY, PARTITIONS];

/// Keys this backend reads that are not yet keys of `vitamin_runtime::config` (which ignores
/// unknown keys, so the process configuration cannot set them; `HipBackend::with_partitions`
/// can). Each needs an `[advanced]` entry there and a row in docs/config.md, then moves to [`KEYS`].
pub const PENDING_KEYS: &[&str] = &[];

/// The process's configuration lookup.
pub fn process(key: &str) -> Option<String> {
    vitamin_runtime::config::process().get(key)
}

/// `key`'s value, trimmed; `None` when unset, empty or `auto`.
pub fn value(get: &impl Fn(&str) -> Option<String>, key: &str) -> Option<String> {
    get(key).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty() && !v.eq_ignore_ascii_case("auto"))
}

/// `key` as a whole number; `None` when unset or `auto`.
pub fn number(get: &impl Fn(&str) -> Option<String>, key: &str) -> Result<Option<usize>, HalError> {
    match value(get, key) {
        None => Ok(None),
        Some(v) => v.parse().map(Some).map_err(|_| {
            HalError::InvalidTopology(format!("configuration key {key} = {v:?} is not a whole number (or auto)"))
        }),
    }
}

/// `key` as a boolean (`1`/`0`, `true`/`false`, `yes`/`no`, `on`/`off`); `None` when unset or
/// `auto`.
pub fn flag(get: &impl Fn(&str) -> Option<String>, key: &str) -> Result<Option<bool>, HalError> {
    match value(get, key).map(|v| v.to_ascii_lowercase()).as_deref() {
        None => Ok(None),
        Some("1" | "true" | "yes" | "on") => Ok(Some(true)),
        Some("0" | "false" | "no" | "off") => Ok(Some(false)),
        Some(v) => Err(HalError::InvalidTopology(format!("configuration key {key} = {v:?}: use 1, 0 or auto"))),
    }
}

/// A lookup over `pairs`, for tests of the parsers.
#[cfg(test)]
pub(crate) fn map(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let m: std::collections::HashMap<String, String> =
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    move |k| m.get(k).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_a_configuration_key_without_an_environment_variable() {
        for key in KEYS {
            let k = vitamin_runtime::config::KEYS.iter().find(|k| k.name == *key);
            let k = k.unwrap_or_else(|| panic!("{key} is read but is not a configuration key"));
            assert_eq!(k.env, None, "{key} should be set in the file only");
        }
    }

    /// Fails once the runtime learns a pending key: then it belongs in [`KEYS`].
    #[test]
    fn pending_keys_are_not_yet_configuration_keys() {
        for key in PENDING_KEYS {
            assert!(
                !vitamin_runtime::config::KEYS.iter().any(|k| k.name == *key),
                "{key} is now a configuration key: move it to KEYS"
            );
            assert_eq!(process(key), None, "the process configuration cannot set {key}");
        }
    }

    #[test]
    fn values_parse_or_say_which_key_is_wrong() {
        let get = map(&[("max_streams", " 24 "), ("leaf_units", "auto"), ("domains", "x"), ("paired_units", "1")]);
        assert_eq!(number(&get, MAX_STREAMS), Ok(Some(24)));
        assert_eq!(number(&get, LEAF_UNITS), Ok(None));
        assert_eq!(number(&get, MAX_LANES), Ok(None));
        let e = number(&get, DOMAINS).unwrap_err().to_string();
        assert!(e.contains("domains") && e.contains("\"x\""), "{e}");
        assert_eq!(flag(&get, PAIRED_UNITS), Ok(Some(true)));
        assert_eq!(flag(&map(&[("paired_units", "OFF")]), PAIRED_UNITS), Ok(Some(false)));
        assert!(flag(&get, DOMAINS).unwrap_err().to_string().contains("domains"));
        assert_eq!(value(&map(&[("rtc_library", " /x/librtc.so ")]), RTC_LIBRARY).as_deref(), Some("/x/librtc.so"));
    }
}

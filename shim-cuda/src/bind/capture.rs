//! Descriptor capture, CUDA's part: the `extra` array and the launch attributes of
//! `cuLaunchKernel(Ex)`, decoded into the pieces the client runtime's capture rules
//! ([`vitamin_runtime::client::capture`], re-exported here) take.
//!
//! - **`extra`**: the application's packed buffer (`CU_LAUNCH_PARAM_BUFFER_POINTER` /
//!   `CU_LAUNCH_PARAM_BUFFER_SIZE`, parsed by [`parse_extra`]) is copied whole and described by the
//!   function's layout ([`args_from_buffer`]).
//! - **Attributes** ([`decode_attributes`]): each `CUlaunchAttribute` is deep-copied (all 64 value
//!   bytes). Cooperative, cluster-dimension and priority attributes become the structured fields the
//!   dispatcher checks (a cooperative or cluster launch only fits some partitions); every other id
//!   is kept raw and re-submitted unchanged. Attributes that make the driver signal an event
//!   (programmatic event, launch-completion event) are not modelled: such a launch passes through.
//!   A cooperative grid the device cannot hold makes the driver answer
//!   `CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE` natively.
#![forbid(unsafe_code)]

use smallvec::SmallVec;
use vitamin_hal::{Dim3, LaunchAttributes, RawAttribute};

pub use vitamin_runtime::client::capture::*;

/// `CU_LAUNCH_PARAM_END`.
pub const LAUNCH_PARAM_END: usize = 0;
/// `CU_LAUNCH_PARAM_BUFFER_POINTER`.
pub const LAUNCH_PARAM_BUFFER_POINTER: usize = 1;
/// `CU_LAUNCH_PARAM_BUFFER_SIZE`.
pub const LAUNCH_PARAM_BUFFER_SIZE: usize = 2;
/// Most `extra` entries read before giving up (a well-formed array has at most five words).
pub const MAX_EXTRA_WORDS: usize = 64;

/// `CU_LAUNCH_ATTRIBUTE_COOPERATIVE`.
pub const ATTR_COOPERATIVE: u32 = 2;
/// `CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`.
pub const ATTR_CLUSTER_DIMENSION: u32 = 4;
/// `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT`: the driver records an application event.
pub const ATTR_PROGRAMMATIC_EVENT: u32 = 7;
/// `CU_LAUNCH_ATTRIBUTE_PRIORITY`.
pub const ATTR_PRIORITY: u32 = 8;
/// `CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT`: the driver records an application event.
pub const ATTR_LAUNCH_COMPLETION_EVENT: u32 = 12;

/// Block limits (all current NVIDIA GPUs): x and y up to 1024 threads, z up to 64; grid limits:
/// x up to 2^31 - 1 blocks, y and z up to 65535.
pub const SHAPE: ShapeLimits = ShapeLimits { max_block: [1024, 1024, 64], max_grid: [i32::MAX as u32, 65535, 65535] };

/// Where the `extra` array's buffer and its size live (application addresses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtraBuffer {
    /// Value of `CU_LAUNCH_PARAM_BUFFER_POINTER`: the packed argument buffer.
    pub buffer: usize,
    /// Value of `CU_LAUNCH_PARAM_BUFFER_SIZE`: a pointer to a `size_t` holding its size.
    pub size_ptr: usize,
}

/// Parses the words of a launch's `extra` array: `(key, value)` pairs up to `CU_LAUNCH_PARAM_END`.
/// Consumes the iterator only up to the terminator (the caller reads application memory lazily).
pub fn parse_extra(words: impl IntoIterator<Item = usize>) -> Result<ExtraBuffer, Decline> {
    let mut it = words.into_iter().take(MAX_EXTRA_WORDS);
    let (mut buffer, mut size_ptr) = (None, None);
    loop {
        match it.next() {
            None => {
                return Err(Decline::Unmodelled(format!("extra array without an end within {MAX_EXTRA_WORDS} words")))
            }
            Some(LAUNCH_PARAM_END) => break,
            Some(key @ (LAUNCH_PARAM_BUFFER_POINTER | LAUNCH_PARAM_BUFFER_SIZE)) => {
                let Some(value) = it.next() else {
                    return Err(Decline::Unmodelled("extra array ends inside a key/value pair".into()));
                };
                let slot = if key == LAUNCH_PARAM_BUFFER_POINTER { &mut buffer } else { &mut size_ptr };
                if slot.replace(value).is_some() {
                    return Err(Decline::Unmodelled(format!("extra array repeats key {key}")));
                }
            }
            Some(key) => return Err(Decline::Invalid(format!("unknown extra key {key:#x}"))),
        }
    }
    match (buffer, size_ptr) {
        (Some(buffer), Some(size_ptr)) if buffer != 0 && size_ptr != 0 => Ok(ExtraBuffer { buffer, size_ptr }),
        _ => Err(Decline::Unmodelled("extra array without both a buffer pointer and a size".into())),
    }
}

/// One `CUlaunchAttribute` as the application passed it: its id and all 64 value bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttributeBytes {
    /// `CUlaunchAttributeID`.
    pub id: u32,
    /// `CUlaunchAttributeValue` (a 64-byte union).
    pub value: [u8; 64],
}

fn i32_at(v: &[u8; 64], at: usize) -> i32 {
    i32::from_le_bytes([v[at], v[at + 1], v[at + 2], v[at + 3]])
}
fn u32_at(v: &[u8; 64], at: usize) -> u32 {
    u32::from_le_bytes([v[at], v[at + 1], v[at + 2], v[at + 3]])
}

/// Deep-copies a launch's attributes. `cooperative_entry` is set for `cuLaunchCooperativeKernel`.
pub fn decode_attributes(attrs: &[AttributeBytes], cooperative_entry: bool) -> Result<LaunchAttributes, Decline> {
    let mut cooperative = cooperative_entry;
    let (mut cluster, mut priority) = (None, None);
    let mut seen_structured = [false; 3];
    let mut raw = Vec::new();
    for a in attrs {
        let structured = match a.id {
            ATTR_COOPERATIVE if i32_at(&a.value, 0) != 0 => Some(0),
            ATTR_CLUSTER_DIMENSION => Some(1),
            ATTR_PRIORITY => Some(2),
            ATTR_PROGRAMMATIC_EVENT | ATTR_LAUNCH_COMPLETION_EVENT => {
                return Err(Decline::Unmodelled(format!("launch attribute {} makes the driver record an event", a.id)))
            }
            _ => None,
        };
        match structured {
            Some(slot) => {
                if std::mem::replace(&mut seen_structured[slot], true) {
                    return Err(Decline::Unmodelled(format!("launch attribute {} given twice", a.id)));
                }
                match slot {
                    0 => cooperative = true,
                    1 => {
                        let d = Dim3::new(u32_at(&a.value, 0), u32_at(&a.value, 4), u32_at(&a.value, 8));
                        if d.volume() == 0 {
                            return Err(Decline::Invalid(format!("cluster dimension {d} has a zero extent")));
                        }
                        cluster = Some(d);
                    }
                    _ => priority = Some(i32_at(&a.value, 0)),
                }
            }
            None => raw.push(RawAttribute { id: a.id, value: SmallVec::from_slice(&a.value) }),
        }
    }
    Ok(LaunchAttributes::new(cooperative, cluster, priority, raw))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_arrays() {
        let ok = parse_extra([1, 0x1000, 2, 0x2000, 0, 99]).unwrap();
        assert_eq!(ok, ExtraBuffer { buffer: 0x1000, size_ptr: 0x2000 });
        assert_eq!(parse_extra([2, 0x2000, 1, 0x1000, 0]).unwrap(), ok, "any order");
        assert!(matches!(parse_extra([1, 0x1000, 0]), Err(Decline::Unmodelled(_))), "no size");
        assert!(matches!(parse_extra([0]), Err(Decline::Unmodelled(_))), "empty");
        assert!(matches!(parse_extra([5, 1, 0]), Err(Decline::Invalid(_))), "unknown key");
        assert!(matches!(parse_extra([1, 0x1000, 1, 0x1000, 2, 8, 0]), Err(Decline::Unmodelled(_))), "repeated");
        assert!(matches!(parse_extra([1]), Err(Decline::Unmodelled(_))), "truncated pair");
        assert!(matches!(parse_extra(std::iter::repeat(1usize)), Err(Decline::Unmodelled(_))), "no terminator");
        // Stops reading at the terminator.
        let mut read = 0;
        let words = [1usize, 0x1000, 2, 0x2000, 0, 7, 7, 7];
        parse_extra(words.iter().map(|w| {
            read += 1;
            *w
        }))
        .unwrap();
        assert_eq!(read, 5);
    }

    fn attr(id: u32, v: &[u8]) -> AttributeBytes {
        let mut value = [0u8; 64];
        value[..v.len()].copy_from_slice(v);
        AttributeBytes { id, value }
    }

    #[test]
    fn attributes_are_deep_copied_and_classified() {
        let mut cluster = Vec::new();
        for x in [2u32, 1, 1] {
            cluster.extend_from_slice(&x.to_le_bytes());
        }
        let mut tail = [0u8; 64];
        tail[63] = 0xab;
        let a = decode_attributes(
            &[
                attr(ATTR_COOPERATIVE, &1i32.to_le_bytes()),
                attr(ATTR_CLUSTER_DIMENSION, &cluster),
                attr(ATTR_PRIORITY, &(-3i32).to_le_bytes()),
                AttributeBytes { id: 10, value: tail },
            ],
            false,
        )
        .unwrap();
        assert!(a.cooperative());
        assert_eq!(a.cluster(), Some(Dim3::new(2, 1, 1)));
        assert_eq!(a.priority(), Some(-3));
        assert_eq!(a.raw().len(), 1);
        assert_eq!(a.raw()[0].id, 10);
        assert_eq!(a.raw()[0].value.len(), 64, "all 64 value bytes");
        assert_eq!(a.raw()[0].value[63], 0xab);
        // cooperative = 0 is kept raw (no constraint, passed on unchanged).
        let off = decode_attributes(&[attr(ATTR_COOPERATIVE, &0i32.to_le_bytes())], false).unwrap();
        assert!(!off.cooperative());
        assert_eq!(off.raw()[0].id, ATTR_COOPERATIVE);
        assert!(decode_attributes(&[], true).unwrap().cooperative(), "cuLaunchCooperativeKernel");
        assert!(matches!(decode_attributes(&[attr(7, &[1])], false), Err(Decline::Unmodelled(_))));
        assert!(matches!(decode_attributes(&[attr(12, &[1])], false), Err(Decline::Unmodelled(_))));
        assert!(matches!(
            decode_attributes(&[attr(ATTR_PRIORITY, &[1]), attr(ATTR_PRIORITY, &[2])], false),
            Err(Decline::Unmodelled(_))
        ));
        assert!(matches!(
            decode_attributes(&[attr(ATTR_CLUSTER_DIMENSION, &[0; 12])], false),
            Err(Decline::Invalid(_))
        ));
    }
}

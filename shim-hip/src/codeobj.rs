//! Kernel parameter layouts from AMD GPU code objects: what bind mode needs on runtimes without
//! `hipKernelGetParamInfo` (every HIP before ROCm 7).
//!
//! A code object is an ELF64 file whose `NT_AMDGPU_METADATA` note (owner `AMDGPU`, type 32,
//! code object v3 and later) holds a MessagePack map; its `amdhsa.kernels` array has one map per
//! kernel with `.name` and `.args`, each argument a map with `.offset`, `.size` and
//! `.value_kind`. Arguments whose kind starts with `hidden_` are appended by the runtime, not
//! passed by the application, and are left out. Images reach the runtime as a bare code object
//! (`hipModuleLoadData`) or inside a clang offload bundle (`__CLANG_OFFLOAD_BUNDLE__`: one code
//! object per GPU target), which hipcc's start-up code registers through a fat-binary wrapper
//! (`__hipRegisterFatBinary`, magic `HIPF`).
//!
//! Everything here is plain Rust over byte slices (or a bounded reader for an image of unknown
//! length): malformed input yields `None` or an empty table, never a panic (property-tested).
//! Compressed bundles (`CCOB`, ROCm 6.2+) are not read.
#![forbid(unsafe_code)]

use std::collections::HashMap;

use vitamin_hal::ParamLayout;

/// The parameter layouts of the kernels of one image, by kernel name.
pub type Layouts = HashMap<String, Vec<ParamLayout>>;

/// `\x7fELF`.
const ELF_MAGIC: &[u8; 4] = b"\x7fELF";
/// The offload bundle's magic.
pub const BUNDLE_MAGIC: &[u8; 24] = b"__CLANG_OFFLOAD_BUNDLE__";
/// The fat-binary wrapper's magic (`HIPF`).
pub const FATBIN_MAGIC: u32 = 0x4849_5046;
/// `NT_AMDGPU_METADATA`.
const NT_AMDGPU_METADATA: u32 = 32;
/// Images larger than this are not read (a bound against garbage headers).
pub const MAX_IMAGE: usize = 1 << 30;
/// Deepest MessagePack nesting read.
const MAX_DEPTH: usize = 32;

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at.checked_add(2)?)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

/// Reads `len` bytes at `offset` of an image whose length is not known yet (`None`: not
/// readable). The interposer's reader addresses the image the runtime accepted.
pub trait Reader {
    /// The bytes, or `None`.
    fn read(&self, offset: usize, len: usize) -> Option<&[u8]>;
}

impl Reader for [u8] {
    fn read(&self, offset: usize, len: usize) -> Option<&[u8]> {
        self.get(offset..offset.checked_add(len)?)
    }
}

/// The length of the ELF64 little-endian image at the start of `r`: the end of its section
/// header table, sections and program segments, whichever is last.
pub fn elf_extent(r: &(impl Reader + ?Sized)) -> Option<usize> {
    let h = r.read(0, 64)?;
    if &h[..4] != ELF_MAGIC || h[4] != 2 || h[5] != 1 {
        return None;
    }
    let (phoff, shoff) = (u64_at(h, 0x20)? as usize, u64_at(h, 0x28)? as usize);
    let (phentsize, phnum) = (u16_at(h, 0x36)? as usize, u16_at(h, 0x38)? as usize);
    let (shentsize, shnum) = (u16_at(h, 0x3a)? as usize, u16_at(h, 0x3c)? as usize);
    let mut end = 64usize;
    if shnum > 0 {
        if shentsize < 64 {
            return None;
        }
        let table = shnum.checked_mul(shentsize)?;
        end = end.max(shoff.checked_add(table)?);
        if end > MAX_IMAGE {
            return None;
        }
        let t = r.read(shoff, table)?;
        for i in 0..shnum {
            let s = &t[i * shentsize..];
            const SHT_NOBITS: u32 = 8;
            if u32_at(s, 4)? != SHT_NOBITS {
                end = end.max((u64_at(s, 24)? as usize).checked_add(u64_at(s, 32)? as usize)?);
            }
        }
    }
    if phnum > 0 {
        if phentsize < 56 {
            return None;
        }
        let table = phnum.checked_mul(phentsize)?;
        end = end.max(phoff.checked_add(table)?);
        if end > MAX_IMAGE {
            return None;
        }
        let t = r.read(phoff, table)?;
        for i in 0..phnum {
            let p = &t[i * phentsize..];
            end = end.max((u64_at(p, 8)? as usize).checked_add(u64_at(p, 32)? as usize)?);
        }
    }
    (end <= MAX_IMAGE).then_some(end)
}

/// One entry of an offload bundle: its target triple, offset and size in the bundle.
pub type BundleEntry = (String, usize, usize);

/// The code objects of an offload bundle at the start of `r`: every entry, and the bundle's
/// length.
pub fn bundle_entries(r: &(impl Reader + ?Sized)) -> Option<(Vec<BundleEntry>, usize)> {
    if r.read(0, 24)? != BUNDLE_MAGIC {
        return None;
    }
    let n = u64_at(r.read(24, 8)?, 0)? as usize;
    if n > 4096 {
        return None;
    }
    let (mut at, mut end, mut entries) = (32usize, 32usize, Vec::with_capacity(n));
    for _ in 0..n {
        let e = r.read(at, 24)?;
        let (offset, size, tlen) = (u64_at(e, 0)? as usize, u64_at(e, 8)? as usize, u64_at(e, 16)? as usize);
        if tlen > 4096 {
            return None;
        }
        let triple = String::from_utf8_lossy(r.read(at + 24, tlen)?).into_owned();
        at = at.checked_add(24 + tlen)?;
        end = end.max(at).max(offset.checked_add(size)?);
        if end > MAX_IMAGE {
            return None;
        }
        entries.push((triple, offset, size));
    }
    Some((entries, end))
}

/// The length of the image (a code object or an offload bundle) at the start of `r`.
pub fn image_extent(r: &(impl Reader + ?Sized)) -> Option<usize> {
    match r.read(0, 4)? {
        m if m == ELF_MAGIC => elf_extent(r),
        m if m == &BUNDLE_MAGIC[..4] => bundle_entries(r).map(|(_, end)| end),
        _ => None,
    }
}

/// The kernel layouts of a whole image (a code object, or every GPU code object of a bundle).
/// A kernel whose layout differs between two code objects of the bundle is left out.
pub fn image_layouts(image: &[u8]) -> Layouts {
    if image.starts_with(ELF_MAGIC) {
        return elf_layouts(image);
    }
    let Some((entries, _)) = bundle_entries(image) else { return Layouts::new() };
    let mut all = Layouts::new();
    let mut conflicting = Vec::new();
    for (triple, offset, size) in entries {
        if !triple.contains("amdgcn") || size == 0 {
            continue;
        }
        let Some(co) = image.get(offset..offset.saturating_add(size)) else { continue };
        for (name, layout) in elf_layouts(co) {
            match all.get(&name) {
                Some(l) if *l != layout => conflicting.push(name),
                _ => {
                    all.insert(name, layout);
                }
            }
        }
    }
    for name in conflicting {
        all.remove(&name);
    }
    all
}

/// The kernel layouts of one code object (its metadata notes, in sections or segments).
pub fn elf_layouts(elf: &[u8]) -> Layouts {
    let mut out = Layouts::new();
    for desc in metadata_notes(elf) {
        if let Some(v) = Value::parse(desc) {
            kernels_from_metadata(&v, &mut out);
        }
    }
    out
}

/// The descriptors of the `NT_AMDGPU_METADATA` notes of an ELF64 image.
fn metadata_notes(elf: &[u8]) -> Vec<&[u8]> {
    let mut regions = Vec::new();
    let (Some(shoff), Some(shentsize), Some(shnum)) = (u64_at(elf, 0x28), u16_at(elf, 0x3a), u16_at(elf, 0x3c)) else {
        return Vec::new();
    };
    if !elf.starts_with(ELF_MAGIC) {
        return Vec::new();
    }
    const SHT_NOTE: u32 = 7;
    for i in 0..shnum as usize {
        let at = (shoff as usize).saturating_add(i.saturating_mul(shentsize as usize));
        if let (Some(SHT_NOTE), Some(off), Some(size)) =
            (u32_at(elf, at + 4), u64_at(elf, at + 24), u64_at(elf, at + 32))
        {
            regions.push((off as usize, size as usize));
        }
    }
    if regions.is_empty() {
        const PT_NOTE: u32 = 4;
        if let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(elf, 0x20), u16_at(elf, 0x36), u16_at(elf, 0x38)) {
            for i in 0..phnum as usize {
                let at = (phoff as usize).saturating_add(i.saturating_mul(phentsize as usize));
                if let (Some(PT_NOTE), Some(off), Some(size)) =
                    (u32_at(elf, at), u64_at(elf, at + 8), u64_at(elf, at + 32))
                {
                    regions.push((off as usize, size as usize));
                }
            }
        }
    }
    let mut out = Vec::new();
    for (off, size) in regions {
        let Some(notes) = elf.get(off..off.saturating_add(size)) else { continue };
        let mut at = 0usize;
        while let (Some(namesz), Some(descsz), Some(kind)) =
            (u32_at(notes, at), u32_at(notes, at + 4), u32_at(notes, at + 8))
        {
            let (namesz, descsz) = (namesz as usize, descsz as usize);
            let name_at = at + 12;
            let desc_at = name_at.saturating_add(namesz.saturating_add(3) & !3);
            let next = desc_at.saturating_add(descsz.saturating_add(3) & !3);
            let (Some(name), Some(desc)) = (
                notes.get(name_at..name_at.saturating_add(namesz)),
                notes.get(desc_at..desc_at.saturating_add(descsz)),
            ) else {
                break;
            };
            if kind == NT_AMDGPU_METADATA && name.strip_suffix(b"\0").unwrap_or(name) == b"AMDGPU" {
                out.push(desc);
            }
            if next <= at {
                break;
            }
            at = next;
        }
    }
    out
}

/// Adds the kernels of a metadata map (`amdhsa.kernels`) to `out`.
fn kernels_from_metadata(v: &Value, out: &mut Layouts) {
    let Some(Value::Array(kernels)) = v.get("amdhsa.kernels") else { return };
    'kernel: for k in kernels {
        let Some(Value::Str(name)) = k.get(".name") else { continue };
        let mut layout = Vec::new();
        if let Some(Value::Array(args)) = k.get(".args") {
            for a in args {
                let kind = match a.get(".value_kind") {
                    Some(Value::Str(s)) => s.as_str(),
                    _ => continue 'kernel,
                };
                if kind.starts_with("hidden_") {
                    continue;
                }
                let (Some(offset), Some(size)) =
                    (a.get(".offset").and_then(Value::as_u32), a.get(".size").and_then(Value::as_u32))
                else {
                    continue 'kernel;
                };
                layout.push(ParamLayout { offset, size });
            }
        }
        out.insert(name.clone(), layout);
    }
}

/// A MessagePack value (what the metadata uses).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// nil.
    Nil,
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i128),
    /// A float.
    Float(f64),
    /// A string.
    Str(String),
    /// Binary data or an extension.
    Bin(Vec<u8>),
    /// An array.
    Array(Vec<Value>),
    /// A map, in order.
    Map(Vec<(Value, Value)>),
}

impl Value {
    /// The one value of `bytes` (trailing bytes ignored), `None` if malformed.
    pub fn parse(bytes: &[u8]) -> Option<Value> {
        let mut at = 0;
        read_value(bytes, &mut at, 0)
    }

    /// The value of string key `key` of a map.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Map(m) => m.iter().find(|(k, _)| matches!(k, Value::Str(s) if s == key)).map(|(_, v)| v),
            _ => None,
        }
    }

    /// A non-negative integer that fits 32 bits.
    pub fn as_u32(&self) -> Option<u32> {
        match self {
            Value::Int(i) => u32::try_from(*i).ok(),
            _ => None,
        }
    }

    /// The MessagePack encoding (for tests and the test double's code objects).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Value::Nil => out.push(0xc0),
            Value::Bool(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
            Value::Int(i) if (0..=0x7f).contains(i) => out.push(*i as u8),
            Value::Int(i) if (-32..0).contains(i) => out.push(*i as i8 as u8),
            Value::Int(i) if *i >= 0 => {
                out.push(0xcf);
                out.extend_from_slice(&(*i as u64).to_be_bytes());
            }
            Value::Int(i) => {
                out.push(0xd3);
                out.extend_from_slice(&(*i as i64).to_be_bytes());
            }
            Value::Float(f) => {
                out.push(0xcb);
                out.extend_from_slice(&f.to_be_bytes());
            }
            Value::Str(s) => {
                out.push(0xdb);
                out.extend_from_slice(&(s.len() as u32).to_be_bytes());
                out.extend_from_slice(s.as_bytes());
            }
            Value::Bin(b) => {
                out.push(0xc6);
                out.extend_from_slice(&(b.len() as u32).to_be_bytes());
                out.extend_from_slice(b);
            }
            Value::Array(a) => {
                out.push(0xdd);
                out.extend_from_slice(&(a.len() as u32).to_be_bytes());
                a.iter().for_each(|v| v.encode(out));
            }
            Value::Map(m) => {
                out.push(0xdf);
                out.extend_from_slice(&(m.len() as u32).to_be_bytes());
                for (k, v) in m {
                    k.encode(out);
                    v.encode(out);
                }
            }
        }
    }
}

fn take<'a>(b: &'a [u8], at: &mut usize, n: usize) -> Option<&'a [u8]> {
    let s = b.get(*at..at.checked_add(n)?)?;
    *at += n;
    Some(s)
}

fn be(b: &[u8]) -> u64 {
    b.iter().fold(0u64, |a, &x| (a << 8) | u64::from(x))
}

fn read_len(b: &[u8], at: &mut usize, bytes: usize) -> Option<usize> {
    usize::try_from(be(take(b, at, bytes)?)).ok()
}

fn read_value(b: &[u8], at: &mut usize, depth: usize) -> Option<Value> {
    if depth > MAX_DEPTH {
        return None;
    }
    let tag = *take(b, at, 1)?.first()?;
    let str_of = |b: &[u8], at: &mut usize, n: usize| {
        take(b, at, n).map(|s| Value::Str(String::from_utf8_lossy(s).into_owned()))
    };
    let bin_of = |b: &[u8], at: &mut usize, n: usize| take(b, at, n).map(|s| Value::Bin(s.to_vec()));
    // Containers hold at least one byte per element: a count beyond the rest is malformed.
    let array = |b: &[u8], at: &mut usize, n: usize| -> Option<Value> {
        if n > b.len().saturating_sub(*at) {
            return None;
        }
        (0..n).map(|_| read_value(b, at, depth + 1)).collect::<Option<Vec<_>>>().map(Value::Array)
    };
    let map = |b: &[u8], at: &mut usize, n: usize| -> Option<Value> {
        if n.saturating_mul(2) > b.len().saturating_sub(*at) {
            return None;
        }
        (0..n)
            .map(|_| Some((read_value(b, at, depth + 1)?, read_value(b, at, depth + 1)?)))
            .collect::<Option<Vec<_>>>()
            .map(Value::Map)
    };
    Some(match tag {
        0x00..=0x7f => Value::Int(i128::from(tag)),
        0x80..=0x8f => map(b, at, usize::from(tag & 0x0f))?,
        0x90..=0x9f => array(b, at, usize::from(tag & 0x0f))?,
        0xa0..=0xbf => str_of(b, at, usize::from(tag & 0x1f))?,
        0xc0 => Value::Nil,
        0xc2 => Value::Bool(false),
        0xc3 => Value::Bool(true),
        0xc4..=0xc6 => {
            let n = read_len(b, at, 1 << (tag - 0xc4))?;
            bin_of(b, at, n)?
        }
        0xc7..=0xc9 => {
            let n = read_len(b, at, 1 << (tag - 0xc7))?;
            take(b, at, 1)?;
            bin_of(b, at, n)?
        }
        0xca => Value::Float(f64::from(f32::from_bits(be(take(b, at, 4)?) as u32))),
        0xcb => Value::Float(f64::from_bits(be(take(b, at, 8)?))),
        0xcc..=0xcf => Value::Int(i128::from(be(take(b, at, 1 << (tag - 0xcc))?))),
        0xd0..=0xd3 => {
            let n = 1usize << (tag - 0xd0);
            let raw = be(take(b, at, n)?);
            let shift = 64 - 8 * n as u32;
            Value::Int(i128::from(((raw << shift) as i64) >> shift))
        }
        0xd4..=0xd8 => {
            take(b, at, 1)?;
            bin_of(b, at, 1 << (tag - 0xd4))?
        }
        0xd9..=0xdb => {
            let n = read_len(b, at, 1 << (tag - 0xd9))?;
            str_of(b, at, n)?
        }
        0xdc | 0xdd => {
            let n = read_len(b, at, if tag == 0xdc { 2 } else { 4 })?;
            array(b, at, n)?
        }
        0xde | 0xdf => {
            let n = read_len(b, at, if tag == 0xde { 2 } else { 4 })?;
            map(b, at, n)?
        }
        0xe0..=0xff => Value::Int(i128::from(tag as i8)),
        0xc1 => return None,
    })
}

/// Builds images in the formats above (tests, and the HIP test's code objects).
pub mod build {
    use super::*;

    /// The metadata map of `kernels` (name, visible parameters), each kernel followed by the
    /// runtime's hidden arguments.
    pub fn metadata(kernels: &[(&str, &[ParamLayout])]) -> Vec<u8> {
        let s = |x: &str| Value::Str(x.to_owned());
        let arg = |offset: u32, size: u32, kind: &str| {
            Value::Map(vec![
                (s(".offset"), Value::Int(i128::from(offset))),
                (s(".size"), Value::Int(i128::from(size))),
                (s(".value_kind"), s(kind)),
            ])
        };
        let ks = kernels
            .iter()
            .map(|(name, params)| {
                let mut args: Vec<Value> = params.iter().map(|p| arg(p.offset, p.size, "by_value")).collect();
                let end = params.iter().map(|p| p.offset + p.size).max().unwrap_or(0).next_multiple_of(8);
                args.push(arg(end, 4, "hidden_block_count_x"));
                args.push(arg(end + 8, 8, "hidden_global_offset_x"));
                Value::Map(vec![
                    (s(".name"), s(name)),
                    (s(".symbol"), s(&format!("{name}.kd"))),
                    (s(".args"), Value::Array(args)),
                    (s(".kernarg_segment_size"), Value::Int(i128::from(end + 16))),
                ])
            })
            .collect();
        let mut out = Vec::new();
        Value::Map(vec![
            (s("amdhsa.version"), Value::Array(vec![Value::Int(1), Value::Int(2)])),
            (s("amdhsa.kernels"), Value::Array(ks)),
            (s("amdhsa.target"), s("amdgcn-amd-amdhsa--gfx942")),
        ])
        .encode(&mut out);
        out
    }

    /// An ELF64 code object with one `.note` section holding `metadata` as `NT_AMDGPU_METADATA`.
    pub fn code_object(metadata: &[u8]) -> Vec<u8> {
        let mut note = Vec::new();
        note.extend_from_slice(&7u32.to_le_bytes());
        note.extend_from_slice(&(metadata.len() as u32).to_le_bytes());
        note.extend_from_slice(&NT_AMDGPU_METADATA.to_le_bytes());
        note.extend_from_slice(b"AMDGPU\0\0");
        note.extend_from_slice(metadata);
        while note.len() % 4 != 0 {
            note.push(0);
        }
        let note_off = 64usize;
        let shoff = (note_off + note.len()).next_multiple_of(8);
        let mut elf = vec![0u8; shoff + 2 * 64];
        elf[..4].copy_from_slice(ELF_MAGIC);
        elf[4] = 2; // ELFCLASS64
        elf[5] = 1; // little endian
        elf[6] = 1;
        elf[0x10..0x12].copy_from_slice(&3u16.to_le_bytes()); // ET_DYN
        elf[0x12..0x14].copy_from_slice(&224u16.to_le_bytes()); // EM_AMDGPU
        elf[0x28..0x30].copy_from_slice(&(shoff as u64).to_le_bytes());
        elf[0x34..0x36].copy_from_slice(&64u16.to_le_bytes());
        elf[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        elf[0x3c..0x3e].copy_from_slice(&2u16.to_le_bytes());
        elf[note_off..note_off + note.len()].copy_from_slice(&note);
        // Section 0 is the null section; section 1 the note.
        let sh = shoff + 64;
        elf[sh + 4..sh + 8].copy_from_slice(&7u32.to_le_bytes());
        elf[sh + 24..sh + 32].copy_from_slice(&(note_off as u64).to_le_bytes());
        elf[sh + 32..sh + 40].copy_from_slice(&(note.len() as u64).to_le_bytes());
        elf
    }

    /// An offload bundle of a (empty) host entry and one code object per `(triple, object)`.
    pub fn bundle(objects: &[(&str, &[u8])]) -> Vec<u8> {
        let host = "host-x86_64-unknown-linux-gnu";
        let entries: Vec<(&str, &[u8])> = std::iter::once((host, &[][..])).chain(objects.iter().copied()).collect();
        let header: usize = 32 + entries.iter().map(|(t, _)| 24 + t.len()).sum::<usize>();
        let mut out = Vec::new();
        out.extend_from_slice(BUNDLE_MAGIC);
        out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
        let mut offset = header.next_multiple_of(16);
        for (t, o) in &entries {
            out.extend_from_slice(&(offset as u64).to_le_bytes());
            out.extend_from_slice(&(o.len() as u64).to_le_bytes());
            out.extend_from_slice(&(t.len() as u64).to_le_bytes());
            out.extend_from_slice(t.as_bytes());
            offset = (offset + o.len()).next_multiple_of(16);
        }
        for (_, o) in &entries {
            out.resize(out.len().next_multiple_of(16), 0);
            out.extend_from_slice(o);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::build::*;
    use super::*;
    use proptest::prelude::*;

    fn p(offset: u32, size: u32) -> ParamLayout {
        ParamLayout { offset, size }
    }

    #[test]
    fn a_code_object_gives_its_kernels_visible_parameters() {
        let axpy = [p(0, 4), p(8, 8), p(16, 8), p(24, 4)];
        let co = code_object(&metadata(&[("axpy", &axpy), ("empty_kernel", &[])]));
        assert_eq!(elf_extent(&co[..]), Some(co.len()));
        assert_eq!(image_extent(&co[..]), Some(co.len()));
        let l = image_layouts(&co);
        assert_eq!(l["axpy"], axpy, "hidden arguments are left out");
        assert_eq!(l["empty_kernel"], []);
        assert_eq!(l.len(), 2);
    }

    #[test]
    fn a_bundle_gives_the_kernels_of_its_gpu_code_objects() {
        let a = code_object(&metadata(&[("k", &[p(0, 8)]), ("same", &[p(0, 4)])]));
        let b = code_object(&metadata(&[("k", &[p(0, 4)]), ("same", &[p(0, 4)]), ("only_b", &[])]));
        let bundle = bundle(&[("hipv4-amdgcn-amd-amdhsa--gfx90a", &a), ("hipv4-amdgcn-amd-amdhsa--gfx942", &b)]);
        let (entries, end) = bundle_entries(&bundle[..]).expect("a bundle");
        assert_eq!(entries.len(), 3);
        assert_eq!(end, bundle.len());
        assert_eq!(image_extent(&bundle[..]), Some(bundle.len()));
        let l = image_layouts(&bundle);
        assert!(!l.contains_key("k"), "layouts that differ between targets are not trusted");
        assert_eq!(l["same"], [p(0, 4)]);
        assert_eq!(l["only_b"], []);
    }

    #[test]
    fn messagepack_forms() {
        let cases: &[(&[u8], Value)] = &[
            (&[0x05], Value::Int(5)),
            (&[0xff], Value::Int(-1)),
            (&[0xcc, 0xfe], Value::Int(254)),
            (&[0xd0, 0x80], Value::Int(-128)),
            (&[0xd1, 0xff, 0x00], Value::Int(-256)),
            (&[0xa2, b'h', b'i'], Value::Str("hi".into())),
            (&[0xd9, 1, b'x'], Value::Str("x".into())),
            (&[0x92, 0xc3, 0xc0], Value::Array(vec![Value::Bool(true), Value::Nil])),
            (&[0x81, 0xa1, b'k', 0x01], Value::Map(vec![(Value::Str("k".into()), Value::Int(1))])),
            (&[0xca, 0x3f, 0x80, 0, 0], Value::Float(1.0)),
        ];
        for (bytes, v) in cases {
            assert_eq!(Value::parse(bytes).as_ref(), Some(v), "{bytes:02x?}");
        }
        assert_eq!(Value::parse(&[0xc1]), None, "never used");
        assert_eq!(Value::parse(&[0xdd, 0xff, 0xff, 0xff, 0xff]), None, "a count beyond the input");
        let deep: Vec<u8> = std::iter::repeat_n(0x91, 1000).chain([0x00]).collect();
        assert_eq!(Value::parse(&deep), None, "nesting is bounded");
    }

    fn layout() -> impl Strategy<Value = Vec<ParamLayout>> {
        proptest::collection::vec((0u32..4096, 1u32..256), 0..12)
            .prop_map(|v| v.into_iter().map(|(offset, size)| ParamLayout { offset, size }).collect())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Whatever layouts are written, exactly they are read back, from a code object and
        /// from a bundle of it.
        #[test]
        fn layouts_round_trip(kernels in proptest::collection::btree_map("[a-z_][a-z0-9_]{0,12}", layout(), 0..6)) {
            let ks: Vec<(&str, &[ParamLayout])> = kernels.iter().map(|(n, l)| (n.as_str(), l.as_slice())).collect();
            let co = code_object(&metadata(&ks));
            let got = image_layouts(&co);
            prop_assert_eq!(got.len(), kernels.len());
            for (n, l) in &kernels {
                prop_assert_eq!(&got[n], l);
            }
            let b = bundle(&[("hipv4-amdgcn-amd-amdhsa--gfx942", &co)]);
            prop_assert_eq!(image_layouts(&b), got);
            prop_assert_eq!(image_extent(&b[..]), Some(b.len()));
        }

        /// Hostile bytes (random, or a valid image with bytes overwritten or cut) never panic,
        /// and extents never exceed the bound.
        #[test]
        fn malformed_images_never_panic(
            noise in proptest::collection::vec(any::<u8>(), 0..512),
            edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..16),
            cut in any::<usize>(),
        ) {
            let _ = Value::parse(&noise);
            let _ = image_layouts(&noise);
            let co = code_object(&metadata(&[("k", &[ParamLayout { offset: 0, size: 8 }])]));
            for base in [co.clone(), bundle(&[("hipv4-amdgcn-amd-amdhsa--gfx942", &co)])] {
                let mut b = base.clone();
                for &(at, v) in &edits {
                    let i = at % b.len();
                    b[i] = v;
                }
                b.truncate(cut % (b.len() + 1));
                let _ = image_layouts(&b);
                if let Some(e) = image_extent(&b[..]) {
                    prop_assert!(e <= MAX_IMAGE);
                }
            }
        }
    }
}

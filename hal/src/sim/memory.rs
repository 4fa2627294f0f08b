//! Device memory of the simulated device: byte vectors at fake device addresses.

use std::collections::BTreeMap;

/// Simulated device memory. Addresses are fake but stable; every access is bounds-checked, and a
/// bad access becomes an asynchronous failure of the op that made it (as on hardware).
#[derive(Debug, Default)]
pub struct SimMemory {
    allocations: BTreeMap<u64, Vec<u8>>,
    next: u64,
}

const BASE: u64 = 0x7f00_0000_0000;
const ALIGN: u64 = 256;

impl SimMemory {
    /// Allocates `bytes` zeroed bytes and returns their device address.
    pub fn alloc(&mut self, bytes: usize) -> u64 {
        if self.next == 0 {
            self.next = BASE;
        }
        let addr = self.next;
        self.next += (bytes as u64).div_ceil(ALIGN).max(1) * ALIGN + ALIGN;
        self.allocations.insert(addr, vec![0; bytes]);
        addr
    }

    /// Frees an allocation by its base address.
    pub fn free(&mut self, addr: u64) -> Result<(), String> {
        self.allocations.remove(&addr).map(|_| ()).ok_or_else(|| format!("free of unknown address {addr:#x}"))
    }

    fn locate(&self, addr: u64, len: usize) -> Result<(u64, usize), String> {
        let (&base, buf) =
            self.allocations.range(..=addr).next_back().ok_or_else(|| format!("address {addr:#x} not allocated"))?;
        let off = (addr - base) as usize;
        if off.checked_add(len).is_none_or(|end| end > buf.len()) {
            return Err(format!("access {addr:#x}+{len} outside allocation {base:#x}+{}", buf.len()));
        }
        Ok((base, off))
    }

    /// Reads `len` bytes at `addr`.
    pub fn read(&self, addr: u64, len: usize) -> Result<&[u8], String> {
        let (base, off) = self.locate(addr, len)?;
        Ok(&self.allocations[&base][off..off + len])
    }

    /// Writes `data` at `addr`.
    pub fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), String> {
        let (base, off) = self.locate(addr, data.len())?;
        self.allocations.get_mut(&base).expect("located")[off..off + data.len()].copy_from_slice(data);
        Ok(())
    }

    /// Reads `count` little-endian `f32`s at `addr`.
    pub fn read_f32s(&self, addr: u64, count: usize) -> Result<Vec<f32>, String> {
        let bytes = self.read(addr, count * 4)?;
        Ok(bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))).collect())
    }

    /// Writes `f32`s at `addr`.
    pub fn write_f32s(&mut self, addr: u64, values: &[f32]) -> Result<(), String> {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.write(addr, &bytes)
    }

    /// Copies `len` bytes between two device addresses.
    pub fn copy_within(&mut self, dst: u64, src: u64, len: usize) -> Result<(), String> {
        let data = self.read(src, len)?.to_vec();
        self.write(dst, &data)
    }
}

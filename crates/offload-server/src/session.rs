//! A client session: everything one client allocated or loaded, and the
//! checks that keep it inside its own memory.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use offload_core::plugin;
use offload_core::{DevicePtr, Error, ErrorCode, Result, Runtime};
use offload_image::{metadata::Metadata, DeviceImage, ImageFormat};

/// An image shipped by a client, owned by the server.
pub struct ShippedImage {
    pub bytes: Vec<u8>,
    pub format: ImageFormat,
    pub triple: Option<String>,
    pub arch: Option<String>,
    pub strings: Vec<(String, String)>,
    pub metadata: Metadata,
}

impl ShippedImage {
    pub fn as_device_image(&self) -> DeviceImage<'_> {
        DeviceImage {
            bytes: &self.bytes,
            format: self.format,
            triple: self.triple.clone(),
            arch: self.arch.clone(),
            image_kind: None,
            offload_kind: None,
            strings: self.strings.clone(),
            metadata: self.metadata.clone(),
            containers: Vec::new(),
        }
    }
}

pub struct LoadedProgram {
    pub device: u32,
    pub program: Arc<dyn plugin::Program>,
    /// Client binary the image came from (0 = shipped with the load).
    pub binary: u64,
}

#[derive(Default)]
struct State {
    /// device -> base -> size, of the session's allocations.
    allocations: HashMap<u32, BTreeMap<u64, u64>>,
    /// device -> base -> size, of globals of the session's programs.
    globals: HashMap<u32, BTreeMap<u64, u64>>,
    /// (device, base) of each global -> the program it belongs to.
    global_owner: HashMap<(u32, u64), u64>,
    images: HashMap<u64, Arc<ShippedImage>>,
    /// client binary id -> its image ids.
    binaries: HashMap<u64, Vec<u64>>,
    programs: BTreeMap<u64, LoadedProgram>,
    kernels: HashMap<u64, (u32, u64, Arc<dyn plugin::Kernel>)>,
}

/// One client's session.
pub struct Session {
    pub id: String,
    pub client: String,
    /// Authenticates this session's bulk-data connections.
    pub data_secret: String,
    runtime: Arc<Runtime>,
    state: Mutex<State>,
}

/// `n` random bytes as hex, from the kernel's generator.
fn random_hex(n: usize) -> String {
    use std::io::Read;
    let mut bytes = vec![0u8; n];
    let ok = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .is_ok();
    assert!(ok, "reading /dev/urandom");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn contains(map: Option<&BTreeMap<u64, u64>>, addr: u64, len: u64) -> bool {
    let Some(map) = map else { return false };
    let Some((&base, &size)) = map.range(..=addr).next_back() else {
        return false;
    };
    let end = addr.checked_add(len);
    addr >= base && end.is_some_and(|e| e <= base + size)
}

impl Session {
    pub fn new(id: String, client: String, runtime: Arc<Runtime>) -> Self {
        Session {
            id,
            client,
            data_secret: random_hex(32),
            runtime,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn device(&self, id: u32) -> Result<&Arc<offload_core::Device>> {
        self.runtime.device(id as usize)
    }

    /// Fail unless `[addr, addr+len)` lies in memory this session owns on `device`.
    pub fn check(&self, device: u32, addr: u64, len: u64) -> Result<()> {
        let st = self.state();
        if contains(st.allocations.get(&device), addr, len.max(1))
            || contains(st.globals.get(&device), addr, len.max(1))
        {
            return Ok(());
        }
        Err(Error::new(
            ErrorCode::InvalidArgument,
            format!(
                "address {} (+{len} bytes) on device {device} is not memory of this session",
                DevicePtr(addr)
            ),
        ))
    }

    pub fn alloc(&self, device: u32, size: u64, kind: plugin::AllocKind) -> Result<DevicePtr> {
        let dev = self.device(device)?;
        let p = dev.alloc(size as usize, kind)?;
        self.state()
            .allocations
            .entry(device)
            .or_default()
            .insert(p.0, size);
        Ok(p)
    }

    pub fn free(&self, device: u32, ptr: u64) -> Result<()> {
        let owned = self
            .state()
            .allocations
            .get_mut(&device)
            .and_then(|m| m.remove(&ptr))
            .is_some();
        if !owned {
            return Err(Error::new(
                ErrorCode::InvalidArgument,
                format!("pointer {} is not an allocation of this session on device {device} (double free or foreign pointer)", DevicePtr(ptr)),
            ));
        }
        self.device(device)?.free(DevicePtr(ptr))
    }

    pub fn add_images(&self, binary: u64, images: Vec<ShippedImage>) -> Vec<u64> {
        let mut st = self.state();
        let ids: Vec<u64> = images
            .into_iter()
            .map(|img| {
                let id = next_id();
                st.images.insert(id, Arc::new(img));
                id
            })
            .collect();
        st.binaries
            .entry(binary)
            .or_default()
            .extend(ids.iter().copied());
        ids
    }

    /// Drop a binary: its programs (newest first), then its images.
    pub fn remove_binary(&self, binary: u64) -> Result<()> {
        let mut st = self.state();
        let ids = st.binaries.remove(&binary).ok_or_else(|| {
            Error::invalid_argument(format!(
                "binary {binary} was not registered in this session"
            ))
        })?;
        let programs: Vec<u64> = st
            .programs
            .iter()
            .filter(|(_, p)| p.binary == binary)
            .map(|(&id, _)| id)
            .collect();
        for id in programs.into_iter().rev() {
            Self::drop_program(&mut st, id);
        }
        for id in ids {
            st.images.remove(&id);
        }
        Ok(())
    }

    fn drop_program(st: &mut State, id: u64) {
        if let Some(p) = st.programs.remove(&id) {
            st.kernels.retain(|_, (_, prog, _)| *prog != id);
            // Globals of the program stop being reachable.
            let owned: Vec<(u32, u64)> = st
                .global_owner
                .iter()
                .filter(|(_, &prog)| prog == id)
                .map(|(&k, _)| k)
                .collect();
            for (device, base) in owned {
                st.global_owner.remove(&(device, base));
                if let Some(g) = st.globals.get_mut(&device) {
                    g.remove(&base);
                }
            }
            drop(p);
        }
    }

    pub fn image(&self, id: u64) -> Result<(Arc<ShippedImage>, u64)> {
        let st = self.state();
        let img = st.images.get(&id).cloned().ok_or_else(|| {
            Error::not_found(format!("image {id} was not shipped in this session"))
        })?;
        let binary = st
            .binaries
            .iter()
            .find(|(_, v)| v.contains(&id))
            .map(|(&b, _)| b)
            .unwrap_or(0);
        Ok((img, binary))
    }

    pub fn add_program(&self, device: u32, program: Arc<dyn plugin::Program>, binary: u64) -> u64 {
        let id = next_id();
        self.state().programs.insert(
            id,
            LoadedProgram {
                device,
                program,
                binary,
            },
        );
        id
    }

    pub fn unload_program(&self, id: u64) -> Result<()> {
        let mut st = self.state();
        if !st.programs.contains_key(&id) {
            return Err(Error::invalid_argument(format!(
                "program {id} is not loaded in this session"
            )));
        }
        Self::drop_program(&mut st, id);
        Ok(())
    }

    pub fn program(&self, id: u64) -> Result<(u32, Arc<dyn plugin::Program>)> {
        let st = self.state();
        let p = st.programs.get(&id).ok_or_else(|| {
            Error::invalid_argument(format!("program {id} is not loaded in this session"))
        })?;
        Ok((p.device, p.program.clone()))
    }

    pub fn add_kernel(&self, device: u32, program: u64, kernel: Arc<dyn plugin::Kernel>) -> u64 {
        let id = next_id();
        self.state().kernels.insert(id, (device, program, kernel));
        id
    }

    pub fn kernel(&self, id: u64) -> Result<(u32, Arc<dyn plugin::Kernel>)> {
        let st = self.state();
        let (d, _, k) = st.kernels.get(&id).ok_or_else(|| {
            Error::invalid_argument(format!("kernel {id} is not known in this session"))
        })?;
        Ok((*d, k.clone()))
    }

    pub fn add_global(&self, device: u32, program: u64, ptr: u64, size: u64) {
        let mut st = self.state();
        st.globals.entry(device).or_default().insert(ptr, size);
        st.global_owner.insert((device, ptr), program);
    }

    /// Free everything the session still holds (client gone).
    pub fn release(&self) -> (usize, usize) {
        let mut st = self.state();
        let allocations = std::mem::take(&mut st.allocations);
        let mut freed = 0;
        for (device, blocks) in allocations {
            if let Ok(dev) = self.runtime.device(device as usize) {
                for base in blocks.keys() {
                    if dev.free(DevicePtr(*base)).is_ok() {
                        freed += 1;
                    }
                }
            }
        }
        let programs = st.programs.len();
        st.kernels.clear();
        st.programs.clear();
        st.globals.clear();
        st.global_owner.clear();
        st.images.clear();
        st.binaries.clear();
        (freed, programs)
    }

    pub fn live_allocations(&self) -> usize {
        self.state().allocations.values().map(|m| m.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        let mut m = BTreeMap::new();
        m.insert(100, 50);
        assert!(contains(Some(&m), 100, 50));
        assert!(contains(Some(&m), 120, 10));
        assert!(!contains(Some(&m), 120, 40));
        assert!(!contains(Some(&m), 99, 1));
        assert!(!contains(Some(&m), 150, 1));
        assert!(!contains(Some(&m), u64::MAX, 2));
    }
}

//! A client session: everything one client loaded, and the checks that keep
//! it inside its own memory.
//!
//! Memory is the core's: allocations (and globals of the session's programs)
//! are filed in each device's allocation index with the session's [`Owner`],
//! so the check of an address is one index lookup plus an owner comparison,
//! and closing the session frees exactly the session's allocations.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use offload_core::plugin;
use offload_core::{DevicePtr, Error, ErrorCode, Owner, Result, Runtime};
use offload_image::{metadata::Metadata, DeviceImage, ImageFormat};

use crate::secret::random_hex;

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
    pub program: Arc<offload_core::Program>,
    /// Client binary the image came from (0 = shipped with the load).
    pub binary: u64,
}

#[derive(Default)]
struct State {
    images: HashMap<u64, Arc<ShippedImage>>,
    /// client binary id -> its image ids.
    binaries: HashMap<u64, Vec<u64>>,
    programs: BTreeMap<u64, LoadedProgram>,
    /// Looked up on every launch; ids are handed out here, sequentially.
    kernels: HashMap<u64, (u32, u64, Arc<offload_core::Kernel>), offload_core::hash::AddrHash>,
}

/// How long a free waits for copies in flight into or out of the
/// allocation before it is refused.
pub const FREE_WAIT: Duration = Duration::from_secs(10);

/// How long closing a session waits for copies in flight; allocations
/// still pinned after that are left allocated (never freed under a copy).
const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// Copies in flight per allocation: `(device, base)` -> how many. A free
/// of a pinned allocation waits until it is not pinned (or refuses).
#[derive(Default)]
struct Pins {
    by_allocation: HashMap<(u32, u64), usize>,
    /// The session is closing: nothing new is pinned.
    closed: bool,
}

/// An allocation pinned for one copy: it cannot be freed (and its address
/// handed to a later allocation) until this is dropped.
pub struct Pinned<'a> {
    session: &'a Session,
    key: (u32, u64),
}

impl Drop for Pinned<'_> {
    fn drop(&mut self) {
        let mut pins = self.session.pins();
        if let Some(n) = pins.by_allocation.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                pins.by_allocation.remove(&self.key);
            }
        }
        drop(pins);
        self.session.unpinned.notify_all();
    }
}

/// What names a session: the public id, the secret completing the call
/// credential (`<id>.<secret>`) and the bulk-data secret.
pub struct Credentials {
    pub id: String,
    pub secret: String,
    pub data_secret: String,
}

/// One client's session.
pub struct Session {
    /// Public selector: names the session in logs and in the server's map
    /// (64 random bits; knowing it grants nothing).
    pub id: String,
    /// The rest of the session credential (128 random bits): a call names
    /// its session with `<id>.<secret>`, checked in constant time.
    secret: String,
    pub client: String,
    /// Authenticates this session's bulk-data connections.
    pub data_secret: String,
    /// Tags the session's memory in the core's allocation index.
    owner: Owner,
    /// Bytes this session may hold allocated at once (`--max-session-memory`).
    quota: Option<u64>,
    /// Bytes it holds now.
    in_use: std::sync::atomic::AtomicU64,
    runtime: Arc<Runtime>,
    state: Mutex<State>,
    /// Allocations with copies in flight (see [`Session::pin`]).
    pins: Mutex<Pins>,
    unpinned: Condvar,
}

fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl Session {
    /// A session with a fresh random credential.
    pub fn new(client: String, runtime: Arc<Runtime>) -> Self {
        Self::with_quota(client, runtime, None)
    }

    /// A session that may hold at most `quota` bytes of device memory.
    pub fn with_quota(client: String, runtime: Arc<Runtime>, quota: Option<u64>) -> Self {
        let credentials = Credentials {
            id: random_hex(8),
            secret: random_hex(16),
            data_secret: random_hex(32),
        };
        Self::with_credentials(credentials, client, runtime, quota)
    }

    /// A session named by credentials made elsewhere (a worker process's
    /// session, named by the supervisor).
    pub fn with_credentials(
        credentials: Credentials,
        client: String,
        runtime: Arc<Runtime>,
        quota: Option<u64>,
    ) -> Self {
        Session {
            id: credentials.id,
            secret: credentials.secret,
            client,
            data_secret: credentials.data_secret,
            // Distinct from the runtime's own owners (small numbers).
            owner: Owner(1 << 63 | next_id()),
            quota,
            in_use: Default::default(),
            runtime,
            state: Mutex::new(State::default()),
            pins: Mutex::new(Pins::default()),
            unpinned: Condvar::new(),
        }
    }

    /// What the client sends in `x-offload-session`: `<id>.<secret>`.
    pub fn credential(&self) -> String {
        format!("{}.{}", self.id, self.secret)
    }

    /// Whether `secret` is this session's (constant time).
    pub fn secret_matches(&self, secret: &str) -> bool {
        crate::secret::equal(secret.as_bytes(), self.secret.as_bytes())
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn pins(&self) -> std::sync::MutexGuard<'_, Pins> {
        self.pins.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// [`Session::check`] `[addr, addr+len)` and pin the allocation holding
    /// it until the returned guard drops: every copy into or out of session
    /// memory holds one, so a free racing it waits (see [`Session::free`])
    /// instead of letting the copy land in whatever is allocated there next.
    pub fn pin(&self, device: u32, addr: u64, len: u64) -> Result<Pinned<'_>> {
        let mut pins = self.pins();
        if pins.closed {
            return Err(Error::new(
                ErrorCode::InvalidArgument,
                "the session is closing",
            ));
        }
        let dev = self.device(device)?;
        let allocation = dev
            .check_range(DevicePtr(addr), len.max(1) as usize)
            .ok()
            .filter(|a| a.owner == self.owner)
            .ok_or_else(|| self.not_ours(device, addr, len))?;
        let key = (device, allocation.base.0);
        *pins.by_allocation.entry(key).or_default() += 1;
        Ok(Pinned { session: self, key })
    }

    /// How many copies have `[base]` on `device` pinned now.
    pub fn pinned(&self, device: u32, base: u64) -> usize {
        self.pins()
            .by_allocation
            .get(&(device, base))
            .copied()
            .unwrap_or(0)
    }

    fn not_ours(&self, device: u32, addr: u64, len: u64) -> Error {
        Error::new(
            ErrorCode::InvalidArgument,
            format!(
                "address {} (+{len} bytes) on device {device} is not memory of this session",
                DevicePtr(addr)
            ),
        )
    }

    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    pub fn device(&self, id: u32) -> Result<&Arc<offload_core::Device>> {
        self.runtime.device(id as usize)
    }

    /// Fail unless `[addr, addr+len)` lies in memory this session owns on `device`.
    pub fn check(&self, device: u32, addr: u64, len: u64) -> Result<()> {
        let dev = self.device(device)?;
        let owned = dev
            .check_range(DevicePtr(addr), len.max(1) as usize)
            .is_ok_and(|a| a.owner == self.owner);
        if owned {
            return Ok(());
        }
        Err(self.not_ours(device, addr, len))
    }

    pub fn alloc(&self, device: u32, size: u64, kind: plugin::AllocKind) -> Result<DevicePtr> {
        use std::sync::atomic::Ordering::Relaxed;
        let bytes = usize::try_from(size)
            .map_err(|_| Error::invalid_size(format!("cannot allocate {size} bytes")))?;
        if let Some(quota) = self.quota {
            // Reserve first, so concurrent allocations cannot overshoot.
            let before = self.in_use.fetch_add(size, Relaxed);
            if before.saturating_add(size) > quota {
                self.in_use.fetch_sub(size, Relaxed);
                return Err(Error::new(
                    ErrorCode::OutOfResources,
                    format!(
                        "session memory quota exceeded: {before} bytes in use, {size} requested, {quota} allowed (offload serve --max-session-memory)"
                    ),
                ));
            }
        }
        let r = self.device(device)?.alloc_for(bytes, kind, self.owner);
        if r.is_err() && self.quota.is_some() {
            self.in_use.fetch_sub(size, Relaxed);
        }
        r
    }

    /// Free a session allocation. Copies in flight into or out of it (they
    /// pin it) are waited for, up to [`FREE_WAIT`]; then the free is refused.
    /// The pin lock is held from the wait through the free, so no new copy
    /// can start on the allocation in between. Blocks: call it off the
    /// async executor.
    pub fn free(&self, device: u32, ptr: u64) -> Result<()> {
        self.free_waiting(device, ptr, FREE_WAIT)
    }

    pub fn free_waiting(&self, device: u32, ptr: u64, wait: Duration) -> Result<()> {
        let deadline = Instant::now() + wait;
        let mut pins = self.pins();
        loop {
            let n = pins.by_allocation.get(&(device, ptr)).copied().unwrap_or(0);
            if n == 0 {
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::new(
                    ErrorCode::InvalidArgument,
                    format!(
                        "pointer {} on device {device} is not freed: {n} cop{} into or out of it still in flight after {} s (free it once they complete)",
                        DevicePtr(ptr),
                        if n == 1 { "y is" } else { "ies are" },
                        wait.as_secs_f64()
                    ),
                ));
            }
            pins = self
                .unpinned
                .wait_timeout(pins, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let dev = self.device(device)?;
        let size = dev.allocation(DevicePtr(ptr)).map_or(0, |a| a.size as u64);
        dev.free_for(DevicePtr(ptr), Some(self.owner)).map_err(|_| {
            Error::new(
                ErrorCode::InvalidArgument,
                format!("pointer {} is not an allocation of this session on device {device} (double free or foreign pointer)", DevicePtr(ptr)),
            )
        })?;
        if self.quota.is_some() {
            self.in_use
                .fetch_sub(size, std::sync::atomic::Ordering::Relaxed);
        }
        drop(pins);
        Ok(())
    }

    /// Load `image` on `device` as this session's program.
    pub fn load(&self, device: u32, image: &DeviceImage<'_>) -> Result<Arc<offload_core::Program>> {
        self.device(device)?.load_image_for(image, self.owner)
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
            // Its globals leave the index with the last reference.
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

    pub fn add_program(
        &self,
        device: u32,
        program: Arc<offload_core::Program>,
        binary: u64,
    ) -> u64 {
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

    pub fn program(&self, id: u64) -> Result<(u32, Arc<offload_core::Program>)> {
        let st = self.state();
        let p = st.programs.get(&id).ok_or_else(|| {
            Error::invalid_argument(format!("program {id} is not loaded in this session"))
        })?;
        Ok((p.device, p.program.clone()))
    }

    pub fn add_kernel(&self, device: u32, program: u64, kernel: Arc<offload_core::Kernel>) -> u64 {
        let id = next_id();
        self.state().kernels.insert(id, (device, program, kernel));
        id
    }

    pub fn kernel(&self, id: u64) -> Result<(u32, Arc<offload_core::Kernel>)> {
        let st = self.state();
        let (d, _, k) = st.kernels.get(&id).ok_or_else(|| {
            Error::invalid_argument(format!("kernel {id} is not known in this session"))
        })?;
        Ok((*d, k.clone()))
    }

    /// Free everything the session still holds (client gone).
    pub fn release(&self) -> (usize, usize) {
        // No new copy starts; those in flight get RELEASE_WAIT to finish.
        let deadline = Instant::now() + RELEASE_WAIT;
        let mut pins = self.pins();
        pins.closed = true;
        while !pins.by_allocation.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            pins = self
                .unpinned
                .wait_timeout(pins, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let mut freed = 0;
        for (d, dev) in self.runtime.devices().iter().enumerate() {
            for a in dev.allocations_of(self.owner) {
                if pins.by_allocation.contains_key(&(d as u32, a.base.0)) {
                    tracing::warn!(session = %self.id, base = %a.base, "a copy is still in flight: the allocation is left allocated");
                    continue;
                }
                if dev.free(a.base).is_ok() {
                    freed += 1;
                }
            }
        }
        drop(pins);
        let mut st = self.state();
        let programs = st.programs.len();
        st.kernels.clear();
        st.programs.clear();
        st.images.clear();
        st.binaries.clear();
        (freed, programs)
    }

    pub fn live_allocations(&self) -> usize {
        self.runtime
            .devices()
            .iter()
            .map(|d| d.allocations_of(self.owner).len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> Session {
        Session::new("test".into(), Arc::new(crate::local_runtime()))
    }

    #[test]
    fn a_free_waits_for_pins_then_refuses_and_succeeds_once_unpinned() {
        let s = session();
        let p = s.alloc(0, 4096, plugin::AllocKind::Device).unwrap().0;
        let pin = s.pin(0, p + 100, 200).unwrap();
        assert_eq!(s.pinned(0, p), 1);
        let started = Instant::now();
        let e = s
            .free_waiting(0, p, Duration::from_millis(100))
            .unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(100));
        assert!(e.message().contains("still in flight"), "{e}");
        // Not freed: still this session's memory.
        s.check(0, p, 4096).unwrap();
        // The free waits for the pin to drop, then frees.
        std::thread::scope(|scope| {
            scope.spawn(|| {
                std::thread::sleep(Duration::from_millis(50));
                drop(pin);
            });
            s.free_waiting(0, p, Duration::from_secs(10)).unwrap();
        });
        assert!(s.check(0, p, 1).is_err());
        assert!(
            s.pin(0, p, 1).is_err(),
            "a freed allocation cannot be pinned"
        );
    }

    #[test]
    fn a_closing_session_pins_nothing_and_keeps_pinned_memory() {
        let s = session();
        let p = s.alloc(0, 64, plugin::AllocKind::Device).unwrap().0;
        let q = s.alloc(0, 64, plugin::AllocKind::Device).unwrap().0;
        let pin = s.pin(0, p, 64).unwrap();
        // RELEASE_WAIT passes with p pinned: q is freed, p is left.
        let (freed, _) = s.release();
        assert_eq!(freed, 1);
        assert!(s.check(0, q, 1).is_err());
        s.check(0, p, 64).unwrap();
        assert!(s.pin(0, p, 1).is_err(), "closing: nothing new is pinned");
        drop(pin);
    }
}

//! Core behaviour with a recording test plugin: hook nesting, allocator
//! caching through a device, image selection and metadata delivery.

use std::sync::{Arc, Mutex};

use offload_core::binary::BinaryDescriptor;
use offload_core::plugin::{self, AllocKind, Backend, DeviceInfo, DevicePtr, DeviceType};
use offload_core::{Config, Error, ErrorCode, OffloadEntry, PluginEntry, Result, Runtime};
use offload_image::{metadata, offload_binary, DeviceImage};

type Log = Arc<Mutex<Vec<String>>>;

fn log() -> &'static Log {
    static LOG: std::sync::OnceLock<Log> = std::sync::OnceLock::new();
    LOG.get_or_init(Default::default)
}

/// Serialises tests: they share the static log.
static SERIAL: Mutex<()> = Mutex::new(());

struct TestPlugin {
    name: &'static str,
    fail_register: bool,
}

struct TestDevice {
    info: DeviceInfo,
    next: Mutex<u64>,
}

struct TestProgram;
impl plugin::Program for TestProgram {
    fn kernel(&self, name: &str) -> Result<Arc<dyn plugin::Kernel>> {
        Err(Error::not_found(name))
    }
    fn global(&self, name: &str) -> Result<(DevicePtr, u64)> {
        Err(Error::not_found(name))
    }
}

impl plugin::Plugin for TestPlugin {
    fn name(&self) -> &'static str {
        self.name
    }
    fn init(&self) -> Result<Vec<Arc<dyn plugin::Device>>> {
        let info = DeviceInfo {
            name: "test".into(),
            vendor: "test".into(),
            product_name: "test".into(),
            device_type: DeviceType::Gpu,
            backend: Backend::Other,
            triple: "testarch-unknown-none".into(),
            arch: "t1".into(),
            target_ids: Vec::new(),
            uid: format!("{}-0", self.name),
            driver_version: "0".into(),
            global_memory_bytes: 1 << 30,
            group_memory_bytes: 0,
            compute_units: 1,
            max_group_size: 1,
            max_group_size_per_dim: [1; 3],
            max_num_groups: [1; 3],
            clock_mhz: 0,
            address_bits: 64,
        };
        Ok(vec![Arc::new(TestDevice {
            info,
            next: Mutex::new(0x1000),
        })])
    }
    fn register_binary(&self, b: &BinaryDescriptor) -> Result<()> {
        let visible = registered(b.id);
        log().lock().unwrap().push(format!(
            "register {} id={} images={} generic_done={visible}",
            self.name,
            b.id.0,
            b.images.len()
        ));
        if self.fail_register {
            return Err(Error::backend("server unreachable"));
        }
        Ok(())
    }
    fn unregister_binary(&self, b: &BinaryDescriptor) -> Result<()> {
        log().lock().unwrap().push(format!(
            "unregister {} id={} still_registered={}",
            self.name,
            b.id.0,
            registered(b.id)
        ));
        Ok(())
    }
}

impl plugin::Device for TestDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
    fn alloc(&self, size: usize, kind: AllocKind) -> Result<DevicePtr> {
        let mut n = self.next.lock().unwrap();
        let p = *n;
        *n += size as u64 + 0x100;
        log()
            .lock()
            .unwrap()
            .push(format!("backend alloc {size} {kind:?}"));
        Ok(DevicePtr(p))
    }
    unsafe fn free(&self, ptr: DevicePtr, _kind: AllocKind) -> Result<()> {
        log().lock().unwrap().push(format!("backend free {ptr}"));
        Ok(())
    }
    fn load_program(&self, image: &DeviceImage<'_>) -> Result<Arc<dyn plugin::Program>> {
        let meta: Vec<String> = image
            .metadata
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        log().lock().unwrap().push(format!(
            "load triple={:?} arch={:?} bytes={:?} meta=[{}]",
            image.triple,
            image.arch,
            std::str::from_utf8(image.bytes).unwrap_or("?"),
            meta.join(",")
        ));
        Ok(Arc::new(TestProgram))
    }
    fn create_queue(&self) -> Result<Arc<dyn plugin::Queue>> {
        Err(Error::unsupported("no queues"))
    }
}

/// The runtime under test, so hooks can ask it what is registered.
static CURRENT: std::sync::atomic::AtomicPtr<Runtime> =
    std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

fn registered(id: offload_core::BinaryId) -> bool {
    let rt = CURRENT.load(std::sync::atomic::Ordering::SeqCst);
    // SAFETY: set from a leaked runtime in the hook test only.
    !rt.is_null() && unsafe { (*rt).binary(id).is_some() }
}

fn take_log() -> Vec<String> {
    std::mem::take(&mut *log().lock().unwrap())
}

fn plugins() -> Vec<PluginEntry> {
    fn make(name: &'static str, fail: bool) -> Result<Box<dyn plugin::Plugin>> {
        Ok(Box::new(TestPlugin {
            name,
            fail_register: fail,
        }))
    }
    vec![
        PluginEntry {
            name: "alpha",
            create: |_| make("alpha", false),
            opt_in: false,
        },
        PluginEntry {
            name: "beta",
            create: |_| make("beta", true),
            opt_in: false,
        },
        PluginEntry {
            name: "broken",
            create: |_| Err(Error::backend("libvendor.so not found")),
            opt_in: false,
        },
    ]
}

#[test]
fn hooks_nest_generic_first_on_register_and_last_on_unregister() {
    let _g = SERIAL.lock().unwrap();
    let entries = plugins();
    let rt: &'static Runtime = Box::leak(Box::new(Runtime::new(Config::default(), &entries)));
    CURRENT.store(
        rt as *const Runtime as *mut Runtime,
        std::sync::atomic::Ordering::SeqCst,
    );
    assert_eq!(rt.devices().len(), 2);
    assert_eq!(rt.failed_plugins().len(), 1);
    assert!(rt.failed_plugins()[0].1.message().contains("libvendor.so"));
    take_log();

    // The hooks see the descriptor already registered: generic first.
    let (desc, failures) = rt.register_binary(
        vec![],
        vec![OffloadEntry {
            name: "k".into(),
            host_addr: 0x10,
            size: 0,
            flags: 0,
            data: 0,
            producer: 1,
        }],
    );
    assert!(
        rt.binary(desc.id).is_some(),
        "generic registration is visible"
    );
    assert_eq!(failures.len(), 1, "the failing hook is reported");
    assert_eq!(failures[0].plugin, "beta");
    assert_eq!(failures[0].error.code(), ErrorCode::BackendFailure);
    let id = desc.id.0;
    assert_eq!(
        take_log(),
        vec![
            format!("register alpha id={id} images=0 generic_done=true"),
            format!("register beta id={id} images=0 generic_done=true"),
        ]
    );

    // Nested binaries: the second registers inside the first's lifetime and
    // unregisters first; plugin hooks run in reverse plugin order and the
    // generic teardown last (the descriptor is still visible to the hooks).
    let (inner, _) = rt.register_binary(vec![], vec![]);
    take_log();
    let failures = rt.unregister_binary(inner.id).unwrap();
    assert!(failures.is_empty());
    let iid = inner.id.0;
    assert_eq!(
        take_log(),
        vec![
            format!("unregister beta id={iid} still_registered=true"),
            format!("unregister alpha id={iid} still_registered=true"),
        ]
    );
    assert!(rt.binary(inner.id).is_none());
    assert!(rt.binary(desc.id).is_some());
    rt.unregister_binary(desc.id).unwrap();
    assert!(rt.binaries().is_empty());
    assert_eq!(
        rt.unregister_binary(desc.id).unwrap_err().code(),
        ErrorCode::InvalidArgument
    );
}

#[test]
fn offload_plugins_restricts_what_loads() {
    let _g = SERIAL.lock().unwrap();
    let entries = plugins();
    let config = Config {
        plugins: Some(vec!["beta".into()]),
        ..Config::default()
    };
    let rt = Runtime::new(config, &entries);
    let names: Vec<&str> = rt.plugins().map(|(p, _)| p.name()).collect();
    assert_eq!(names, vec!["beta"]);
    assert_eq!(rt.devices().len(), 1);
    assert_eq!(rt.device(5).unwrap_err().code(), ErrorCode::InvalidDevice);
}

#[test]
fn device_allocations_go_through_the_caching_pool() {
    let _g = SERIAL.lock().unwrap();
    let entries = plugins();
    let config = Config {
        memory_manager_threshold: 1024,
        ..Config::default()
    };
    let rt = Runtime::new(config, &entries);
    let dev = &rt.devices()[0];
    take_log();
    let a = dev.alloc(100, AllocKind::Device).unwrap();
    dev.free(a).unwrap();
    let b = dev.alloc(128, AllocKind::Device).unwrap();
    assert_eq!(a, b, "a freed block of the same class is reused");
    let big = dev.alloc(4096, AllocKind::Device).unwrap();
    dev.free(big).unwrap();
    let host = dev.alloc(100, AllocKind::Host).unwrap();
    dev.free(host).unwrap();
    assert_eq!(
        take_log(),
        vec![
            "backend alloc 128 Device".to_string(),
            "backend alloc 4096 Device".to_string(),
            format!("backend free {big}"),
            "backend alloc 100 Host".to_string(),
            format!("backend free {host}"),
        ]
    );
    assert_eq!(
        dev.free(big).unwrap_err().code(),
        ErrorCode::InvalidArgument
    );
    assert_eq!(
        dev.alloc(0, AllocKind::Device).unwrap_err().code(),
        ErrorCode::InvalidSize
    );
    dev.free(b).unwrap();
    rt.shutdown();
    assert!(
        take_log().contains(&format!("backend free {b}")),
        "shutdown empties the pool"
    );
}

#[test]
fn images_are_matched_by_triple_and_arch_and_carry_metadata() {
    let _g = SERIAL.lock().unwrap();
    let entries = plugins();
    let rt = Runtime::new(Config::default(), &entries);
    let dev = &rt.devices()[0];
    let entry = |arch: &'static str, bytes: &'static [u8]| {
        offload_binary::OffloadBinary::new(
            offload_binary::ImageKind::Other(9),
            offload_binary::OffloadKind::OpenMp,
            bytes,
        )
        .with("triple", "testarch-unknown-none")
        .with("arch", arch)
    };
    // Two images; only the second has the device's arch.
    let fat = offload_binary::write(&[entry("t0", b"for-t0"), entry("t1", b"for-t1")]);
    let mut meta = metadata::Metadata::new();
    meta.insert(metadata::PRODUCER, "clang-22");
    meta.insert(metadata::VENDOR_NAME, "Test, Inc.");
    meta.insert("Custom", "kept");
    let wrapped = metadata::write(&meta, &fat);
    take_log();
    dev.load_program(&wrapped).unwrap();
    assert_eq!(
        take_log(),
        vec![r#"load triple=Some("testarch-unknown-none") arch=Some("t1") bytes="for-t1" meta=[Producer=clang-22,VendorName=Test, Inc.,Custom=kept]"#.to_string()]
    );
    // A generic image listed first: the exact architecture still wins;
    // alone, the generic one is taken.
    let mixed = offload_binary::write(&[entry("", b"generic"), entry("t1", b"exact")]);
    take_log();
    dev.load_program(&mixed).unwrap();
    assert!(take_log()[0].contains(r#"bytes="exact""#));
    dev.load_program(&offload_binary::write(&[entry("", b"generic")]))
        .unwrap();
    assert!(take_log()[0].contains(r#"bytes="generic""#));
    // Target features its plugin does not check (`pinned_features` left
    // at 0, as for remote devices) make no image more specific: the first
    // of equals is loaded.
    let featured = offload_binary::write(&[entry("t1", b"plain"), entry("t1:xnack+", b"pinned")]);
    take_log();
    dev.load_program(&featured).unwrap();
    assert!(take_log()[0].contains(r#"bytes="plain""#));
    let only_t0 = offload_binary::write(&[entry("t0", b"for-t0")]);
    let e = dev.load_program(&only_t0).err().unwrap();
    assert_eq!(e.code(), ErrorCode::InvalidBinary);
    assert!(e.message().contains("testarch-unknown-none t0"), "{e}");
}

/// A face's owned blocks: served by the same caching allocator, live ranges
/// of the index while cached (copies naming them pass the checks), freed only
/// through `free_owned_block`, released at shutdown.
#[test]
fn owned_blocks_stay_live_in_the_index_and_are_reused() {
    let _g = SERIAL.lock().unwrap();
    let entries = plugins();
    let config = Config {
        memory_manager_threshold: 1024,
        ..Config::default()
    };
    let rt = Runtime::new(config, &entries);
    let dev = &rt.devices()[0];
    take_log();
    let a = dev.alloc_owned_block(24).unwrap();
    // The whole 32-byte class block is in range, nothing past it.
    dev.check_range(a, 32).unwrap();
    assert!(dev.check_range(a, 33).is_err());
    // Nobody else may free it.
    assert_eq!(dev.free(a).unwrap_err().code(), ErrorCode::InvalidArgument);
    dev.free_owned_block(a, 24).unwrap();
    dev.check_range(a, 8).unwrap();
    let b = dev.alloc_owned_block(20).unwrap();
    assert_eq!(a, b, "reused from the owned free list");
    // Larger than the pool threshold: a plain device allocation, freed at once.
    let big = dev.alloc_owned_block(4096).unwrap();
    dev.free_owned_block(big, 4096).unwrap();
    assert!(dev.check_range(big, 1).is_err());
    assert_eq!(
        take_log(),
        vec![
            "backend alloc 32 Device".to_string(),
            "backend alloc 4096 Device".to_string(),
            format!("backend free {big}"),
        ]
    );
    dev.free_owned_block(b, 20).unwrap();
    rt.shutdown();
    assert!(take_log().contains(&format!("backend free {b}")));
}

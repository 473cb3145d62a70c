//! The binary interface between a GPU plugin and the OpenMP device runtime
//! linked into an image (ours in `devicertl/`, or LLVM's): the structures
//! clang-22 emits and the host fills in, as LLVM 22 lays them out
//! (`offload/include/Shared/Environment.h`). Like [`crate::launch`], this
//! is a service for GPU plugins (CUDA today, AMDGPU next), written once;
//! the faces never see it.
//!
//! * `<kernel>_kernel_environment` (48 bytes, read-only, one per target
//!   region): the configuration (execution mode, thread and team bounds
//!   from `thread_limit` / `ompx_attribute`, the teams-reduction buffer
//!   size) followed by two device pointers. [`KernelEnvironment::parse`]
//!   reads it, pure and total over any bytes.
//! * The kernel launch environment (16 bytes: two `u32` counters and the
//!   teams-reduction buffer's address), which the host allocates per
//!   launch of a kernel with a teams reduction and passes as the kernel's
//!   first argument (`dyn_ptr`); other launches get
//!   [`NO_LAUNCH_ENVIRONMENT`] (`(void *)~0`), as LLVM's plugins pass.
//! * `__omp_rtl_device_environment` (48 bytes, one per image), written by
//!   the host when the image is loaded ([`DeviceEnvironment`]).

use crate::error::{Error, Result};
use crate::launch::ExecMode;

/// Bytes of `KernelEnvironmentTy` (a 28-byte configuration padded to 32,
/// then `IdentTy *` and `DynamicEnvironmentTy *`).
pub const KERNEL_ENVIRONMENT_SIZE: usize = 48;
/// Bytes of `KernelLaunchEnvironmentTy`.
pub const LAUNCH_ENVIRONMENT_SIZE: usize = 16;
/// Bytes of `DeviceEnvironmentTy`.
pub const DEVICE_ENVIRONMENT_SIZE: usize = 48;
/// The global every OpenMP device image has and the host writes at load.
pub const DEVICE_ENVIRONMENT_GLOBAL: &str = "__omp_rtl_device_environment";
/// What a launch of a kernel without a teams reduction passes as
/// `dyn_ptr`: LLVM's plugins pass `(KernelLaunchEnvironmentTy *)~0` (never
/// NULL, which LLVM reserves for replayed and pre-`dyn_ptr` launches); a
/// device runtime must treat both as "no launch environment". The OpenMP
/// face puts it in the first argument word; a plugin replaces it with a
/// real launch environment where the kernel needs one.
pub const NO_LAUNCH_ENVIRONMENT: u64 = u64::MAX;

/// The global holding `kernel`'s environment.
pub fn kernel_environment_global(kernel: &str) -> String {
    format!("{kernel}_kernel_environment")
}

/// `KernelEnvironmentTy`'s configuration, as clang-22 emits it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelEnvironment {
    pub use_generic_state_machine: bool,
    pub may_use_nested_parallelism: bool,
    pub mode: ExecMode,
    /// Fewest threads per team the kernel wants (`ompx_attribute`
    /// launch bounds; clang emits 1 when nothing says more). <= 0: none.
    pub min_threads: i32,
    /// Most threads per team the kernel may run with (`thread_limit`,
    /// `ompx_attribute(launch_bounds(N))`; clang emits its default of 128
    /// for NVPTX otherwise). <= 0: no bound.
    pub max_threads: i32,
    /// Team bounds of constant `num_teams` clauses (informational: LLVM 22
    /// launches with the `num_teams` the program passes at run time).
    pub min_teams: i32,
    pub max_teams: i32,
    /// Bytes of one team's reduction data (`__kmpc_nvptx_teams_reduce_nowait_v2`).
    pub reduction_data_size: u32,
    /// Elements of the teams-reduction buffer (clang's
    /// `-fopenmp-cuda-teams-reduction-recs-num`, 1024 by default).
    pub reduction_buffer_length: u32,
}

fn le_i32(b: &[u8], at: usize) -> i32 {
    i32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl KernelEnvironment {
    /// Parse `kernel`'s environment from the global's bytes. Any input is
    /// answered: a size other than 48, an execution mode this runtime does
    /// not know, flag bytes other than 0/1 or negative reduction sizes are
    /// an `InvalidBinary` error naming the kernel (an image built against
    /// another device runtime or compiler), never a panic.
    pub fn parse(kernel: &str, bytes: &[u8]) -> Result<KernelEnvironment> {
        KernelEnvironment::check_size(kernel, bytes.len() as u64)?;
        let bad = |what: String| layout_error(kernel, what);
        let flag = |at: usize, name: &str| match bytes[at] {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(bad(format!("{name} is {v}, not 0 or 1"))),
        };
        let use_generic_state_machine = flag(0, "UseGenericStateMachine")?;
        let may_use_nested_parallelism = flag(1, "MayUseNestedParallelism")?;
        let mode = ExecMode::from_flags(bytes[2]).ok_or_else(|| {
            Error::invalid_binary(format!(
                "kernel '{kernel}': unknown execution mode {} in its kernel environment (known: 0 bare, 1 generic, 2 SPMD, 3 generic-SPMD); the image was built against another OpenMP device runtime or compiler",
                bytes[2]
            ))
        })?;
        let reduction = |at: usize, name: &str| {
            let v = le_i32(bytes, at);
            u32::try_from(v).map_err(|_| bad(format!("{name} is {v}")))
        };
        Ok(KernelEnvironment {
            use_generic_state_machine,
            may_use_nested_parallelism,
            mode,
            min_threads: le_i32(bytes, 4),
            max_threads: le_i32(bytes, 8),
            min_teams: le_i32(bytes, 12),
            max_teams: le_i32(bytes, 16),
            reduction_data_size: reduction(20, "ReductionDataSize")?,
            reduction_buffer_length: reduction(24, "ReductionBufferLength")?,
        })
    }

    /// Whether `kernel`'s environment global of `size` bytes has LLVM
    /// 22's layout size: an error naming the kernel otherwise.
    pub fn check_size(kernel: &str, size: u64) -> Result<()> {
        if size == KERNEL_ENVIRONMENT_SIZE as u64 {
            return Ok(());
        }
        Err(layout_error(
            kernel,
            format!(
                "its kernel environment ({}) is {size} bytes, expected {KERNEL_ENVIRONMENT_SIZE}",
                kernel_environment_global(kernel)
            ),
        ))
    }

    /// The bytes of the teams-reduction buffer each launch needs
    /// (`ReductionDataSize x ReductionBufferLength`), or None when the
    /// kernel has no teams reduction (either is 0): LLVM allocates a launch
    /// environment exactly then.
    pub fn reduction_buffer_bytes(&self) -> Option<u64> {
        let bytes = u64::from(self.reduction_data_size) * u64::from(self.reduction_buffer_length);
        (bytes > 0).then_some(bytes)
    }
}

fn layout_error(kernel: &str, what: String) -> Error {
    Error::invalid_binary(format!(
        "kernel '{kernel}': {what}: unknown kernel environment layout (the image was built against another OpenMP device runtime or compiler than LLVM 22's ABI)"
    ))
}

/// A kernel launch environment's bytes: both counters 0, the teams
/// reduction buffer at `reduction_buffer`.
pub fn launch_environment(reduction_buffer: u64) -> [u8; LAUNCH_ENVIRONMENT_SIZE] {
    let mut b = [0u8; LAUNCH_ENVIRONMENT_SIZE];
    b[8..].copy_from_slice(&reduction_buffer.to_le_bytes());
    b
}

/// What a plugin writes into every image's device environment about the
/// runtime around it, fixed when it enumerates its GPUs.
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenMpSettings {
    /// GPUs of this plugin.
    pub num_devices: u32,
    /// `LIBOMPTARGET_DEVICE_RTL_DEBUG`.
    pub debug_kind: u32,
}

/// `DeviceEnvironmentTy`, what the host writes into an image's
/// `__omp_rtl_device_environment` when it loads it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceEnvironment {
    /// `LIBOMPTARGET_DEVICE_RTL_DEBUG` (0 by default).
    pub debug_kind: u32,
    /// Devices of the plugin (LLVM: the plugin's count, not OpenMP's).
    pub num_devices: u32,
    /// The device's index among them (LLVM writes the plugin's index too).
    pub device_num: u32,
    /// LLVM 22's libomptarget writes 0.
    pub dynamic_mem_size: u32,
    /// Ticks per second of the device clock `omp_get_wtime` reads.
    pub clock_frequency: u64,
    /// Host-to-device function pointer table for indirect calls; none (0).
    pub indirect_call_table: u64,
    pub indirect_call_table_size: u64,
    /// Warps (NVIDIA) that can be resident at once on the whole device.
    pub hardware_parallelism: u64,
}

impl DeviceEnvironment {
    /// The structure's little-endian bytes.
    pub fn to_bytes(&self) -> [u8; DEVICE_ENVIRONMENT_SIZE] {
        let mut b = [0u8; DEVICE_ENVIRONMENT_SIZE];
        b[0..4].copy_from_slice(&self.debug_kind.to_le_bytes());
        b[4..8].copy_from_slice(&self.num_devices.to_le_bytes());
        b[8..12].copy_from_slice(&self.device_num.to_le_bytes());
        b[12..16].copy_from_slice(&self.dynamic_mem_size.to_le_bytes());
        b[16..24].copy_from_slice(&self.clock_frequency.to_le_bytes());
        b[24..32].copy_from_slice(&self.indirect_call_table.to_le_bytes());
        b[32..40].copy_from_slice(&self.indirect_call_table_size.to_le_bytes());
        b[40..48].copy_from_slice(&self.hardware_parallelism.to_le_bytes());
        b
    }

    /// Whether an image's `__omp_rtl_device_environment` of `size` bytes
    /// can be written: an error naming the image otherwise.
    pub fn check_size(image: &str, size: u64) -> Result<()> {
        if size == DEVICE_ENVIRONMENT_SIZE as u64 {
            return Ok(());
        }
        Err(Error::invalid_binary(format!(
            "{image}: its {DEVICE_ENVIRONMENT_GLOBAL} is {size} bytes, expected {DEVICE_ENVIRONMENT_SIZE}: the image was built against another OpenMP device runtime than LLVM 22's ABI"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorCode;

    /// A kernel environment as clang-22 emits it, with the pointers.
    fn env(flags: [u8; 3], ints: [i32; 6]) -> Vec<u8> {
        let mut b = vec![0u8; 48];
        b[..3].copy_from_slice(&flags);
        for (i, v) in ints.iter().enumerate() {
            b[4 + 4 * i..8 + 4 * i].copy_from_slice(&v.to_le_bytes());
        }
        b[32..40].copy_from_slice(&0x1000u64.to_le_bytes());
        b[40..48].copy_from_slice(&0x2000u64.to_le_bytes());
        b
    }

    #[test]
    fn clang_22s_environments_parse() {
        // `target teams distribute parallel for reduction(+:double)`:
        // clang-22 -O1 emits { 0, 0, 2, 1, 128, 0, 0, 8, 1024 }.
        let k = KernelEnvironment::parse("sum", &env([0, 0, 2], [1, 128, 0, 0, 8, 1024])).unwrap();
        assert_eq!(k.mode, ExecMode::Spmd);
        assert_eq!((k.min_threads, k.max_threads), (1, 128));
        assert_eq!(k.reduction_buffer_bytes(), Some(8 * 1024));
        // `target teams num_teams(4) thread_limit(64)` at -O0: generic.
        let k = KernelEnvironment::parse("lim", &env([1, 1, 1], [1, 64, 4, 4, 0, 0])).unwrap();
        assert!(k.use_generic_state_machine && k.may_use_nested_parallelism);
        assert_eq!(k.mode, ExecMode::Generic);
        assert_eq!((k.min_teams, k.max_teams), (4, 4));
        assert_eq!(k.reduction_buffer_bytes(), None);
        // Bare and generic-SPMD; a buffer needs both sizes.
        let k = KernelEnvironment::parse("b", &env([0, 0, 0], [0, 0, 0, 0, 8, 0])).unwrap();
        assert_eq!((k.mode, k.reduction_buffer_bytes()), (ExecMode::Bare, None));
        let k = KernelEnvironment::parse("g", &env([0, 0, 3], [-1, -1, -1, -1, 0, 0])).unwrap();
        assert_eq!((k.mode, k.max_threads), (ExecMode::GenericSpmd, -1));
    }

    #[test]
    fn other_layouts_are_errors_naming_the_kernel() {
        let e = KernelEnvironment::parse("k1", &[0u8; 40]).unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidBinary);
        assert!(
            e.message().contains("kernel 'k1'")
                && e.message()
                    .contains("k1_kernel_environment) is 40 bytes, expected 48")
                && e.message().contains("another OpenMP device runtime"),
            "{e}"
        );
        let e = KernelEnvironment::parse("k2", &env([0, 0, 7], [0; 6])).unwrap_err();
        assert!(
            e.message()
                .contains("kernel 'k2': unknown execution mode 7"),
            "{e}"
        );
        let e = KernelEnvironment::parse("k3", &env([2, 0, 2], [0; 6])).unwrap_err();
        assert!(e.message().contains("UseGenericStateMachine is 2"), "{e}");
        let e =
            KernelEnvironment::parse("k4", &env([0, 0, 2], [1, 128, 0, 0, -8, 1024])).unwrap_err();
        assert!(e.message().contains("ReductionDataSize is -8"), "{e}");
    }

    #[test]
    fn parsing_any_bytes_never_panics() {
        // A small deterministic fuzz: every length up to 64, every mode
        // byte, pseudo-random contents.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for len in 0..=64 {
            for mode in 0..=255u8 {
                let mut b: Vec<u8> = (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x as u8
                    })
                    .collect();
                if len > 2 {
                    b[2] = mode;
                }
                if let Ok(k) = KernelEnvironment::parse("f", &b) {
                    assert_eq!(len, 48);
                    assert!(mode <= 3);
                    let _ = k.reduction_buffer_bytes();
                }
            }
        }
    }

    #[test]
    fn launch_and_device_environment_bytes() {
        let l = launch_environment(0x7000_0000_1234);
        assert_eq!(&l[..8], &[0; 8]);
        assert_eq!(
            u64::from_le_bytes(l[8..].try_into().unwrap()),
            0x7000_0000_1234
        );
        let d = DeviceEnvironment {
            debug_kind: 1,
            num_devices: 2,
            device_num: 1,
            dynamic_mem_size: 0,
            clock_frequency: 1_000_000_000,
            indirect_call_table: 0,
            indirect_call_table_size: 0,
            hardware_parallelism: 132 * 64,
        };
        let b = d.to_bytes();
        assert_eq!(&b[..16], &[1, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            u64::from_le_bytes(b[16..24].try_into().unwrap()),
            1_000_000_000
        );
        assert_eq!(u64::from_le_bytes(b[40..48].try_into().unwrap()), 8448);
        assert!(DeviceEnvironment::check_size("image", 48).is_ok());
        let e = DeviceEnvironment::check_size("CUDA device 0: image", 40).unwrap_err();
        assert!(
            e.message().contains(
                "CUDA device 0: image: its __omp_rtl_device_environment is 40 bytes, expected 48"
            ),
            "{e}"
        );
    }
}

//! The remote protocol's messages as both forwarding plugins build them.

use offload_core::plugin::{Backend, DeviceInfo, DevicePtr, DeviceType, KernelArgs, LaunchConfig};
use offload_image::amdgpu::TargetId;
use offload_image::DeviceImage;
use offload_proto::{
    queue_op, CopyRequest, DeviceDesc, FillRequest, ImageDesc, KeyValue, Launch, ReadRequest,
    WriteChunk,
};

/// A server's device as a device of this process. `at` says where it lives
/// (`name @ at`), `uid` prefixes the server's uid (`uid/<server's uid>`),
/// `via` follows the server's driver version (`<version> via <via>`).
pub fn device_info(d: &DeviceDesc, at: &str, uid: &str, via: &str) -> DeviceInfo {
    let device_type = match d.device_type {
        2 => DeviceType::Gpu,
        4 => DeviceType::Host,
        _ => DeviceType::Cpu,
    };
    DeviceInfo {
        name: format!("{} @ {at}", d.name),
        vendor: d.vendor.clone(),
        product_name: d.product_name.clone(),
        device_type,
        backend: Backend::Remote,
        triple: d.triple.clone(),
        arch: d.arch.clone(),
        target_ids: target_ids(d),
        uid: format!("{uid}/{}", d.uid),
        driver_version: format!("{} via {via}", d.driver_version),
        global_memory_bytes: d.global_memory_bytes,
        group_memory_bytes: d.group_memory_bytes,
        compute_units: d.compute_units,
        max_group_size: d.max_group_size,
        max_group_size_per_dim: dim3(&d.max_group_size_per_dim),
        max_num_groups: dim3(&d.max_num_groups),
        clock_mhz: d.clock_mhz,
        address_bits: d.address_bits,
    }
}

/// The target IDs a server lists for its AMD GPU; one that does not parse
/// is left out (the server's own plugin checks what it loads anyway), and
/// other devices have none.
fn target_ids(d: &DeviceDesc) -> Vec<TargetId> {
    if !offload_core::image::triples_compatible(&d.triple, offload_image::amdgpu::TRIPLE) {
        return Vec::new();
    }
    d.target_ids
        .iter()
        .filter_map(|t| match TargetId::parse(t) {
            Ok(id) => Some(id),
            Err(e) => {
                tracing::debug!("device {} of the server: {e}", d.id);
                None
            }
        })
        .collect()
}

/// Three dimensions from the wire, missing ones 1.
pub fn dim3(v: &[u32]) -> [u32; 3] {
    [
        v.first().copied().unwrap_or(1),
        v.get(1).copied().unwrap_or(1),
        v.get(2).copied().unwrap_or(1),
    ]
}

/// A launch dimension for the wire: empty for `[1, 1, 1]` (what the serving
/// side assumes), two vectors less to build and decode per launch.
fn dims(d: [u32; 3]) -> Vec<u32> {
    if d == [1, 1, 1] {
        Vec::new()
    } else {
        d.to_vec()
    }
}

/// An image, with its bytes, for the server.
pub fn image_desc(image: &DeviceImage<'_>) -> ImageDesc {
    ImageDesc {
        bytes: image.bytes.to_vec().into(),
        triple: image.triple.clone().unwrap_or_default(),
        arch: image.arch.clone().unwrap_or_default(),
        metadata: image
            .metadata
            .iter()
            .map(|(k, v)| KeyValue {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        strings: image
            .strings
            .iter()
            .map(|(k, v)| KeyValue {
                key: k.clone(),
                value: v.clone(),
            })
            .collect(),
        image_kind: image.image_kind.map(|k| k.to_u16() as u32).unwrap_or(0),
        offload_kind: image.offload_kind.map(|k| k.to_u16() as u32).unwrap_or(0),
    }
}

/// Launch `kernel` (the server's kernel id).
pub fn launch(kernel: u64, args: KernelArgs<'_>, config: &LaunchConfig) -> queue_op::Op {
    let (words, packed, use_words) = match args {
        KernelArgs::Words(w) => (w.to_vec(), Vec::new(), true),
        KernelArgs::Packed(p) => (Vec::new(), p.to_vec(), false),
    };
    queue_op::Op::Launch(Launch {
        kernel,
        words,
        packed: packed.into(),
        use_words,
        num_groups: dims(config.num_groups),
        group_size: dims(config.group_size),
        dyn_group_memory: config.dyn_group_memory,
        tripcount: config.tripcount,
    })
}

/// `data` to `dst` on `device` (`data` empty: the bytes follow as bulk data,
/// `size` of them).
pub fn write(device: u32, dst: DevicePtr, size: usize, data: Vec<u8>) -> WriteChunk {
    WriteChunk {
        device,
        dst: dst.0,
        size: size as u64,
        data: data.into(),
    }
}

/// `size` bytes from `src` on `device`.
pub fn read(device: u32, src: DevicePtr, size: usize) -> ReadRequest {
    ReadRequest {
        device,
        src: src.0,
        size: size as u64,
        chunk_size: 0,
    }
}

/// A copy between two devices of one server (or within one).
pub fn copy(
    src_device: u32,
    src: DevicePtr,
    dst_device: u32,
    dst: DevicePtr,
    size: usize,
) -> queue_op::Op {
    queue_op::Op::Copy(CopyRequest {
        src_device,
        src: src.0,
        dst_device,
        dst: dst.0,
        size: size as u64,
    })
}

/// Fill `size` bytes at `dst` with `pattern` repeated.
pub fn fill(device: u32, dst: DevicePtr, pattern: &[u8], size: usize) -> queue_op::Op {
    queue_op::Op::Fill(FillRequest {
        device,
        dst: dst.0,
        pattern: pattern.to_vec().into(),
        size: size as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launches_leave_out_unit_dimensions() {
        let mut config = LaunchConfig {
            num_groups: [1, 1, 1],
            group_size: [64, 1, 1],
            dyn_group_memory: 0,
            tripcount: 0,
        };
        let queue_op::Op::Launch(l) = launch(9, KernelArgs::Words(&[1, 2]), &config) else {
            panic!("not a launch");
        };
        assert_eq!((l.kernel, l.use_words, l.words), (9, true, vec![1, 2]));
        assert!(l.num_groups.is_empty());
        assert_eq!(l.group_size, [64, 1, 1]);
        assert_eq!(dim3(&l.num_groups), [1, 1, 1]);
        config.num_groups = [2, 3, 4];
        let queue_op::Op::Launch(l) = launch(9, KernelArgs::Packed(&[5; 8]), &config) else {
            panic!("not a launch");
        };
        assert_eq!(dim3(&l.num_groups), [2, 3, 4]);
        assert!(!l.use_words && l.words.is_empty() && l.packed.len() == 8);
    }
}

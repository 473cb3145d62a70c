//! What a session's requests do, whichever transport carried them.
//!
//! The gRPC service (`service.rs`) and the MPI serving loop (`mpi.rs`) only
//! decode a request, call the function here that carries it out on the
//! [`Session`], and encode the reply in their own way; queue operations go
//! through [`run_queue_op`](crate::service::run_queue_op) the same way.
//! Bulk data (gRPC streams and the data channel; MPI messages) and session
//! set-up stay with their transport.

use std::sync::Arc;

use offload_core::plugin::AllocKind;
use offload_core::{Error, Result, Runtime};
use offload_image::metadata::Metadata;
use offload_proto::*;

use crate::session::{Session, ShippedImage};

/// The devices a client sees in its Hello.
pub(crate) fn device_descs(runtime: &Runtime) -> Vec<DeviceDesc> {
    runtime.devices().iter().map(|d| device_desc(d)).collect()
}

pub(crate) fn device_desc(d: &offload_core::Device) -> DeviceDesc {
    let i = d.info();
    DeviceDesc {
        id: d.id() as u32,
        plugin: d.plugin_name().to_string(),
        name: i.name.clone(),
        vendor: i.vendor.clone(),
        product_name: i.product_name.clone(),
        device_type: i.device_type as u32,
        backend: format!("{:?}", i.backend).to_lowercase(),
        triple: i.triple.clone(),
        arch: i.arch.clone(),
        target_ids: i.target_ids.iter().map(ToString::to_string).collect(),
        uid: i.uid.clone(),
        driver_version: i.driver_version.clone(),
        global_memory_bytes: i.global_memory_bytes,
        group_memory_bytes: i.group_memory_bytes,
        compute_units: i.compute_units,
        max_group_size: i.max_group_size,
        max_group_size_per_dim: i.max_group_size_per_dim.to_vec(),
        max_num_groups: i.max_num_groups.to_vec(),
        clock_mhz: i.clock_mhz,
        address_bits: i.address_bits,
    }
}

fn alloc_kind(k: u32) -> Result<AllocKind> {
    match k {
        0 => Ok(AllocKind::Host),
        1 => Ok(AllocKind::Device),
        2 => Ok(AllocKind::Shared),
        _ => Err(Error::invalid_argument(format!(
            "unknown allocation kind {k}"
        ))),
    }
}

pub(crate) fn alloc(s: &Session, r: &AllocRequest) -> Result<AllocReply> {
    let p = s.alloc(r.device, r.size, alloc_kind(r.kind)?)?;
    Ok(AllocReply { ptr: p.0 })
}

/// Waits for copies in flight on the allocation (blocking).
pub(crate) fn free(s: &Session, r: &FreeRequest) -> Result<()> {
    s.free(r.device, r.ptr)
}

pub(crate) fn register_binary(s: &Session, r: RegisterBinaryRequest) -> RegisterBinaryReply {
    let n = r.images.len();
    let bytes: usize = r.images.iter().map(|i| i.bytes.len()).sum();
    let ids = s.add_images(r.client_binary, r.images.into_iter().map(shipped).collect());
    tracing::info!(session = %s.id, binary = r.client_binary, images = n, bytes, "binary registered");
    RegisterBinaryReply { image_ids: ids }
}

pub(crate) fn unregister_binary(s: &Session, r: &UnregisterBinaryRequest) -> Result<()> {
    s.remove_binary(r.client_binary)?;
    tracing::info!(session = %s.id, binary = r.client_binary, "binary unregistered");
    Ok(())
}

/// Loads the requested image (a registered one, or one sent with the
/// request) on the requested device and files the program; returns its id.
/// Blocking: the load may compile.
pub(crate) fn load_program(s: &Session, r: LoadProgramRequest) -> Result<u64> {
    let (image, binary) = match r.source {
        Some(load_program_request::Source::ImageId(id)) => s.image(id)?,
        Some(load_program_request::Source::Image(desc)) => (Arc::new(shipped(desc)), 0),
        None => return Err(Error::invalid_argument("load without an image")),
    };
    let program = s.load(r.device, &image.as_device_image())?;
    let id = s.add_program(r.device, program, binary);
    tracing::info!(session = %s.id, device = r.device, program = id, "program loaded");
    Ok(id)
}

pub(crate) fn unload_program(s: &Session, r: &UnloadProgramRequest) -> Result<()> {
    s.unload_program(r.program)
}

pub(crate) fn get_kernel(s: &Session, r: &SymbolRequest) -> Result<KernelReply> {
    let (device, program) = s.program(r.program)?;
    let k = program.kernel(&r.name)?;
    let preferred = k.preferred_group_size(0);
    let id = s.add_kernel(device, r.program, k);
    Ok(KernelReply {
        kernel: id,
        preferred_group_size: preferred,
    })
}

pub(crate) fn get_global(s: &Session, r: &SymbolRequest) -> Result<GlobalReply> {
    let (_, program) = s.program(r.program)?;
    let (ptr, size) = program.global(&r.name)?;
    Ok(GlobalReply { ptr: ptr.0, size })
}

/// An image as the client shipped it, its format detected here.
pub(crate) fn shipped(desc: ImageDesc) -> ShippedImage {
    let mut metadata = Metadata::new();
    for kv in desc.metadata {
        metadata.insert(kv.key, kv.value);
    }
    ShippedImage {
        format: offload_image::detect(&desc.bytes),
        bytes: desc.bytes.to_vec(),
        triple: (!desc.triple.is_empty()).then_some(desc.triple),
        arch: (!desc.arch.is_empty()).then_some(desc.arch),
        strings: desc
            .strings
            .into_iter()
            .map(|kv| (kv.key, kv.value))
            .collect(),
        metadata,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use offload_image::ImageFormat;

    #[test]
    fn unknown_allocation_kinds_are_invalid_arguments() {
        let e = alloc_kind(3).unwrap_err();
        assert_eq!(e.code(), offload_core::ErrorCode::InvalidArgument);
        assert!(e.to_string().contains("unknown allocation kind 3"), "{e}");
        assert!(matches!(alloc_kind(1), Ok(AllocKind::Device)));
    }

    #[test]
    fn shipped_images_keep_their_strings_and_metadata() {
        let img = shipped(ImageDesc {
            bytes: b"not an image".to_vec().into(),
            triple: "x86_64-pc-linux-gnu".into(),
            arch: String::new(),
            ..Default::default()
        });
        assert_eq!(img.triple.as_deref(), Some("x86_64-pc-linux-gnu"));
        assert_eq!(img.arch, None);
        assert_eq!(img.format, ImageFormat::Unknown);
    }
}

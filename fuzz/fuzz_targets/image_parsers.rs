//! Feeds arbitrary bytes to every parser of `offload-image`, and to the
//! loader-safety validator `validate::x86_64_shared_object`.
//!
//! Besides "no panic", it checks two round-trip properties: whatever parses
//! as an `OffloadBinary` or a `1OMP` header parses the same after being
//! written back.

#![no_main]

use libfuzzer_sys::fuzz_target;
use offload_image::{
    amdgpu, cuda, detect, elf, images_in_host_binary, metadata, offload_binary, unwrap, validate,
};

fuzz_target!(|data: &[u8]| {
    let _ = detect(data);
    let _ = unwrap(data);
    let _ = elf::info(data);
    let _ = elf::defined_symbols(data);
    let _ = elf::offloading_sections(data);
    let _ = elf::symtab_names(data);
    let _ = elf::object_sizes(data);
    let _ = images_in_host_binary(data);
    let _ = cuda::ptx_info(data);
    let _ = cuda::arch_of(data);
    let _ = cuda::fatbin_runs_on(data, cuda::Sm::from_number(90));
    if let Ok(regs) = cuda::cubin_registers(data) {
        // Each count is one 12-byte record of a `.nv.info` section (several
        // section headers may name the same bytes).
        let sections = elf::sections_named(data, ".nv.info").unwrap_or_default();
        assert!(regs.len() <= sections.iter().map(|s| s.len() / 12).sum::<usize>());
    }
    if let Ok(entries) = cuda::fatbin_entries(data) {
        for e in entries {
            let _ = cuda::cubin_registers(e.payload);
        }
    }
    let _ = amdgpu::code_object_processor(data);
    let _ = amdgpu::TargetId::of_code_object(data);
    if let Ok(t) = amdgpu::TargetId::parse(&String::from_utf8_lossy(data)) {
        assert_eq!(amdgpu::TargetId::parse(&t.to_string()), Ok(t));
    }
    let _ = amdgpu::code_object_metadata(data);
    if let Ok(meta) = amdgpu::parse_metadata(data) {
        // Every kernel and argument took at least one byte of MessagePack.
        let args: usize = meta.kernels.iter().map(|k| k.args.len()).sum();
        assert!(meta.kernels.len() + args <= data.len());
    }
    if let Ok(checked) = validate::x86_64_shared_object(data) {
        // Whatever is accepted names at most as many symbols as fit.
        assert!(checked.symbols <= data.len() as u64 / 24);
    }

    if let Ok(all) = offload_binary::parse_all(data) {
        let again = offload_binary::write(&all);
        assert_eq!(offload_binary::parse_all(&again).unwrap(), all);
    }
    if let Ok((_, used)) = offload_binary::parse(data) {
        assert!(used <= data.len());
    }
    if let Ok((meta, image)) = metadata::parse(data) {
        let again = metadata::write(&meta, image);
        let (m2, i2) = metadata::parse(&again).unwrap();
        assert_eq!(m2, meta);
        assert_eq!(i2, image);
    }
});

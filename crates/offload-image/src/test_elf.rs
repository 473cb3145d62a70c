//! A tiny ELF writer for tests (also included by the integration tests).

/// Builds a little-endian ELF64 with the given machine and type, a
/// `.llvm.offloading` section holding `offloading` (if any), and a
/// `.symtab` defining `syms` (name, is_function, size).
pub fn build(
    machine: u16,
    e_type: u16,
    offloading: Option<&[u8]>,
    syms: &[(&str, bool, u64)],
) -> Vec<u8> {
    let mut shstrtab = vec![0u8];
    let mut name = |s: &str| {
        let off = shstrtab.len() as u32;
        shstrtab.extend_from_slice(s.as_bytes());
        shstrtab.push(0);
        off
    };
    let n_shstrtab = name(".shstrtab");
    let n_off = name(".llvm.offloading");
    let n_symtab = name(".symtab");
    let n_strtab = name(".strtab");
    let n_text = name(".text");

    let mut strtab = vec![0u8];
    let mut symtab = vec![0u8; 24];
    for (n, func, size) in syms {
        let off = strtab.len() as u32;
        strtab.extend_from_slice(n.as_bytes());
        strtab.push(0);
        let mut s = Vec::new();
        s.extend_from_slice(&off.to_le_bytes());
        s.push((1 << 4) | if *func { 2 } else { 1 }); // GLOBAL, FUNC/OBJECT
        s.push(0);
        s.extend_from_slice(&5u16.to_le_bytes()); // defined in .text
        s.extend_from_slice(&0u64.to_le_bytes());
        s.extend_from_slice(&size.to_le_bytes());
        symtab.extend_from_slice(&s);
    }
    // An undefined symbol that must not be listed.
    {
        let off = strtab.len() as u32;
        strtab.extend_from_slice(b"undefined_fn\0");
        let mut s = Vec::new();
        s.extend_from_slice(&off.to_le_bytes());
        s.push((1 << 4) | 2);
        s.push(0);
        s.extend_from_slice(&0u16.to_le_bytes());
        s.extend_from_slice(&[0; 16]);
        symtab.extend_from_slice(&s);
    }

    let mut out = vec![0u8; 64];
    let place = |out: &mut Vec<u8>, data: &[u8]| {
        while !out.len().is_multiple_of(8) {
            out.push(0);
        }
        let off = out.len() as u64;
        out.extend_from_slice(data);
        (off, data.len() as u64)
    };
    let shstr = place(&mut out, &shstrtab);
    let offl = place(&mut out, offloading.unwrap_or(&[]));
    let symt = place(&mut out, &symtab);
    let strt = place(&mut out, &strtab);
    let text = place(&mut out, &[0xc3; 16]);
    while !out.len().is_multiple_of(8) {
        out.push(0);
    }
    let shoff = out.len() as u64;
    let sh = |out: &mut Vec<u8>,
              name: u32,
              ty: u32,
              flags: u64,
              (off, size): (u64, u64),
              link: u32,
              info: u32,
              entsize: u64| {
        out.extend_from_slice(&name.to_le_bytes());
        out.extend_from_slice(&ty.to_le_bytes());
        out.extend_from_slice(&flags.to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes());
        out.extend_from_slice(&off.to_le_bytes());
        out.extend_from_slice(&size.to_le_bytes());
        out.extend_from_slice(&link.to_le_bytes());
        out.extend_from_slice(&info.to_le_bytes());
        out.extend_from_slice(&8u64.to_le_bytes());
        out.extend_from_slice(&entsize.to_le_bytes());
    };
    sh(&mut out, 0, 0, 0, (0, 0), 0, 0, 0);
    sh(&mut out, n_shstrtab, 3, 0, shstr, 0, 0, 0);
    let off_ty = if offloading.is_some() { 0x6fff_4c0b } else { 1 };
    sh(&mut out, n_off, off_ty, 0, offl, 0, 0, 0);
    sh(&mut out, n_symtab, 2, 0, symt, 4, 1, 24);
    sh(&mut out, n_strtab, 3, 0, strt, 0, 0, 0);
    sh(&mut out, n_text, 1, 6, text, 0, 0, 0);

    let h = &mut out[..64];
    h[..4].copy_from_slice(b"\x7fELF");
    h[4] = 2; // ELFCLASS64
    h[5] = 1; // little-endian
    h[6] = 1; // EV_CURRENT
    h[16..18].copy_from_slice(&e_type.to_le_bytes());
    h[18..20].copy_from_slice(&machine.to_le_bytes());
    h[20..24].copy_from_slice(&1u32.to_le_bytes());
    h[40..48].copy_from_slice(&shoff.to_le_bytes());
    h[52..54].copy_from_slice(&64u16.to_le_bytes()); // e_ehsize
    h[58..60].copy_from_slice(&64u16.to_le_bytes()); // e_shentsize
    h[60..62].copy_from_slice(&6u16.to_le_bytes()); // e_shnum
    h[62..64].copy_from_slice(&1u16.to_le_bytes()); // e_shstrndx
    out
}

/// A cubin-like ELF (`EM_CUDA`, ABI version 7, sm_90 in `e_flags`) whose
/// `.nv.info` section holds `info`, with function symbols k1 and k2.
pub fn cubin_with_info(info: &[u8]) -> Vec<u8> {
    let mut e = build(190, 2, Some(info), &[("k1", true, 16), ("k2", true, 16)]);
    let from = b".llvm.offloading\0";
    let at = e.windows(from.len()).position(|w| w == from).unwrap();
    e[at..at + from.len()].copy_from_slice(b".nv.info\0\0\0\0\0\0\0\0\0");
    e[8] = 7;
    e[48..52].copy_from_slice(&90u32.to_le_bytes());
    e
}

/// A bare ELF32 header (no sections) with the given byte order.
pub fn header32(machine: u16, e_type: u16, little_endian: bool) -> Vec<u8> {
    let mut h = vec![0u8; 52];
    h[..4].copy_from_slice(b"\x7fELF");
    h[4] = 1; // ELFCLASS32
    h[5] = if little_endian { 1 } else { 2 };
    h[6] = 1;
    let put16 = |h: &mut [u8], at: usize, v: u16| {
        let b = if little_endian {
            v.to_le_bytes()
        } else {
            v.to_be_bytes()
        };
        h[at..at + 2].copy_from_slice(&b);
    };
    put16(&mut h, 16, e_type);
    put16(&mut h, 18, machine);
    put16(&mut h, 40, 52); // e_ehsize
    h[20..24].copy_from_slice(&if little_endian {
        1u32.to_le_bytes()
    } else {
        1u32.to_be_bytes()
    });
    h
}

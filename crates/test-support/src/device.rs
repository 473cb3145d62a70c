//! Bytes in and out of devices, for the tests that drive devices through
//! offload-core (the `device` feature).

/// The bytes of `v`, as a kernel's packed argument block.
///
/// `T` must have no padding bytes: an integer, a float, an array of those,
/// or a `#[repr(C)]` struct of them that writes its padding out as fields.
/// Every caller in the tests passes such a type.
pub fn packed<T: Copy>(v: &T) -> &[u8] {
    // SAFETY: `v` is a live `T`, so `size_of::<T>()` bytes from it are
    // readable, and the slice borrows `v` for no longer than `v` lives.
    // The bytes are initialised because callers pass padding-free types
    // only (see above): every byte belongs to an initialised field.
    unsafe { std::slice::from_raw_parts((v as *const T).cast(), std::mem::size_of::<T>()) }
}

/// Copy `data` to `at` on `dev`, now.
pub fn write(
    dev: &offload_core::Device,
    at: offload_core::DevicePtr,
    data: &[u8],
) -> offload_core::Result<()> {
    // SAFETY: `data` is a borrowed slice, readable for its `len()` bytes
    // until this returns, and `Device::copy_to_device` is synchronous.
    unsafe { dev.copy_to_device(at, data.as_ptr(), data.len()) }
}

/// Fill `out` with `out.len()` bytes copied from `at` on `dev`, now.
pub fn read_into(
    dev: &offload_core::Device,
    at: offload_core::DevicePtr,
    out: &mut [u8],
) -> offload_core::Result<()> {
    // SAFETY: `out` is an exclusively borrowed slice, writable for its
    // `len()` bytes until this returns; `Device::copy_from_device` is
    // synchronous, and any bytes are valid `u8`s.
    unsafe { dev.copy_from_device(out.as_mut_ptr(), at, out.len()) }
}

/// `n` bytes copied from `at` on `dev`, now.
pub fn read(dev: &offload_core::Device, at: offload_core::DevicePtr, n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n];
    read_into(dev, at, &mut out).unwrap();
    out
}

/// Copy the elements of `data` to `at` on `dev`, now (panics on failure).
///
/// `T` must have no padding bytes (integers, floats, arrays of them).
pub fn write_values<T: Copy>(dev: &offload_core::Device, at: offload_core::DevicePtr, data: &[T]) {
    // SAFETY: `data` is a borrowed slice of padding-free `T` (see above),
    // so all `size_of_val(data)` bytes are initialised and readable.
    let bytes = unsafe {
        std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data))
    };
    write(dev, at, bytes).unwrap();
}

/// `n` elements of `T` copied from `at` on `dev`, now (panics on failure).
///
/// `T` must be a type for which any bytes are a valid value (integers,
/// floats, arrays of them).
pub fn read_values<T: Copy + Default>(
    dev: &offload_core::Device,
    at: offload_core::DevicePtr,
    n: usize,
) -> Vec<T> {
    let mut out = vec![T::default(); n];
    let size = std::mem::size_of_val(out.as_slice());
    // SAFETY: `out` is an exclusively borrowed vector of `size` bytes, and
    // any bytes are valid `T` (see above).
    let bytes = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), size) };
    read_into(dev, at, bytes).unwrap();
    out
}

//! Whether the dynamic loader could find a vendor library (the CUDA driver,
//! the HSA runtime) at all, asked before `dlopen`.
//!
//! On a machine without a GPU (most machines the runtime starts on), a
//! failing `dlopen("libcuda.so.1")` walks every directory of
//! `LD_LIBRARY_PATH` with each hardware-capability subdirectory and then the
//! system directories: about 90 us, most of a runtime's whole start-up.
//! Looking where the loader looks for the exact name costs a few stats and
//! one read of its cache. The check only ever says "maybe" or "certainly
//! not": an unusual setup it does not know about (a library found through
//! an `RPATH`) is still reachable through the plugin's variable naming the
//! library's path (`OFFLOAD_CUDA_DRIVER`, `OFFLOAD_HSA_RUNTIME`).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The loader's cache of library locations (`ldconfig`).
pub const LD_SO_CACHE: &str = "/etc/ld.so.cache";

/// Directories the loader searches after its cache (Debian's multiarch
/// directory of this machine first).
pub const SYSTEM_DIRS: &[&str] = &[
    #[cfg(target_arch = "x86_64")]
    "/lib/x86_64-linux-gnu",
    #[cfg(target_arch = "x86_64")]
    "/usr/lib/x86_64-linux-gnu",
    #[cfg(target_arch = "aarch64")]
    "/lib/aarch64-linux-gnu",
    #[cfg(target_arch = "aarch64")]
    "/usr/lib/aarch64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
];

/// Whether `dlopen(soname)` may find a library: `soname` is in one of the
/// `LD_LIBRARY_PATH` directories, in the loader's cache, or in one of
/// `system_dirs`. A name with a slash is opened as a path: always "maybe".
pub fn findable(
    soname: &OsStr,
    ld_library_path: Option<&OsStr>,
    cache: &Path,
    system_dirs: &[&str],
) -> bool {
    if soname.as_bytes().contains(&b'/') {
        return true;
    }
    let in_dir = |dir: &Path| !dir.as_os_str().is_empty() && dir.join(soname).exists();
    if let Some(path) = ld_library_path {
        // Empty entries mean the current directory to the loader.
        let dirs = path.as_bytes().split(|&b| b == b':' || b == b';');
        if dirs
            .map(|d| if d.is_empty() { b"." } else { d })
            .any(|d| in_dir(Path::new(OsStr::from_bytes(d))))
        {
            return true;
        }
    }
    if std::fs::read(cache).is_ok_and(|bytes| cache_names(&bytes, soname.as_bytes())) {
        return true;
    }
    system_dirs.iter().any(|d| in_dir(Path::new(d)))
}

/// Whether the loader's cache lists `soname`.
fn cache_names(cache: &[u8], soname: &[u8]) -> bool {
    match cache_keys(cache) {
        Some(mut keys) => keys.any(|key| {
            // The key's string, from its offset: `soname` then NUL.
            cache
                .get(key..)
                .is_some_and(|s| s.starts_with(soname) && s.get(soname.len()) == Some(&0))
        }),
        None => strings_name(cache, soname),
    }
}

/// The offsets of the library names of a cache in glibc's current format
/// (`glibc-ld.so.cache1.1`: a 48-byte header, then 24-byte entries whose
/// `key` is the offset of a NUL-terminated name from the file's start);
/// `None` for any other layout.
fn cache_keys(cache: &[u8]) -> Option<impl Iterator<Item = usize> + '_> {
    const MAGIC: &[u8] = b"glibc-ld.so.cache1.1";
    const HEADER: usize = 48;
    const ENTRY: usize = 24;
    let word = |b: &[u8]| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize;
    if !cache.starts_with(MAGIC) || cache.len() < HEADER {
        return None;
    }
    let count = word(&cache[20..24]);
    let end = HEADER.checked_add(count.checked_mul(ENTRY)?)?;
    let entries = cache.get(HEADER..end)?;
    Some(entries.chunks_exact(ENTRY).map(move |e| word(&e[4..8])))
}

/// Any other cache layout: whether one of its NUL-terminated strings is
/// `soname` or a path ending in `/soname`.
fn strings_name(cache: &[u8], soname: &[u8]) -> bool {
    // The part after the last NUL is not a whole string.
    cache.split(|&b| b == 0).rev().skip(1).any(|s| {
        s.strip_suffix(soname)
            .is_some_and(|head| head.is_empty() || head.ends_with(b"/"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAME: &str = "libcuda.so.1";

    fn names(cache: &[u8]) -> bool {
        cache_names(cache, NAME.as_bytes())
    }

    /// A cache in the current format with `names` as its entries.
    fn new_format(names: &[&str]) -> Vec<u8> {
        let mut strings = Vec::new();
        let header = 48 + 24 * names.len();
        let mut out = b"glibc-ld.so.cache1.1".to_vec();
        out.extend_from_slice(&(names.len() as u32).to_ne_bytes());
        out.resize(48, 0);
        for name in names {
            let key = header + strings.len();
            strings.extend_from_slice(name.as_bytes());
            strings.push(0);
            let value = header + strings.len();
            strings.extend_from_slice(format!("/usr/lib/{name}").as_bytes());
            strings.push(0);
            out.extend_from_slice(&1i32.to_ne_bytes());
            out.extend_from_slice(&(key as u32).to_ne_bytes());
            out.extend_from_slice(&(value as u32).to_ne_bytes());
            out.extend_from_slice(&[0; 12]);
        }
        out.extend_from_slice(&strings);
        out
    }

    #[test]
    fn cache_entries_are_matched_whole() {
        assert!(names(&new_format(&["libc.so.6", NAME])));
        assert!(!names(&new_format(&[
            "libc.so.6",
            "libcuda.so.10",
            "xlibcuda.so.1"
        ])));
        assert!(!names(&new_format(&[])));
        // A truncated or corrupt cache: no panic, no match.
        let mut bad = new_format(&[NAME]);
        bad.truncate(60);
        assert!(!names(&bad));
        bad[20] = 0xff;
        assert!(!names(&bad));

        // Other layouts: scanned string by string.
        assert!(names(
            b"ld.so-1.7.0\0libcuda.so.1\0/usr/lib/x/libcuda.so.1\0"
        ));
        assert!(names(b"\0/opt/nvidia/libcuda.so.1\0"));
        assert!(names(b"libcuda.so.1\0"));
        assert!(!names(b"\0libcuda.so.10\0/usr/lib/libcuda.so.10\0"));
        assert!(!names(b"\0xlibcuda.so.1\0"));
        assert!(!names(b"\0libcuda.so.1"));
        assert!(!names(b""));
    }

    /// This machine's own cache (glibc >= 2.32 writes the current format)
    /// is read entry by entry and lists the C library.
    #[test]
    fn the_system_cache_is_read_by_its_entries() {
        let cache = std::fs::read(LD_SO_CACHE).expect("the dynamic loader's cache");
        assert!(cache_keys(&cache).is_some(), "not in the current format");
        assert!(cache_names(&cache, b"libc.so.6"));
    }

    #[test]
    fn found_through_ld_library_path_the_cache_or_system_dirs() {
        let tmp = tempfile::tempdir().unwrap();
        let lib_dir = tmp.path().join("lib");
        std::fs::create_dir(&lib_dir).unwrap();
        let empty = tmp.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        let no_cache = tmp.path().join("no-cache");
        let name = OsStr::new(NAME);
        let none: &[&str] = &[];

        // Nowhere.
        assert!(!findable(name, None, &no_cache, none));
        let path = format!("{}:{}", empty.display(), lib_dir.display());
        assert!(!findable(name, Some(OsStr::new(&path)), &no_cache, none));

        // In a directory of LD_LIBRARY_PATH.
        std::fs::write(lib_dir.join(NAME), b"").unwrap();
        assert!(findable(name, Some(OsStr::new(&path)), &no_cache, none));

        // In a system directory.
        let dir = lib_dir.to_str().unwrap();
        assert!(findable(name, None, &no_cache, &[dir]));

        // In the cache.
        let cache = tmp.path().join("ld.so.cache");
        std::fs::write(&cache, new_format(&[NAME])).unwrap();
        assert!(findable(name, None, &cache, none));

        // A path is for dlopen to judge.
        assert!(findable(
            OsStr::new("/nowhere/libcuda.so.1"),
            None,
            &no_cache,
            none
        ));
    }
}

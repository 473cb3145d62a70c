//! Host addresses and host ranges as the mapping code uses them.
//!
//! Typed so that a host address is not mixed up with a device address
//! ([`DevicePtr`](offload_core::plugin::DevicePtr)), a size or a count, and so
//! that the address arithmetic has names. Nothing here reads or writes
//! memory: the raw pointer reads of what clang passes stay where the
//! arguments are read (`args.rs`) and where the mapping code documents
//! why a read is sound.

use std::fmt;

/// An address in host memory (what the program passed: a mapped
/// variable, a pointer slot, a table key).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(transparent)]
pub struct HostAddr(pub u64);

impl HostAddr {
    pub const NULL: HostAddr = HostAddr(0);

    #[inline]
    pub fn is_null(self) -> bool {
        self.0 == 0
    }

    /// The address of `p`.
    #[inline]
    pub fn of<T>(p: *const T) -> HostAddr {
        HostAddr(p as usize as u64)
    }

    /// As a pointer (reading or writing through it is the caller's
    /// business, with its own SAFETY argument).
    #[inline]
    pub fn as_ptr<T>(self) -> *const T {
        self.0 as usize as *const T
    }

    /// As a mutable pointer (see [`Self::as_ptr`]).
    #[inline]
    pub fn as_mut_ptr<T>(self) -> *mut T {
        self.0 as usize as *mut T
    }

    /// `bytes` past this address, wrapping (C's pointer arithmetic on the
    /// addresses the program hands over; no memory is touched).
    #[inline]
    pub fn wrapping_add(self, bytes: u64) -> HostAddr {
        HostAddr(self.0.wrapping_add(bytes))
    }

    /// `bytes` past this address, or None past the top of the address
    /// space.
    #[inline]
    pub fn checked_add(self, bytes: u64) -> Option<HostAddr> {
        self.0.checked_add(bytes).map(HostAddr)
    }

    /// `bytes` past this address, at most the top of the address space.
    #[inline]
    pub fn saturating_add(self, bytes: u64) -> HostAddr {
        HostAddr(self.0.saturating_add(bytes))
    }

    /// The distance from `base` to this address, wrapping: an address
    /// below `base` gives the two's complement, which added back to a
    /// device address (`DevicePtr::offset`) lands as far below it.
    #[inline]
    pub fn offset_from(self, base: HostAddr) -> u64 {
        self.0.wrapping_sub(base.0)
    }

    /// The alignment of this address, at most `max` (a power of two);
    /// the null address counts as aligned to `max`.
    #[inline]
    pub fn alignment(self, max: u64) -> u64 {
        if self.0 == 0 {
            max
        } else {
            (1u64 << self.0.trailing_zeros()).min(max)
        }
    }
}

impl offload_core::range_map::Address for HostAddr {
    #[inline]
    fn raw(self) -> u64 {
        self.0
    }
    #[inline]
    fn from_raw(raw: u64) -> Self {
        HostAddr(raw)
    }
}

impl fmt::Display for HostAddr {
    /// As LLVM's INFO lines print addresses (`0x` and 16 digits).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:016x}", self.0)
    }
}

/// The host bytes `[begin, end)`, never wrapping around the address space
/// (`begin <= end`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct HostRange {
    begin: HostAddr,
    end: HostAddr,
}

impl HostRange {
    /// `len` bytes from `begin`, or None when they would run past the top
    /// of the address space.
    #[inline]
    pub fn new(begin: HostAddr, len: u64) -> Option<HostRange> {
        let end = begin.checked_add(len)?;
        Some(HostRange { begin, end })
    }

    /// `len` bytes from `begin`, cut at the top of the address space (the
    /// range a lookup asks about).
    #[inline]
    pub fn saturating(begin: HostAddr, len: u64) -> HostRange {
        HostRange {
            begin,
            end: begin.saturating_add(len),
        }
    }

    /// No bytes, at address 0.
    pub const EMPTY: HostRange = HostRange {
        begin: HostAddr(0),
        end: HostAddr(0),
    };

    /// Every address (`[0, u64::MAX)`).
    pub const ALL: HostRange = HostRange {
        begin: HostAddr(0),
        end: HostAddr(u64::MAX),
    };

    #[inline]
    pub fn begin(self) -> HostAddr {
        self.begin
    }

    /// The first address after the range.
    #[inline]
    pub fn end(self) -> HostAddr {
        self.end
    }

    /// Its size in bytes.
    #[inline]
    pub fn len(self) -> u64 {
        self.end.0 - self.begin.0
    }

    #[inline]
    pub fn is_empty(self) -> bool {
        self.begin == self.end
    }

    /// Whether `a` is one of the range's bytes.
    #[inline]
    pub fn contains(self, a: HostAddr) -> bool {
        self.begin <= a && a < self.end
    }

    /// Whether every byte of `inner` lies in this range (an empty `inner`
    /// anywhere from `begin` to `end`).
    #[inline]
    pub fn contains_range(self, inner: HostRange) -> bool {
        self.begin <= inner.begin && inner.end <= self.end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_check_their_ends() {
        let r = HostRange::new(HostAddr(100), 16).unwrap();
        assert_eq!(
            (r.begin(), r.end(), r.len()),
            (HostAddr(100), HostAddr(116), 16)
        );
        assert!(r.contains(HostAddr(100)) && r.contains(HostAddr(115)));
        assert!(!r.contains(HostAddr(116)) && !r.contains(HostAddr(99)));
        assert!(r.contains_range(HostRange::new(HostAddr(108), 8).unwrap()));
        assert!(!r.contains_range(HostRange::new(HostAddr(112), 8).unwrap()));
        assert!(HostRange::new(HostAddr(u64::MAX - 4), 8).is_none());
        let s = HostRange::saturating(HostAddr(u64::MAX - 4), 8);
        assert_eq!((s.end(), s.len()), (HostAddr(u64::MAX), 4));
        assert!(HostRange::new(HostAddr(7), 0).unwrap().is_empty());
    }

    #[test]
    fn offsets_wrap_like_c_pointers() {
        let (a, b) = (HostAddr(0x1000), HostAddr(0x1010));
        assert_eq!(b.offset_from(a), 0x10);
        assert_eq!(a.offset_from(b), 0x10u64.wrapping_neg());
        assert_eq!(
            a.wrapping_add(a.offset_from(b)).offset_from(a),
            a.offset_from(b)
        );
        assert_eq!(HostAddr(u64::MAX).checked_add(1), None);
        assert_eq!(HostAddr(0x1008).alignment(16), 8);
        assert_eq!(HostAddr(0x1040).alignment(16), 16);
        assert_eq!(HostAddr::NULL.alignment(16), 16);
        assert_eq!(format!("{}", HostAddr(0xab)), "0x00000000000000ab");
    }
}

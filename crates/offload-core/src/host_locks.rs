//! Host memory locked for a device on request (`llvm_omp_target_lock_mem`,
//! `LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS`), counted by users as LLVM's
//! plugins count them: a buffer locked again, or a part of it, takes one
//! more user, and the plugin unlocks it when the last user is gone.
//!
//! The table alone (no device calls), so its rules are tested without a
//! plugin; [`crate::Device::lock_host`] puts it in front of the plugin.

use std::collections::BTreeMap;

use crate::error::{Error, Result};

/// What a lock request comes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Locked {
    /// Within a range already locked (whose base is given): one user more.
    Within(u64),
    /// A new range: the plugin must lock it, then [`HostLocks::insert`].
    New,
}

/// Locked ranges by base address.
#[derive(Debug, Default)]
pub(crate) struct HostLocks(BTreeMap<u64, Range>);

#[derive(Debug)]
struct Range {
    size: u64,
    users: u32,
    /// Locked before the first user came (host memory the device
    /// allocated, or registered through `olMemRegister`): never unlocked
    /// here.
    external: bool,
}

/// What the last user of a range leaves to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// Users remain, or the range was locked by someone else.
    Nothing,
    /// The plugin unlocks the range at this base.
    Unlock(u64),
}

impl HostLocks {
    /// Takes a user of `[ptr, ptr + size)`: [`Locked::Within`] when a locked
    /// range holds all of it, [`Locked::New`] when none touches it, an error
    /// when it reaches past a locked range it overlaps.
    pub fn take(&mut self, ptr: u64, size: u64) -> Result<Locked> {
        let end = ptr.checked_add(size.max(1)).ok_or_else(|| {
            Error::invalid_argument(format!("host range {ptr:#x} + {size} wraps"))
        })?;
        let Some((&base, range)) = self.overlapping(ptr, end) else {
            return Ok(Locked::New);
        };
        if base <= ptr && end <= base + range.size {
            let range = self.0.get_mut(&base).expect("found just now");
            range.users += 1;
            return Ok(Locked::Within(base));
        }
        Err(Error::invalid_argument(format!(
            "host range {ptr:#x}..{end:#x} overlaps the locked range {base:#x}..{:#x} \
             without lying inside it",
            base + range.size
        )))
    }

    /// Files a range for [`Locked::New`]: locked by the plugin for it, or
    /// (`external`) already locked.
    pub fn insert(&mut self, ptr: u64, size: u64, external: bool) {
        self.0.insert(
            ptr,
            Range {
                size: size.max(1),
                users: 1,
                external,
            },
        );
    }

    /// Gives back a user of the locked range holding `ptr`; an error when
    /// no locked range holds `ptr`. The range leaves the table with its
    /// last user.
    pub fn give_back(&mut self, ptr: u64) -> Result<Released> {
        let Some((&base, _)) = self.overlapping(ptr, ptr.saturating_add(1)) else {
            return Err(Error::invalid_argument(format!(
                "{ptr:#x} is not in host memory locked for this device"
            )));
        };
        let range = self.0.get_mut(&base).expect("found just now");
        range.users -= 1;
        if range.users > 0 {
            return Ok(Released::Nothing);
        }
        let external = range.external;
        self.0.remove(&base);
        Ok(match external {
            true => Released::Nothing,
            false => Released::Unlock(base),
        })
    }

    /// Whether `ptr` lies in a locked range.
    pub fn holds(&self, ptr: u64) -> bool {
        self.overlapping(ptr, ptr.saturating_add(1)).is_some()
    }

    /// A locked range that overlaps `[ptr, end)`, the one below it first.
    fn overlapping(&self, ptr: u64, end: u64) -> Option<(&u64, &Range)> {
        let below = self
            .0
            .range(..=ptr)
            .next_back()
            .filter(|(&b, r)| b + r.size > ptr);
        below.or_else(|| self.0.range(ptr..end).next())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locks_are_counted_by_users_of_the_range_or_a_part_of_it() {
        let mut t = HostLocks::default();
        assert_eq!(t.take(0x1000, 0x100).unwrap(), Locked::New);
        t.insert(0x1000, 0x100, false);
        // The same range and a part of it: users of the first lock.
        assert_eq!(t.take(0x1000, 0x100).unwrap(), Locked::Within(0x1000));
        assert_eq!(t.take(0x1080, 0x10).unwrap(), Locked::Within(0x1000));
        // Reaching past it, from inside or from below: refused.
        assert!(t.take(0x10f0, 0x20).is_err());
        assert!(t.take(0x0ff0, 0x20).is_err());
        // Beside it: a range of its own.
        assert_eq!(t.take(0x1100, 0x10).unwrap(), Locked::New);
        // The last of three users unlocks; any address inside names it.
        assert_eq!(t.give_back(0x1000).unwrap(), Released::Nothing);
        assert_eq!(t.give_back(0x10ff).unwrap(), Released::Nothing);
        assert!(t.holds(0x1050));
        assert_eq!(t.give_back(0x1050).unwrap(), Released::Unlock(0x1000));
        assert!(!t.holds(0x1050));
        assert!(t.give_back(0x1000).is_err(), "not locked any more");
        assert!(t.take(u64::MAX - 4, 16).is_err(), "a range that wraps");
        // Memory locked by someone else is counted, never unlocked here.
        t.insert(0x8000, 0x100, true);
        assert_eq!(t.take(0x8000, 8).unwrap(), Locked::Within(0x8000));
        assert_eq!(t.give_back(0x8000).unwrap(), Released::Nothing);
        assert_eq!(t.give_back(0x8000).unwrap(), Released::Nothing);
        assert!(!t.holds(0x8000));
    }
}

//! Launch scratch memory kept for reuse: kernel-argument buffers (host
//! kernarg-pool memory) and OpenMP launch environments with their
//! reduction buffers (device memory). A launch takes a block with room
//! enough and gives it back when the engine has waited for the kernel, so
//! a loop of launches allocates once instead of once per launch.

use std::sync::Mutex;

/// Idle blocks kept per GPU and kind; more are freed as they come back.
const MAX_IDLE: usize = 8;

/// One allocation of scratch memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Block {
    /// Its address (host or device, by kind).
    pub ptr: usize,
    /// Its size in bytes.
    pub capacity: usize,
}

/// The idle blocks of one kind.
#[derive(Default)]
pub(crate) struct Idle(Mutex<Vec<Block>>);

impl Idle {
    /// The smallest idle block of `need` to `most` bytes, taken out (a
    /// block much larger than needed is left for a launch that needs it).
    pub fn take(&self, need: usize, most: usize) -> Option<Block> {
        let mut idle = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let best = idle
            .iter()
            .enumerate()
            .filter(|(_, b)| b.capacity >= need && b.capacity <= most)
            .min_by_key(|(_, b)| b.capacity)
            .map(|(i, _)| i)?;
        Some(idle.swap_remove(best))
    }

    /// Keeps `block` for later; when enough are kept, returns the smallest
    /// one (perhaps `block` itself) for the caller to free.
    #[must_use]
    pub fn keep(&self, block: Block) -> Option<Block> {
        let mut idle = self.0.lock().unwrap_or_else(|e| e.into_inner());
        idle.push(block);
        if idle.len() <= MAX_IDLE {
            return None;
        }
        let smallest = idle
            .iter()
            .enumerate()
            .min_by_key(|(_, b)| b.capacity)
            .map(|(i, _)| i)?;
        Some(idle.swap_remove(smallest))
    }

    /// Every idle block, taken out (to be freed).
    pub fn drain(&self) -> Vec<Block> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// A GPU's reusable launch memory.
#[derive(Default)]
pub(crate) struct Scratch {
    /// Kernel-argument buffers (the host's kernarg pool, reachable by
    /// the GPU).
    pub kernargs: Idle,
    /// Launch environments and reduction buffers (device memory).
    pub launch_envs: Idle,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(ptr: usize, capacity: usize) -> Block {
        Block { ptr, capacity }
    }

    #[test]
    fn takes_the_smallest_block_that_fits() {
        let idle = Idle::default();
        for b in [block(1, 512), block(2, 256), block(3, 1024)] {
            assert_eq!(idle.keep(b), None);
        }
        assert_eq!(idle.take(300, 600), Some(block(1, 512)));
        assert_eq!(idle.take(2000, 4000), None);
        assert_eq!(idle.take(1, 2), None, "all much larger than needed");
        assert_eq!(idle.take(1, usize::MAX), Some(block(2, 256)));
        assert_eq!(idle.drain(), [block(3, 1024)]);
        assert_eq!(idle.take(1, usize::MAX), None);
    }

    #[test]
    fn keeps_at_most_max_idle_and_gives_back_the_smallest() {
        let idle = Idle::default();
        for i in 0..MAX_IDLE {
            assert_eq!(idle.keep(block(i, 100 + i)), None);
        }
        assert_eq!(idle.keep(block(99, 50)), Some(block(99, 50)));
        assert_eq!(idle.keep(block(98, 500)), Some(block(0, 100)));
        assert_eq!(idle.drain().len(), MAX_IDLE);
    }
}

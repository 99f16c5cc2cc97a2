//! The size of a block served by mimalloc, the allocator of free-threaded CPython's objects
//! (which never pass through `malloc`), read from the allocator's own metadata as
//! `mi_usable_size` reads it: the block's 32 MiB-aligned segment holds one slice entry per
//! 64 KiB, the entry of the block's slice points back to its page's, and the page holds its
//! block size (offsets from the interpreter's layout, `Layout::mimalloc`). mimalloc's own
//! functions are not exported by CPython, so this is how the heap counts Python objects there.
//!
//! The reading is validated before it is trusted: the first [`TO_VALIDATE`] blocks are read
//! through the kernel (`process_vm_readv`, no fault possible) and each must be at least the
//! size asked for and not absurdly more; any that is not turns the counting off for good
//! (`Counting::Off`: the report then says Python objects are not counted). After that, plain
//! loads: a live block's segment and page are mapped and their fields do not change while it
//! lives. No allocation, no locks: it runs in allocation hooks.

use core::sync::atomic::{AtomicU32, Ordering};

use mlprof_pyframes::layouts::Mimalloc;
use mlprof_pyframes::Memory;

use crate::python::read::Direct;

/// Blocks checked through the kernel before plain loads are trusted.
const TO_VALIDATE: u32 = 64;

/// Where the counting stands: [`VALIDATING`] counts validated reads (the first
/// `TO_VALIDATE`), then [`TRUSTED`]; [`OFF`] when a read did not fit.
static STATE: AtomicU32 = AtomicU32::new(0);
const TRUSTED: u32 = u32::MAX;
const OFF: u32 = u32::MAX - 1;

/// How a block's size is to be had now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counting {
    /// Through the kernel, checked against the request.
    Validating,
    /// Plain loads.
    Trusted,
    /// Not at all: the metadata did not read as mimalloc's.
    Off,
}

/// Where the counting stands.
#[inline]
pub fn counting() -> Counting {
    match STATE.load(Ordering::Relaxed) {
        TRUSTED => Counting::Trusted,
        OFF => Counting::Off,
        _ => Counting::Validating,
    }
}

/// Whether the counting was turned off (a block did not read as mimalloc's).
pub fn off() -> bool {
    counting() == Counting::Off
}

/// The size of the block at `p`, just allocated for a request of `asked` bytes (0: not known,
/// for a block being freed), or 0 when it is not counted.
#[inline]
pub fn block_size(m: &Mimalloc, p: usize, asked: usize) -> usize {
    match counting() {
        Counting::Trusted => plain(m, p),
        Counting::Off => 0,
        Counting::Validating => validate(m, p, asked),
    }
}

#[cold]
#[inline(never)]
fn validate(m: &Mimalloc, p: usize, asked: usize) -> usize {
    let size = read(&Direct, m, p);
    let fits = size.is_some_and(|s| {
        // Asked: at least that, at most a size class or a large page's slice rounding more.
        asked == 0 || (s >= asked && s <= asked.saturating_mul(2).saturating_add(1 << 17))
    });
    if !fits {
        STATE.store(OFF, Ordering::Relaxed);
        return 0;
    }
    if asked > 0 {
        // A validation that counts: the last one makes the reads plain.
        let _ = STATE.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| match n {
            n if n + 1 >= TO_VALIDATE && n < OFF => Some(TRUSTED),
            n if n < OFF => Some(n + 1),
            _ => None,
        });
    }
    size.unwrap_or(0)
}

/// [`read`] with plain loads and no more checks than it needs to stay inside the segment's
/// slice entries: the hot path of every Python allocation and free of a free-threaded build.
#[inline(always)]
fn plain(m: &Mimalloc, p: usize) -> usize {
    let segment = p.wrapping_sub(1) & !((1usize << m.segment_shift) - 1);
    let index = p.wrapping_sub(segment) >> m.slice_shift;
    if index >= m.slices_per_segment {
        return 0;
    }
    let slice = segment + m.segment_slices + index * m.slice_size;
    // SAFETY: `slice` is an entry of the live block's segment's slice array (index bounded
    // above), mapped while the block lives; the layout was validated (see `validate`).
    let back = unsafe { core::ptr::read((slice + m.page_slice_offset) as *const u32) } as usize;
    // The page's entry is at or before the slice's, in the same array (mimalloc's own
    // `_mi_segment_page_of`); a larger distance is not mimalloc's.
    if back > index * m.slice_size {
        return 0;
    }
    let at = slice - back + m.page_block_size;
    // SAFETY: an entry of the same array (checked just above); its block-size field is 4 or 8
    // bytes, naturally aligned.
    unsafe {
        if m.block_size_bytes == 4 {
            core::ptr::read(at as *const u32) as usize
        } else {
            core::ptr::read(at as *const usize)
        }
    }
}

/// `mi_usable_size(p)` as mimalloc computes it (for blocks that are not over-aligned, which
/// CPython never asks for).
fn read(mem: &impl Memory, m: &Mimalloc, p: usize) -> Option<usize> {
    let mask = (1usize << m.segment_shift) - 1;
    let segment = p.checked_sub(1)? & !mask;
    let index = (p - segment) >> m.slice_shift;
    if segment == 0 || index >= m.slices_per_segment {
        return None;
    }
    let slice = segment + m.segment_slices + index * m.slice_size;
    let back = mem.int(slice + m.page_slice_offset)? as u32 as usize;
    let page = slice.checked_sub(back)?;
    if page < segment + m.segment_slices {
        return None;
    }
    let size = match m.block_size_bytes {
        4 => mem.int(page + m.page_block_size)? as u32 as usize,
        _ => mem.word(page + m.page_block_size)?,
    };
    (size > 0).then_some(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A segment image: slice entries of `slice_size` bytes from `slices`, a page of 3 slices
    /// at slice 2 with 96-byte blocks.
    struct Segment(std::vec::Vec<u8>, usize);

    impl Memory for Segment {
        fn bytes(&self, addr: usize, out: &mut [u8]) -> Option<()> {
            let at = addr.checked_sub(self.1)?;
            out.copy_from_slice(self.0.get(at..at + out.len())?);
            Some(())
        }
    }

    const M: Mimalloc = Mimalloc {
        segment_shift: 25,
        slice_shift: 16,
        segment_slices: 264,
        slices_per_segment: 513,
        slice_size: 96,
        page_slice_offset: 4,
        page_block_size: 28,
        block_size_bytes: 4,
    };

    #[test]
    fn a_block_size_is_read_through_its_page() {
        let base = 0x7f00_0000_0000usize; // 32 MiB aligned
        let mut img = std::vec![0u8; 4096];
        let entry = |i: usize| M.segment_slices + i * M.slice_size;
        img[entry(2) + M.page_block_size..][..4].copy_from_slice(&96u32.to_le_bytes());
        for i in 3..5 {
            let back = (entry(i) - entry(2)) as u32;
            img[entry(i) + M.page_slice_offset..][..4].copy_from_slice(&back.to_le_bytes());
        }
        let seg = Segment(img, base);
        for slice in 2..5 {
            let p = base + (slice << M.slice_shift) + 96 * 7;
            assert_eq!(read(&seg, &M, p), Some(96), "slice {slice}");
        }
        // Slice 0 holds the segment's own header: no page, no size.
        assert_eq!(read(&seg, &M, base + 64), None);
        assert_eq!(read(&seg, &M, 0), None);
    }
}

//! The only reads of interpreter memory in the preload library: [`Direct`] loads, each
//! validated first (non-null, inside the user half of the address space, naturally aligned),
//! then made with `process_vm_readv` on this very process, which fails with `EFAULT` instead
//! of crashing when the memory is gone. That happens: a sample can interrupt CPython 3.11+
//! inside `_PyThreadState_PopFrame` while it unmaps a data-stack chunk that the current frame
//! pointer still points into. Where the system call is not allowed (a seccomp filter), reads
//! fall back to plain loads guarded only by the validation and the walker's type checks.
//! Runs inside signal handlers: no allocation, no locks.

use core::cell::{Cell, UnsafeCell};
use core::sync::atomic::{AtomicI32, Ordering};

use mlprof_pyframes::{plausible, Memory};

/// This process's pid for `process_vm_readv` (0: not probed yet, -1: the call is refused).
static SELF_PID: AtomicI32 = AtomicI32::new(0);

/// Probe whether this process may read itself with `process_vm_readv` and remember its pid.
/// Called at load time and in a fork child (the pid changes).
pub fn init() {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let probe: u64 = 0x6d6c_7072_6f66;
    let mut out: u64 = 0;
    SELF_PID.store(pid, Ordering::Relaxed);
    let ok = vm_read(
        &probe as *const u64 as usize,
        (&mut out as *mut u64).cast(),
        8,
    ) && out == probe;
    if !ok {
        SELF_PID.store(-1, Ordering::Relaxed);
    }
}

/// Whether the probe found `process_vm_readv` allowed (false before [`init`]).
pub fn allowed() -> bool {
    SELF_PID.load(Ordering::Relaxed) > 0
}

/// Copy `len` bytes at `addr` of this process into `out` with `process_vm_readv`; false if
/// any of it is not readable (or the call is refused).
fn vm_read(addr: usize, out: *mut u8, len: usize) -> bool {
    let pid = SELF_PID.load(Ordering::Relaxed);
    if pid <= 0 {
        return false;
    }
    let local = libc::iovec {
        iov_base: out.cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: len,
    };
    #[cfg(test)]
    tests::VM_READS.with(|n| n.set(n.get() + 1));
    // SAFETY: the system call writes at most `len` bytes into `out`, which the caller owns;
    // reading the remote range cannot fault in this process (the kernel checks it).
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    n == len as isize
}

/// Whether reads go through the kernel (false: plain loads).
pub(crate) fn checked() -> bool {
    SELF_PID.load(Ordering::Relaxed) > 0
}

/// Direct loads from this process's memory, each through the kernel: safe anywhere, including
/// a signal handler that interrupted CPython halfway through changing its frames. About one
/// system call (0.3-1 µs) per read.
pub struct Direct;

/// Plain loads, after the same validation as [`Direct`]: no system call. Only for the calling
/// thread's own Python stack at an allocation or copy point while it holds the GIL (as
/// `tracemalloc` walks it, inside the allocator, with the same fields) and the interpreter is
/// not finalizing: CPython then keeps the chain from the current frame consistent, and no
/// other thread can free it. Code objects on that chain are alive (each frame owns one).
/// Never in the signal handler.
pub struct Trusted;

impl Memory for Trusted {
    fn bytes(&self, addr: usize, out: &mut [u8]) -> Option<()> {
        if !plausible(addr, out.len(), 1) {
            return None;
        }
        // SAFETY: validated range inside a live interpreter structure of this thread (the
        // type's contract); the destination is a distinct writable buffer.
        unsafe { core::ptr::copy_nonoverlapping(addr as *const u8, out.as_mut_ptr(), out.len()) };
        Some(())
    }

    fn word(&self, addr: usize) -> Option<usize> {
        if !plausible(addr, 8, 8) {
            return None;
        }
        // SAFETY: as in `bytes`, aligned for a usize.
        Some(unsafe { core::ptr::read_volatile(addr as *const usize) })
    }

    fn int(&self, addr: usize) -> Option<i32> {
        if !plausible(addr, 4, 4) {
            return None;
        }
        // SAFETY: as in `bytes`, aligned for an i32.
        Some(unsafe { core::ptr::read_volatile(addr as *const i32) })
    }
}

/// [`Direct`] reads through a few cached windows: a miss copies up to [`WINDOW`] bytes around
/// the address (never past its page, so one unmapped neighbour cannot fail the read) with one
/// system call, and later reads inside a window are plain copies from it. A frame's fields, and
/// a code object's, then cost one system call instead of one each; neighbouring frames of a
/// CPython 3.11+ data stack often share one. Lives for one walk (a snapshot of that moment, on
/// the signal handler's stack); the interrupted thread cannot change its own frames meanwhile.
pub struct Windowed {
    windows: UnsafeCell<[Window; WINDOWS]>,
    next: Cell<usize>,
}

/// Windows kept per walk (round-robin): frames, the code objects they run (a recursive or
/// repeated function hits), neighbours. 3 KiB of the handler's stack in all.
const WINDOWS: usize = 8;
/// Bytes copied per miss: [`BEHIND`] before the address, the rest from it on.
const WINDOW: usize = 384;
/// Centred: a code object's fields lie up to +192 from the first one read (+8, its type),
/// and the walk goes down the data stack, so the frame below the one read (3.11+ frames are
/// ~80-200 bytes apart) is often in the same window. Measured on the import of scikit-learn
/// (stacks ~100 frames deep): 612 system calls per sample with [`Direct`], 222 with windows
/// reaching 128 back, 160 with these.
const BEHIND: usize = 192;
const PAGE: usize = 4096;

#[derive(Clone, Copy)]
struct Window {
    start: usize,
    len: usize,
    data: [u8; WINDOW],
}

impl Window {
    /// The `len` bytes at `addr`, if this window holds them all.
    #[inline(always)]
    fn holding(&self, addr: usize, len: usize) -> Option<&[u8]> {
        if self.len == 0 {
            return None;
        }
        let from = addr.checked_sub(self.start)?;
        self.data.get(..self.len)?.get(from..)?.get(..len)
    }
}

impl Windowed {
    pub const fn new() -> Self {
        Windowed {
            windows: UnsafeCell::new(
                [Window {
                    start: 0,
                    len: 0,
                    data: [0; WINDOW],
                }; WINDOWS],
            ),
            next: Cell::new(0),
        }
    }
}

impl Memory for Windowed {
    fn bytes(&self, addr: usize, out: &mut [u8]) -> Option<()> {
        if !plausible(addr, out.len(), 1) {
            return None;
        }
        if !checked() {
            return Direct.bytes(addr, out);
        }
        // SAFETY: `Windowed` is neither `Sync` nor re-entered (no callbacks run while the
        // reference lives), so this is the only reference to the windows.
        let windows = unsafe { &mut *self.windows.get() };
        if let Some(held) = windows.iter().find_map(|w| w.holding(addr, out.len())) {
            out.copy_from_slice(held);
            return Some(());
        }
        let end = addr + out.len();
        let page = addr & !(PAGE - 1);
        let start = addr.saturating_sub(BEHIND).max(page);
        let stop = (start + WINDOW).min(page + PAGE);
        if end > stop {
            return Direct.bytes(addr, out); // crosses a page: read just it
        }
        let slot = self.next.get() % WINDOWS;
        self.next.set((slot + 1) % WINDOWS);
        let Some(w) = windows.get_mut(slot) else {
            return Direct.bytes(addr, out); // never: `slot < WINDOWS`
        };
        w.len = 0;
        // `stop - start <= WINDOW`: always there.
        let into = w.data.get_mut(..stop - start)?;
        if !vm_read(start, into.as_mut_ptr(), into.len()) {
            return None;
        }
        (w.start, w.len) = (start, stop - start);
        out.copy_from_slice(w.holding(addr, out.len())?);
        Some(())
    }
}

impl Memory for Direct {
    fn bytes(&self, addr: usize, out: &mut [u8]) -> Option<()> {
        if !plausible(addr, out.len(), 1) {
            return None;
        }
        if checked() {
            return vm_read(addr, out.as_mut_ptr(), out.len()).then_some(());
        }
        // SAFETY: validated range; without the checked read, the caller's contract (module
        // doc) is that `addr` lies in a live interpreter structure; the destination is a
        // distinct writable buffer.
        unsafe { core::ptr::copy_nonoverlapping(addr as *const u8, out.as_mut_ptr(), out.len()) };
        Some(())
    }

    fn word(&self, addr: usize) -> Option<usize> {
        if !plausible(addr, 8, 8) {
            return None;
        }
        if checked() {
            let mut v: usize = 0;
            return vm_read(addr, (&mut v as *mut usize).cast(), 8).then_some(v);
        }
        // SAFETY: as in `bytes`, aligned for a usize.
        Some(unsafe { core::ptr::read_volatile(addr as *const usize) })
    }

    fn int(&self, addr: usize) -> Option<i32> {
        if !plausible(addr, 4, 4) {
            return None;
        }
        if checked() {
            let mut v: i32 = 0;
            return vm_read(addr, (&mut v as *mut i32).cast(), 4).then_some(v);
        }
        // SAFETY: as in `bytes`, aligned for an i32.
        Some(unsafe { core::ptr::read_volatile(addr as *const i32) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlprof_pyframes::{layouts, walk, Interpreter};

    std::thread_local! {
        /// `process_vm_readv` calls made by this test thread.
        pub static VM_READS: core::cell::Cell<usize> = const { core::cell::Cell::new(0) };
    }

    /// A hand-built CPython 3.11 thread: a thread state, its `_PyCFrame`, `depth` frames laid
    /// out one after another as in a data-stack chunk (sizes varying like real functions'),
    /// running four code objects in turn. Returns the memory, the tstate and the code objects.
    fn image_311(depth: usize, code_type: usize) -> (Vec<u64>, usize, [usize; 4]) {
        let l = &layouts::PY311;
        let mut mem = vec![0u64; 64 * 1024];
        let base = mem.as_ptr() as usize;
        let put = |mem: &mut Vec<u64>, addr: usize, v: u64| mem[(addr - base) / 8] = v;
        let tstate = base + 64;
        let cframe = base + 1024;
        put(&mut mem, tstate + l.tstate_frame, cframe as u64);
        let codes: [usize; 4] = core::array::from_fn(|i| base + 4096 + i * 512);
        for &code in &codes {
            put(&mut mem, code + 8, code_type as u64);
            put(&mut mem, code + l.code_firsttraceable.unwrap(), 0);
        }
        let mut frame = base + 8192;
        let mut previous = 0;
        for i in 0..depth {
            let code = codes[i % 4];
            put(&mut mem, frame + l.frame_code, code as u64);
            put(&mut mem, frame + l.frame_back, previous as u64);
            let instr = code + l.code_adaptive.unwrap() + 2 * (i + 1);
            put(&mut mem, frame + l.frame_instr, instr as u64);
            put(&mut mem, frame + 64, 0); // stacktop, is_entry, owner (0: a thread's frame)
            previous = frame;
            frame += 72 + 8 * (2 + i % 9); // the struct, then locals and stack
        }
        put(&mut mem, cframe + l.cframe_current_frame, previous as u64);
        (mem, tstate, codes)
    }

    #[test]
    fn windowed_walk_reads_the_same_frames_with_at_most_one_system_call_per_frame() {
        init();
        assert!(checked(), "process_vm_readv on ourselves is allowed here");
        let code_type = &VM_READS as *const _ as usize & !7;
        let depth = 100;
        let (_mem, tstate, codes) = image_311(depth, code_type);
        let rt = Interpreter {
            layout: &layouts::PY311,
            code_type,
        };
        let walk_counted = |mem: &dyn Fn(&mut [walk::Frame]) -> walk::Walk| {
            let mut out = [walk::Frame::default(); 128];
            let before = VM_READS.with(|n| n.get());
            let w = mem(&mut out);
            (w, out, VM_READS.with(|n| n.get()) - before)
        };
        let (direct, direct_frames, direct_reads) =
            walk_counted(&|out| walk::walk(&Direct, &rt, tstate, out));
        let (windowed, windowed_frames, windowed_reads) =
            walk_counted(&|out| walk::walk(&Windowed::new(), &rt, tstate, out));
        assert_eq!(
            (direct.depth, direct.failed, direct.truncated),
            (depth, false, false)
        );
        assert_eq!(windowed, direct);
        assert_eq!(windowed_frames[..depth], direct_frames[..depth]);
        assert_eq!(
            direct_frames[0].code,
            codes[(depth - 1) % 4],
            "innermost first"
        );
        assert_eq!(direct_frames[0].lasti, depth as i32);
        // Direct: owner, code, its type, instruction, first traceable, back: six per frame.
        assert!(direct_reads >= 6 * depth, "{direct_reads}");
        // Windowed: at most one per frame here (90 when written): a frame's fields share a
        // window, and so do its neighbours' and the four code objects'.
        assert!(
            windowed_reads <= depth && windowed_reads * 3 <= direct_reads,
            "windowed {windowed_reads} vs direct {direct_reads} system calls"
        );
    }

    #[test]
    fn reads_valid_memory_and_refuses_bad_addresses() {
        let value: [usize; 2] = [0x12340, 0x5674];
        let base = value.as_ptr() as usize;
        assert_eq!(Direct.word(base + 8), Some(0x5674));
        assert_eq!(Direct.word(base + 1), None, "misaligned");
        assert_eq!(Direct.word(0), None);
        assert_eq!(Direct.word(usize::MAX - 3), None);
        assert_eq!(Direct.pointer(base), Some(0x12340));
        assert_eq!(
            Direct.pointer(base + 8),
            None,
            "0x5674 is not 8-byte aligned"
        );
        let mut out = [0u8; 2];
        assert_eq!(Direct.bytes(base, &mut out), Some(()));
        assert_eq!(out, [0x40, 0x23]);
    }

    #[test]
    fn reads_of_unmapped_memory_fail_instead_of_crashing() {
        init();
        assert!(checked(), "process_vm_readv on ourselves is allowed here");
        // SAFETY: mapping then unmapping one private page of our own.
        let page = unsafe {
            let p = libc::mmap(
                core::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            *(p as *mut usize) = 7;
            p
        };
        assert_eq!(Direct.word(page as usize), Some(7));
        // SAFETY: unmapping the page mapped above; nothing else refers to it.
        unsafe { libc::munmap(page, 4096) };
        assert_eq!(Direct.word(page as usize), None, "gone: no fault, no value");
        assert_eq!(Windowed::new().word(page as usize), None);
    }

    #[test]
    fn windows_stop_at_the_page_so_an_unmapped_neighbour_fails_nothing() {
        init();
        // SAFETY: mapping two private pages of our own, then unmapping the second.
        let first = unsafe {
            let p = libc::mmap(
                core::ptr::null_mut(),
                2 * PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            *(p as *mut usize).add(PAGE / 8 - 1) = 11;
            *(p as *mut usize) = 5;
            libc::munmap((p as *mut u8).add(PAGE).cast(), PAGE);
            p as usize
        };
        let w = Windowed::new();
        let before = VM_READS.with(|n| n.get());
        assert_eq!(
            w.word(first + PAGE - 8),
            Some(11),
            "last word before the hole"
        );
        assert_eq!(w.word(first + PAGE - 16), Some(0), "from the same window");
        assert_eq!(VM_READS.with(|n| n.get()) - before, 1);
        assert_eq!(w.word(first + PAGE), None, "the hole itself");
        assert_eq!(w.bytes(first + PAGE - 4, &mut [0u8; 8]), None, "across it");
        assert_eq!(w.word(first), Some(5));
        // SAFETY: unmapping the page mapped above.
        unsafe { libc::munmap(first as *mut libc::c_void, PAGE) };
    }
}

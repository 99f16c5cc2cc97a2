//! Who called the C runtime: when a sample interrupts libc or libm (`memcpy`, `pow`, `malloc`),
//! the time is the interpreter's only if the interpreter made the call. numpy's `memcpy` in
//! `a.copy()` and numba's JIT code calling `pow` are native work. The handler finds the return
//! address into the caller among the first words above the interrupted stack pointer (these
//! functions are leaves or nearly: the return address is at or just above it) and sends it with
//! the sample; the collector classes the sample by the caller's mapping.
//!
//! Reads go through the kernel (`process_vm_readv`): the stack words and the bytes before each
//! candidate, which must encode a call instruction, so a stale value on the stack is not taken
//! for a return address. Skipped where only plain loads are possible (seccomp).

use core::sync::atomic::{AtomicUsize, Ordering};

use mlprof_pyframes::Memory;

use crate::python::read;

/// Executable ranges of libc and libm, found at load time: (start, end), unused while 0.
static RANGES: [(AtomicUsize, AtomicUsize); 4] =
    [const { (AtomicUsize::new(0), AtomicUsize::new(0)) }; 4];
/// Stack words looked at.
const WORDS: usize = 16;
/// Candidates whose preceding bytes are read, at most. glibc's `__sin_fma` keeps three
/// pointers to data and a saved MXCSR word below its return address: with four, `np.sin`'s
/// time in libm counted as Python's.
const CANDIDATES: usize = 8;
/// Above every user-space address (x86-64 with 5-level paging, aarch64 with 52-bit
/// addresses): a `double` spilled on the stack is at or above it unless tiny, and so is most
/// of a stack canary.
const USER_END: usize = 1 << 56;
/// Values this close to the stack pointer point into the stack itself, not at code: not
/// candidates.
const STACK_NEAR: usize = 8 << 20;

/// Find libc's and libm's code (load time, before any thread of the program runs).
pub fn init() {
    let mut next = 0usize;
    // SAFETY: dl_iterate_phdr calls `each` with valid info for every loaded object; `next` outlives it.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut next as *mut usize).cast()) };
}

unsafe extern "C" fn each(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: the loader passes a valid info block and our counter.
    let (info, next) = unsafe { (&*info, &mut *(data as *mut usize)) };
    if info.dlpi_name.is_null() || !is_runtime(info.dlpi_name) {
        return 0;
    }
    for i in 0..info.dlpi_phnum as usize {
        // SAFETY: dlpi_phdr has dlpi_phnum entries.
        let ph = unsafe { &*info.dlpi_phdr.add(i) };
        if ph.p_type != libc::PT_LOAD || ph.p_flags & libc::PF_X == 0 {
            continue;
        }
        let Some((start, end)) = RANGES.get(*next) else {
            continue; // all taken
        };
        let at = info.dlpi_addr as usize + ph.p_vaddr as usize;
        start.store(at, Ordering::Relaxed);
        end.store(at + ph.p_memsz as usize, Ordering::Relaxed);
        *next += 1;
    }
    0
}

/// `libc.so.6`, `libm.so.6` (and old glibc's `libc-2.NN.so`), by the file name of `path`.
fn is_runtime(path: *const libc::c_char) -> bool {
    // SAFETY: a NUL-terminated name from the loader.
    let bytes = unsafe { core::ffi::CStr::from_ptr(path) }.to_bytes();
    let name = bytes.rsplit(|&b| b == b'/').next().unwrap_or(bytes);
    ["libc.so", "libc-", "libm.so", "libm-"]
        .iter()
        .any(|p| name.starts_with(p.as_bytes()))
}

fn in_runtime(addr: usize) -> bool {
    RANGES.iter().any(|(start, end)| {
        let start = start.load(Ordering::Relaxed);
        start != 0 && start <= addr && addr < end.load(Ordering::Relaxed)
    })
}

/// The return address into libc's or libm's caller, when `ip` is in one of them; 0 otherwise
/// or when none is found. Called from the SIGPROF handler with the interrupted `ip` and `sp`.
pub fn of(ip: usize, sp: usize) -> u64 {
    if sp == 0 || !in_runtime(ip) || !read::checked() {
        return 0;
    }
    let mut stack = [0u8; WORDS * 8];
    if read::Direct.bytes(sp, &mut stack).is_none() {
        return 0;
    }
    let mut tried = 0;
    for word in stack.chunks_exact(8) {
        let v = usize::from_le_bytes(word.try_into().unwrap_or([0; 8]));
        if !(0x10000..USER_END).contains(&v) || v.abs_diff(sp) < STACK_NEAR || in_runtime(v) {
            // Not an address (a small integer, a double), an address on the stack, or a
            // return inside libc/libm itself (pow's own helpers).
            continue;
        }
        if tried == CANDIDATES {
            break;
        }
        tried += 1;
        let mut before = [0u8; 8];
        if read::Direct.bytes(v - 8, &mut before).is_some() && follows_call(&before) {
            return v as u64;
        }
    }
    0
}

/// Whether the 8 bytes before an address end with an x86-64 call instruction: `call rel32`
/// (E8), `call *disp32(%rip)` (FF 15), `call *reg` (FF D0+r, with a REX prefix for r8-r15),
/// `call *disp8(reg)` (FF 50+r). On aarch64, the 4 bytes before are a `bl` or `blr`.
fn follows_call(b: &[u8; 8]) -> bool {
    #[cfg(target_arch = "aarch64")]
    {
        let insn = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        insn & 0xfc00_0000 == 0x9400_0000 || insn & 0xffff_fc1f == 0xd63f_0000
    }
    #[cfg(not(target_arch = "aarch64"))]
    {
        let modrm_call = |m: u8| m & 0x38 == 0x10;
        b[3] == 0xe8
            || (b[2] == 0xff && b[3] == 0x15)
            || (b[6] == 0xff && b[7] & 0xc0 == 0xc0 && modrm_call(b[7]))
            || (b[5] == 0xff && b[6] & 0xc0 == 0x40 && modrm_call(b[6]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_encodings_are_recognised() {
        // call rel32
        assert!(follows_call(&[0, 0, 0, 0xe8, 1, 2, 3, 4]));
        // call *0x1234(%rip)
        assert!(follows_call(&[0, 0, 0xff, 0x15, 1, 2, 3, 4]));
        // call *%rax; call *%r8 (41 ff d0)
        assert!(follows_call(&[0, 0, 0, 0, 0, 0, 0xff, 0xd0]));
        assert!(follows_call(&[0, 0, 0, 0, 0, 0x41, 0xff, 0xd0]));
        // call *0x10(%rax)
        assert!(follows_call(&[0, 0, 0, 0, 0, 0xff, 0x50, 0x10]));
        // jmp *%rax (ff e0), a plain mov: not calls
        assert!(!follows_call(&[0, 0, 0, 0, 0, 0, 0xff, 0xe0]));
        assert!(!follows_call(&[
            0x48, 0x89, 0xc7, 0x48, 0x89, 0xc6, 0x90, 0x90
        ]));
    }

    #[test]
    fn libc_is_found_and_a_sample_in_it_finds_its_caller() {
        init();
        let memcpy = libc::memcpy as *const () as usize;
        assert!(in_runtime(memcpy), "libc's code found at load");
        assert!(!in_runtime(
            call_encodings_are_recognised as *const () as usize
        ));
        // A stack whose fourth word returns just after a `call rel32` (in a static: addresses
        // near the stack pointer are not candidates), below a small integer, a double and a
        // pointer into the stack.
        static CODE: [u8; 16] = [
            0x90, 0x90, 0x90, 0xe8, 0, 0, 0, 0, 0x90, 0, 0, 0, 0, 0, 0, 0,
        ];
        let after_call = CODE.as_ptr() as usize + 8;
        let mut stack: [usize; 5] = [0x1234, 1.5f64.to_bits() as usize, 0, after_call, 0];
        stack[2] = stack.as_ptr() as usize;
        crate::python::read::init();
        assert_eq!(of(memcpy, stack.as_ptr() as usize), after_call as u64);
        assert_eq!(
            of(
                call_encodings_are_recognised as *const () as usize,
                stack.as_ptr() as usize
            ),
            0
        );
    }
}

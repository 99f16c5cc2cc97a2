//! CPython's own JIT (3.13+, `PYTHON_JIT=1`): the interpreter compiles hot traces of Python code
//! into memory it maps writable and then makes executable with `mprotect` from its own code.
//! Told by the `mprotect` hook (`csrc/mprotect.c`) with the caller's address, such memory is
//! sent to the collector as the interpreter's (`Kind::InterpreterCode`), so the time spent
//! there counts as Python time on the lines the traces run, not as native `<JIT code>`; its
//! unmapping is sent too. Other JIT compilers (numba, XLA) make their code executable from their
//! own libraries, and stay native.

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use mlprof_wire::Record;

use crate::table::Table;
use crate::{channel, clock};

const SLOTS: usize = 1 << 12;
const PROBES: usize = 64;

/// The interpreter's executable code: `[LO, HI)` of the object that holds `PyCode_Type`.
static LO: AtomicUsize = AtomicUsize::new(0);
static HI: AtomicUsize = AtomicUsize::new(0);
/// Its JIT's code regions now: start → bytes.
static REGIONS: Table<AtomicUsize, SLOTS, PROBES> = Table::new();
/// Whether any was seen: unmapping costs nothing before.
static ANY: AtomicBool = AtomicBool::new(false);

extern "C" {
    fn mlprof_set_made_executable(f: extern "C" fn(usize, usize, usize));
}

fn hash(addr: usize) -> usize {
    (addr >> 12).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52
}

/// Find the interpreter's code and start listening (load time, after the runtime was found;
/// `code_type` is the address of `PyCode_Type`, 0 if not a Python process).
pub fn init(code_type: usize) {
    if code_type == 0 {
        return;
    }
    let mut found = (code_type, 0usize, 0usize);
    // SAFETY: dl_iterate_phdr calls `each` with valid info for every loaded object; `found`
    // outlives the call.
    unsafe {
        libc::dl_iterate_phdr(
            Some(each),
            (&mut found as *mut (usize, usize, usize)).cast(),
        )
    };
    let (_, lo, hi) = found;
    if lo == 0 || hi <= lo {
        return;
    }
    LO.store(lo, Ordering::Relaxed);
    HI.store(hi, Ordering::Relaxed);
    // SAFETY: registering a plain `extern "C"` function that lives as long as the library.
    unsafe { mlprof_set_made_executable(made_executable) };
}

/// For the object one of whose segments holds `found.0`: its executable segments' span.
unsafe extern "C" fn each(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: the loader passes a valid info block and our tuple.
    let (info, found) = unsafe { (&*info, &mut *(data as *mut (usize, usize, usize))) };
    let segment = |i: usize| {
        // SAFETY: dlpi_phdr has dlpi_phnum entries (i is below it).
        let ph = unsafe { &*info.dlpi_phdr.add(i) };
        let start = info.dlpi_addr as usize + ph.p_vaddr as usize;
        (ph, start, start + ph.p_memsz as usize)
    };
    let phnum = info.dlpi_phnum as usize;
    let holds = (0..phnum).any(|i| {
        let (ph, start, end) = segment(i);
        ph.p_type == libc::PT_LOAD && (start..end).contains(&found.0)
    });
    if !holds {
        return 0;
    }
    for i in 0..phnum {
        let (ph, start, end) = segment(i);
        if ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_X != 0 {
            found.1 = if found.1 == 0 {
                start
            } else {
                found.1.min(start)
            };
            found.2 = found.2.max(end);
        }
    }
    1
}

/// `mprotect` made `[start, start + bytes)` executable, called from `caller`.
extern "C" fn made_executable(start: usize, bytes: usize, caller: usize) {
    let (lo, hi) = (LO.load(Ordering::Relaxed), HI.load(Ordering::Relaxed));
    if caller < lo || caller >= hi || !crate::table::storable(start) {
        return;
    }
    let _errno = crate::errno::Saved::new();
    if REGIONS.insert(hash(start), start, bytes) {
        ANY.store(true, Ordering::Relaxed);
    }
    channel::send(&Record::interpreter_code(
        clock::tid(),
        clock::monotonic_ns(),
        start as u64,
        bytes as u64,
        true,
    ));
}

/// `[addr, addr + len)` was unmapped: the JIT's region that started there is gone.
#[inline]
pub fn unmapped(addr: usize, _len: usize) {
    if !ANY.load(Ordering::Relaxed) || !crate::table::storable(addr) {
        return;
    }
    if let Some(bytes) = REGIONS.remove(hash(addr), addr) {
        let _errno = crate::errno::Saved::new();
        channel::send(&Record::interpreter_code(
            clock::tid(),
            clock::monotonic_ns(),
            addr as u64,
            bytes as u64,
            false,
        ));
    }
}

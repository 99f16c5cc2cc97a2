//! `dlsym`, interposed so that a CUDA function a program looks up through a handle of its own
//! (`dlopen("libcuda.so.1")` then `dlsym(handle, "cuMemAlloc_v2")`, as XLA does, or the
//! runtime's `dlsym(handle, "cuGetProcAddress_v2")`) is handed our hook of it.
//!
//! The real `dlsym` takes the identity of its caller from its return address: `RTLD_NEXT`
//! means "after the object that called". So the exported `dlsym` is a naked stub that leaves
//! that address alone: for `RTLD_DEFAULT`, `RTLD_NEXT` and any name not starting with `cu` it
//! jumps straight to the real one (the caller returns from the real `dlsym` as if we were not
//! there); only a `cu*` name looked up through a handle comes to Rust ([`by_handle`]), which
//! calls the real `dlsym` (for an explicit handle the caller only decides which object the
//! loader records as depending on it) and may swap the result for our hook of the same
//! function. See docs/design/gpu.md ("The driver API").

use core::ffi::{c_char, c_void, CStr};
use core::sync::atomic::{AtomicUsize, Ordering};

/// The real `dlsym` (0: not found yet).
static REAL: AtomicUsize = AtomicUsize::new(0);

type Dlsym = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// Find the real `dlsym`: the next definition after this library (`libc.so.6` since glibc
/// 2.34, `libdl.so.2` before), by version, through `dlvsym`, which is not interposed. 0 if
/// there is none (then our `dlsym` finds nothing, as a program without one would).
extern "C" fn mlprof_dlsym_resolve() -> usize {
    let found = REAL.load(Ordering::Acquire);
    if found != 0 {
        return found;
    }
    #[cfg(target_arch = "x86_64")]
    let versions: [&CStr; 2] = [c"GLIBC_2.34", c"GLIBC_2.2.5"];
    #[cfg(not(target_arch = "x86_64"))]
    let versions: [&CStr; 2] = [c"GLIBC_2.34", c"GLIBC_2.17"];
    for v in versions {
        // SAFETY: valid C strings; `dlvsym` with RTLD_NEXT looks past this library.
        let f = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), v.as_ptr()) } as usize;
        if f != 0 && !super::real::ours(f) {
            REAL.store(f, Ordering::Release);
            return f;
        }
    }
    0
}

/// The real `dlsym` called from this library: `RTLD_NEXT` means after this library.
///
/// # Safety
/// `handle` is a handle `dlsym` accepts (RTLD_DEFAULT, RTLD_NEXT or one from `dlopen`).
pub unsafe fn sym(handle: *mut c_void, name: &CStr) -> usize {
    match mlprof_dlsym_resolve() {
        0 => 0,
        // SAFETY: the real `dlsym`, with its own signature; the caller's contract.
        f => unsafe { core::mem::transmute::<usize, Dlsym>(f)(handle, name.as_ptr()) as usize },
    }
}

/// `dlsym(handle, name)` for an explicit handle and a `cu*` name (the stub sends only those):
/// the real result, or our hook standing for exactly that function.
///
/// # Safety
/// The caller's `dlsym` contract: `name` is a NUL-terminated string.
unsafe extern "C" fn mlprof_dlsym_by_handle(handle: *mut c_void, name: *const c_char) -> usize {
    // SAFETY: checked non-null by the stub; NUL-terminated by the caller's contract.
    let name = unsafe { CStr::from_ptr(name) };
    // SAFETY: the caller's handle, forwarded.
    let found = unsafe { sym(handle, name) };
    if found == 0 {
        return 0; // `dlerror` says why, as the real call left it
    }
    let _errno = crate::errno::Saved::new();
    super::entry::by_exact_name(name.to_bytes(), found)
}

/// The exported `dlsym`: see the module's documentation. No frame of its own on the paths
/// that jump to the real one.
///
/// # Safety
/// `dlsym`'s contract.
#[cfg(all(not(test), target_arch = "x86_64"))]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlsym(_handle: *mut c_void, _name: *const c_char) -> *mut c_void {
    core::arch::naked_asm!(
        "test rdi, rdi",
        "jz 2f",
        "cmp rdi, -1",
        "je 2f",
        "test rsi, rsi",
        "jz 2f",
        "cmp byte ptr [rsi], 0x63", // 'c'
        "jne 2f",
        "cmp byte ptr [rsi + 1], 0x75", // 'u'
        "jne 2f",
        "jmp {by_handle}",
        "2:",
        "mov rax, qword ptr [rip + {real}@GOTPCREL]",
        "mov rax, qword ptr [rax]",
        "test rax, rax",
        "jz 3f",
        "jmp rax",
        "3:",
        // Not found yet: find it keeping the arguments (and the stack aligned), then jump.
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {resolve}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jz 4f",
        "jmp rax",
        "4:",
        "ret",
        by_handle = sym mlprof_dlsym_by_handle,
        real = sym REAL,
        resolve = sym mlprof_dlsym_resolve,
    );
}

/// The exported `dlsym` (aarch64): see the x86-64 version.
///
/// # Safety
/// `dlsym`'s contract.
#[cfg(all(not(test), target_arch = "aarch64"))]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlsym(_handle: *mut c_void, _name: *const c_char) -> *mut c_void {
    core::arch::naked_asm!(
        "cbz x0, 2f",
        "cmn x0, #1",
        "b.eq 2f",
        "cbz x1, 2f",
        "ldrb w9, [x1]",
        "cmp w9, #0x63",
        "b.ne 2f",
        "ldrb w9, [x1, #1]",
        "cmp w9, #0x75",
        "b.ne 2f",
        "b {by_handle}",
        "2:",
        "adrp x9, :got:{real}",
        "ldr x9, [x9, :got_lo12:{real}]",
        "ldr x9, [x9]",
        "cbz x9, 3f",
        "br x9",
        "3:",
        "stp x29, x30, [sp, #-32]!",
        "mov x29, sp",
        "stp x0, x1, [sp, #16]",
        "bl {resolve}",
        "mov x9, x0",
        "ldp x0, x1, [sp, #16]",
        "ldp x29, x30, [sp], #32",
        "cbz x9, 4f",
        "br x9",
        "4:",
        "mov x0, #0",
        "ret",
        by_handle = sym mlprof_dlsym_by_handle,
        real = sym REAL,
        resolve = sym mlprof_dlsym_resolve,
    );
}

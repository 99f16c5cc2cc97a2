//! Attaching to the collector when the library loads, re-attaching in fork children, and
//! recording the exit status. The load-time constructor runs before `main`, single-threaded;
//! the fork-child handler runs in the only thread of the child. Neither allocates.

use core::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

use libc::c_int;
use mlprof_wire::{
    state, Header, ProcessExit, ProcessStart, Record, CMDLINE_BYTES, PYVERSION_BYTES,
};

use crate::python::{codes, runtime};
use crate::{channel, clock, heap, hooks, memory, real, sampler};

/// Runs when the dynamic loader initialises the library (`.init_array`), which glibc calls
/// with the program's `argc`, `argv` and `envp`.
extern "C" fn on_load(
    argc: c_int,
    argv: *const *const libc::c_char,
    _envp: *const *const libc::c_char,
) {
    let _errno = crate::errno::Saved::new();
    real::resolve();
    hooks::copy::resolve();
    let Some(header) = attach(false) else {
        // Not launched by mlprof (no MLPROF_DIR): count nothing, send nothing. Launched by an
        // mlprof run that has ended (an orphan that exec'd later), or as another user (a
        // descendant that changed user: `su`, `setpriv`), or given a directory that is not the
        // user's own (someone made the ended run's name again): also keep this process's own
        // children from loading the library, and forget the run's directory.
        if session_unreachable() {
            strip_from_ld_preload();
            // SAFETY: load time, no other thread reads the environment yet.
            unsafe { libc::unsetenv(mlprof_wire::ENV_DIR.as_ptr()) };
        }
        return;
    };
    crate::python::read::init();
    let mut status = python_version_text().map_or(mlprof_wire::python_status::NONE, runtime::init);
    if status == mlprof_wire::python_status::WALKED && !crate::python::read::allowed() {
        // Every frame read would fail: say why rather than show lines without Python.
        status = mlprof_wire::python_status::READ_REFUSED;
    }
    if status == mlprof_wire::python_status::CHECK_PENDING && !crate::python::read::allowed() {
        // A layout nothing vouches for is never read with plain loads.
        runtime::refuse_reads();
        status = mlprof_wire::python_status::READ_REFUSED;
    }
    header.python_status.store(status, Ordering::Relaxed);
    publish_addresses(header);
    memory::pymem::resolve();
    memory::pymem::install_free_threaded(header);
    crate::python::jit::init(runtime::addresses().1);
    if status != mlprof_wire::python_status::NONE {
        crate::python::tensors::init(argc, argv);
    }
    memory::sampler::configure(
        env_u64(mlprof_wire::ENV_MEMORY_SAMPLE),
        env_u64(mlprof_wire::ENV_COPY_SAMPLE),
    );
    if let Some(mean) = env_set_u64(mlprof_wire::ENV_GPU_LAUNCH_SAMPLE) {
        crate::gpu::send::configure(mean);
    }
    if env_set_u64(mlprof_wire::ENV_GPU_KERNELS) == Some(0) {
        crate::gpu::cupti::forget();
    }
    let interval = sampler::start(env_u64(mlprof_wire::ENV_RATE));
    header
        .sample_interval_ns
        .store(interval as u32, Ordering::Relaxed);
    hooks::thread::announce();
    hooks::signal::init();
    if env_u64(mlprof_wire::ENV_NO_FOLLOW) != 0 {
        NO_FOLLOW.store(true, Ordering::Relaxed);
        strip_from_ld_preload();
    }
    // SAFETY: registering plain `extern "C"` callbacks that live as long as the library.
    unsafe {
        libc::pthread_atfork(Some(on_fork_prepare), None, Some(on_fork_child));
        on_exit(on_normal_exit, core::ptr::null_mut());
    }
}

#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn(c_int, *const *const libc::c_char, *const *const libc::c_char) =
    on_load;

extern "C" {
    /// glibc's `on_exit`: like `atexit`, but the handler receives the exit status, also when
    /// `main` returns.
    fn on_exit(f: extern "C" fn(c_int, *mut libc::c_void), arg: *mut libc::c_void) -> c_int;
}

extern "C" fn on_normal_exit(code: c_int, _arg: *mut libc::c_void) {
    let _errno = crate::errno::Saved::new();
    record_exit(code, false);
}

/// The parent's heap at the moment of the fork, which the child inherits. Taken before the
/// fork: in the child, the counters still point into the parent's shared channel, which the
/// parent keeps changing.
static HEAP_AT_FORK: AtomicI64 = AtomicI64::new(0);
/// When the last fork began (`CLOCK_MONOTONIC` ns, taken in the parent before it): the child
/// inherits it with the rest of its parent's memory.
static FORK_NS: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_fork_prepare() {
    memory::free_threaded::flush(); // the heap the child inherits has this thread's share
    HEAP_AT_FORK.store(
        heap::counters().current.load(Ordering::Relaxed),
        Ordering::Relaxed,
    );
    FORK_NS.store(clock::monotonic_ns(), Ordering::Relaxed);
}

/// `--no-follow`: only the launched process is profiled.
static NO_FOLLOW: AtomicBool = AtomicBool::new(false);

extern "C" fn on_fork_child() {
    let _errno = crate::errno::Saved::new(); // the program reads errno after fork() returns
                                             // Whatever happens next: the parent's regions (and its region lock, if a thread held it
                                             // at the fork) are not the child's, or a child left without a channel could spin forever
                                             // in `mlprof_region_end`.
    crate::marks::forget_in_child();
    memory::mapped::forget_in_child(); // its inherited mappings are its parent's
    crate::gpu::cupti::forget_in_child(); // no CUDA context crosses a fork
    if NO_FOLLOW.load(Ordering::Relaxed) {
        channel::detach();
        heap::detach(HEAP_AT_FORK.load(Ordering::Relaxed));
        sampler::timer::forget_this_thread();
        return;
    }
    // Read before `attach` replaces the inherited channel with this child's own.
    let parent = channel::previous_python_status();
    let Some(header) = attach(true) else {
        // No channel of its own (no space, too many files): the child must not write into its
        // parent's. It runs unprofiled, and the collector notes a child without a channel.
        channel::detach();
        heap::detach(HEAP_AT_FORK.load(Ordering::Relaxed));
        sampler::timer::forget_this_thread();
        return;
    };
    crate::python::read::init(); // a new pid to read ourselves with
    codes::new_epoch(); // the new channel has seen no code object yet
    memory::reset_marks(HEAP_AT_FORK.load(Ordering::Relaxed));
    header.python_status.store(parent, Ordering::Relaxed);
    publish_addresses(header);
    // The frames this child inherited: the collector tells its own code from its parent's.
    header
        .fork_depth
        .store(crate::python::stack::depth(), Ordering::Relaxed);
    sampler::timer::forget_this_thread(); // timers are not inherited across fork
                                          // Nor is the parent's waiting (short waits it carried, a wait a handler forked in).
    crate::local::with(|l| {
        l.waiting_since.set(0);
        l.short_waits.set(0);
    });
    sampler::timer::arm_this_thread();
    header
        .sample_interval_ns
        .store(sampler::timer::mean_interval() as u32, Ordering::Relaxed);
    hooks::thread::announce();
}

fn publish_addresses(header: &Header) {
    let (runtime, code_type) = runtime::addresses();
    header.py_runtime.store(runtime as u64, Ordering::Relaxed);
    header
        .py_code_type
        .store(code_type as u64, Ordering::Relaxed);
}

/// Create this process's channel and move the heap counters into it.
fn attach(forked: bool) -> Option<&'static Header> {
    let mut dir = [0u8; 400];
    copy_env(mlprof_wire::ENV_DIR, &mut dir)?;
    if !dir_is_ours(&dir) {
        return None;
    }
    let inherited = forked.then(|| HEAP_AT_FORK.load(Ordering::Relaxed));
    let header = channel::open(&dir, mlprof_wire::DEFAULT_SLOTS, |h| {
        fill_identity(h, forked);
        h.inherited_heap = inherited.unwrap_or(0).max(0) as u64;
        h.fork_ns = if forked {
            FORK_NS.load(Ordering::Relaxed)
        } else {
            0
        };
    })?;
    heap::publish(&header.heap, inherited);
    memory::mapped::publish(&header.mapped);
    let start = ProcessStart {
        pid: header.pid,
        ppid: header.ppid,
        forked,
    };
    channel::send(&Record::process_start(clock::tid(), header.start_ns, start));
    Some(header)
}

fn fill_identity(h: &mut Header, forked: bool) {
    // SAFETY: getppid has no preconditions.
    h.ppid = unsafe { libc::getppid() } as u32;
    (h.rank, h.local_rank, h.world_size) = (-1, -1, -1);
    // The first launcher whose rank variable is set names rank, local rank and world size.
    if let Some((rank, local, size)) = mlprof_wire::RANK_VARIABLES
        .iter()
        .find_map(|&(r, l, w)| Some((env_int(r)?, l, w)))
    {
        h.rank = rank;
        h.local_rank = env_int(local).unwrap_or(-1);
        h.world_size = env_int(size).unwrap_or(-1);
    }
    h.forked = forked as u32;
    let (len, truncated) = read_cmdline(&mut h.cmdline);
    h.cmdline_len = len as u32;
    h.cmdline_truncated = truncated as u32;
    if let Some(text) = python_version_text() {
        let version = text.split(|&b| b == b' ').next().unwrap_or(&[]);
        // A free-threaded build is `3.13.5t`, as its executable is named.
        let build: &[u8] = if runtime::free_threaded(text) {
            b"t"
        } else {
            b""
        };
        // Cut to leave the last byte 0.
        let room = h.python_version.iter_mut().take(PYVERSION_BYTES - 1);
        for (to, &from) in room.zip(version.iter().chain(build)) {
            *to = from;
        }
    }
}

/// Whether this is a vfork child of the process that owns the channel `header` (it shares
/// that process's memory: its channel, our globals and the thread's state block). The system
/// call, not a cached pid: in a vfork child only the kernel knows.
pub fn in_vfork_child(header: &Header) -> bool {
    // SAFETY: getpid has no preconditions.
    (unsafe { libc::syscall(libc::SYS_getpid) }) as u32 != header.pid
}

/// Record the exit status in the channel header (idempotent: the first call wins).
pub fn record_exit(code: c_int, immediate: bool) {
    let Some(ring) = channel::ring() else { return };
    let header = ring.header();
    if header.state.load(Ordering::Acquire) == state::EXITED {
        return;
    }
    // A vfork child (CPython's subprocess when exec fails: `_exit(255)`) shares its parent's
    // memory, channel included, and must not mark the still-running parent as exited.
    if in_vfork_child(header) {
        return;
    }
    // The exiting thread's CPU since its last sample (other threads' tails are not known).
    sampler::timer::send_tail();
    memory::free_threaded::flush(); // its Python objects' heap change not yet shared
    if !immediate {
        // Not from `_exit` (a fork child's, a signal handler's): it asks the interpreter.
        memory::free_threaded::confirm_at_exit();
    }
    let now = clock::monotonic_ns();
    header.exit_code.store(code, Ordering::Relaxed);
    header.exit_ns.store(now, Ordering::Relaxed);
    header.state.store(state::EXITED, Ordering::Release);
    let exit = ProcessExit {
        code: code as i64,
        immediate,
    };
    ring.push(&Record::process_exit(clock::tid(), now, exit));
}

/// Whether `MLPROF_DIR` is set and names no directory this process may use: gone (the run
/// ended), another user's (this process changed user), a link, or open to others.
fn session_unreachable() -> bool {
    let mut dir = [0u8; 400];
    copy_env(mlprof_wire::ENV_DIR, &mut dir).is_some() && !dir_is_ours(&dir)
}

/// Whether `dir` (NUL-terminated) is a directory, not a link, owned by this process's
/// effective user and closed to everyone else, as `mlprof run` makes the run's directory.
fn dir_is_ours(dir: &[u8; 400]) -> bool {
    // SAFETY: an all-zero `stat` is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: `dir` is NUL-terminated (copy_env); `st` is a valid out-pointer.
    if unsafe { libc::lstat(dir.as_ptr().cast(), &mut st) } != 0 {
        return false;
    }
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    st.st_mode & libc::S_IFMT == libc::S_IFDIR && st.st_uid == euid && st.st_mode & 0o077 == 0
}

/// Whether an `LD_PRELOAD` entry is this library: `libmlprof_preload*.so`, with any directory.
fn is_ours(entry: &[u8]) -> bool {
    let name = entry.rsplit(|&b| b == b'/').next().unwrap_or(entry);
    name.starts_with(b"libmlprof_preload") && name.ends_with(b".so")
}

/// Remove this library from `LD_PRELOAD`, so that programs this process executes are not
/// profiled (`--no-follow`, or the run has ended). Load time, single-threaded; entries are
/// separated by `:` or spaces.
fn strip_from_ld_preload() {
    let mut value = [0u8; 4096];
    if copy_env(c"LD_PRELOAD", &mut value).is_none() {
        return;
    }
    let len = value.iter().position(|&b| b == 0).unwrap_or(0);
    let mut kept = [0u8; 4096];
    let Some(n) = without_ours(value.get(..len).unwrap_or_default(), &mut kept) else {
        return; // cannot happen: what is kept is never longer than the value
    };
    // SAFETY: NUL-terminated buffers; load time, no other thread reads the environment yet.
    unsafe {
        if n == 0 {
            libc::unsetenv(c"LD_PRELOAD".as_ptr());
        } else {
            libc::setenv(c"LD_PRELOAD".as_ptr(), kept.as_ptr().cast(), 1);
        }
    }
}

/// The entries of `LD_PRELOAD`'s value `entries` that are not this library, joined by `:` into
/// `kept` (zeros): their length, or `None` if they would leave no room for the NUL after them.
fn without_ours(entries: &[u8], kept: &mut [u8]) -> Option<usize> {
    let mut n = 0;
    for entry in entries
        .split(|&b| b == b':' || b == b' ')
        .filter(|e| !e.is_empty() && !is_ours(e))
    {
        let sep: &[u8] = if n > 0 { b":" } else { b"" };
        for &b in sep.iter().chain(entry) {
            *kept.get_mut(n)? = b;
            n += 1;
        }
    }
    (n < kept.len()).then_some(n)
}

/// A number from the environment (0 when unset or malformed: that feature off).
fn env_u64(name: &core::ffi::CStr) -> u64 {
    let mut buf = [0u8; 24];
    if copy_env(name, &mut buf).is_none() {
        return 0;
    }
    let digits = buf
        .split(|b| !b.is_ascii_digit())
        .next()
        .unwrap_or_default();
    core::str::from_utf8(digits)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// A number from the environment, `None` when unset or malformed (the default stands).
fn env_set_u64(name: &core::ffi::CStr) -> Option<u64> {
    let mut buf = [0u8; 24];
    copy_env(name, &mut buf)?;
    let digits = buf.iter().take_while(|b| b.is_ascii_digit()).count();
    core::str::from_utf8(buf.get(..digits)?).ok()?.parse().ok()
}

/// Copy an environment variable into `out`, NUL-terminated. `None` if unset or too long.
fn copy_env(name: &core::ffi::CStr, out: &mut [u8]) -> Option<()> {
    // SAFETY: getenv with a valid C string; the result is read before any setenv can run
    // (constructor or single-threaded fork child).
    let value = unsafe { libc::getenv(name.as_ptr()) };
    if value.is_null() {
        return None;
    }
    // SAFETY: getenv returned a valid NUL-terminated string.
    let bytes = unsafe { core::ffi::CStr::from_ptr(value) }.to_bytes();
    if bytes.is_empty() || bytes.len() >= out.len() {
        return None;
    }
    let (to, rest) = out.split_at_mut_checked(bytes.len())?;
    to.copy_from_slice(bytes);
    *rest.first_mut()? = 0;
    Some(())
}

/// A non-negative decimal integer from the environment variable `name`.
fn env_int(name: &str) -> Option<i32> {
    let mut cname = [0u8; 64];
    cname
        .get_mut(..name.len())?
        .copy_from_slice(name.as_bytes());
    let cname = core::ffi::CStr::from_bytes_until_nul(&cname).ok()?;
    let mut value = [0u8; 16];
    copy_env(cname, &mut value)?;
    let digits = value.split(|&b| b == 0).next()?;
    let mut n: i32 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(i32::from(d - b'0'))?;
    }
    (!digits.is_empty()).then_some(n)
}

/// Read `/proc/self/cmdline` into `out`. Returns (bytes, truncated).
fn read_cmdline(out: &mut [u8; CMDLINE_BYTES]) -> (usize, bool) {
    // SAFETY: a constant NUL-terminated path.
    let fd = unsafe {
        libc::open(
            c"/proc/self/cmdline".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return (0, false);
    }
    let mut len = 0;
    while let Some(tail) = out.get_mut(len..).filter(|t| !t.is_empty()) {
        // SAFETY: reading into the unfilled tail of `out`, within its bounds.
        let n = unsafe { libc::read(fd, tail.as_mut_ptr().cast(), tail.len()) };
        if n <= 0 {
            break;
        }
        len += n as usize;
    }
    let mut probe = 0u8;
    // SAFETY: reading one byte into a local to learn whether anything was left over.
    let more = len == out.len() && unsafe { libc::read(fd, (&mut probe as *mut u8).cast(), 1) } > 0;
    // SAFETY: closing our own descriptor.
    unsafe { libc::close(fd) };
    (len, more)
}

/// `Py_GetVersion()`'s text if this process contains a CPython interpreter.
fn python_version_text() -> Option<&'static [u8]> {
    // SAFETY: dlsym with a valid C string; looking up a symbol, not calling anything yet.
    let sym = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"Py_GetVersion".as_ptr()) };
    if sym.is_null() {
        return None;
    }
    // SAFETY: `Py_GetVersion` has the C signature `const char *(void)` in every CPython; it
    // formats a static buffer and is documented as callable before `Py_Initialize`.
    let get: extern "C" fn() -> *const libc::c_char = unsafe { core::mem::transmute(sym) };
    let text = get();
    // SAFETY: Py_GetVersion returns a NUL-terminated static string.
    (!text.is_null()).then(|| unsafe { core::ffi::CStr::from_ptr(text) }.to_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_library_is_taken_out_of_ld_preload() {
        let mut kept = [0u8; 64];
        let n = without_ours(
            b"/a/libx.so /tmp/m/libmlprof_preload.so::liby.so",
            &mut kept,
        );
        assert_eq!(n, Some(18));
        assert_eq!(&kept[..19], b"/a/libx.so:liby.so\0");
        let mut kept = [0u8; 64];
        assert_eq!(without_ours(b"libmlprof_preload.so", &mut kept), Some(0));
        let mut kept = [0u8; 4];
        assert_eq!(without_ours(b"abc", &mut kept), Some(3));
        assert_eq!(
            without_ours(b"abcd", &mut kept),
            None,
            "no room for the NUL"
        );
    }
}

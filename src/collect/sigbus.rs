//! Surviving a channel file that shrinks under us. Channel files are shared mappings
//! (`MAP_SHARED`) of files the profiled program can write: if it truncates one, the collector's
//! next read of a page past the new end is a SIGBUS, which would kill the collector and lose the
//! whole run.
//!
//! Every channel mapping is registered here (a lock-free list of address ranges). The SIGBUS
//! handler looks the faulting address up: inside a registered range, it maps anonymous zero
//! pages over the rest of that range (`MAP_FIXED`), flags the range as truncated and returns,
//! so the interrupted read is retried and reads zeros; the caller sees the flag and stops
//! reading that channel. Any other SIGBUS kills the collector as before (default action,
//! re-raised). The handler uses only atomics, `mmap`, `sigaction` and `raise`.

use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicUsize, Ordering};
use std::sync::Once;

const FREE: u8 = 0;
const CLAIMED: u8 = 1;
const LIVE: u8 = 2;
const PER_CHUNK: usize = 64;

/// One registered range: `start..end`, page-aligned.
struct Entry {
    state: AtomicU8,
    start: AtomicUsize,
    end: AtomicUsize,
    faulted: AtomicBool,
}

impl Entry {
    const fn new() -> Entry {
        Entry {
            state: AtomicU8::new(FREE),
            start: AtomicUsize::new(0),
            end: AtomicUsize::new(0),
            faulted: AtomicBool::new(false),
        }
    }
}

/// A block of entries; chunks are appended (never freed) when all are in use.
struct Chunk {
    entries: [Entry; PER_CHUNK],
    next: AtomicPtr<Chunk>,
}

impl Chunk {
    const fn new() -> Chunk {
        Chunk {
            entries: [const { Entry::new() }; PER_CHUNK],
            next: AtomicPtr::new(ptr::null_mut()),
        }
    }

    fn next(&self) -> Option<&'static Chunk> {
        let next = self.next.load(Ordering::Acquire);
        // SAFETY: a non-null `next` was published (release) by `register` from a leaked Box
        // and is never freed, so it is valid for 'static.
        (!next.is_null()).then(|| unsafe { &*next })
    }
}

static FIRST: Chunk = Chunk::new();
static PAGE: AtomicUsize = AtomicUsize::new(4096);
static INSTALL: Once = Once::new();

/// A registered mapping; unregistered on drop (drop it before unmapping).
pub struct Registration {
    entry: &'static Entry,
}

impl Registration {
    /// Whether a read of this range faulted (the file shrank) and was replaced by zeros.
    pub fn faulted(&self) -> bool {
        self.entry.faulted.load(Ordering::Acquire)
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.entry.state.store(FREE, Ordering::Release);
    }
}

/// Register the mapping `start..start + len` (installs the handler on first use).
pub fn register(start: *const u8, len: usize) -> Registration {
    install();
    let page = PAGE.load(Ordering::Relaxed);
    let begin = start as usize;
    let end = begin.saturating_add(len).saturating_add(page - 1) & !(page - 1);
    let mut chunk: &'static Chunk = &FIRST;
    loop {
        for entry in &chunk.entries {
            if entry
                .state
                .compare_exchange(FREE, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                entry.start.store(begin, Ordering::Relaxed);
                entry.end.store(end, Ordering::Relaxed);
                entry.faulted.store(false, Ordering::Relaxed);
                entry.state.store(LIVE, Ordering::Release);
                return Registration { entry };
            }
        }
        chunk = match chunk.next() {
            Some(next) => next,
            None => {
                let fresh: *mut Chunk = Box::into_raw(Box::new(Chunk::new()));
                match chunk.next.compare_exchange(
                    ptr::null_mut(),
                    fresh,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    // SAFETY: `fresh` is now published and never freed: valid for 'static.
                    Ok(_) => unsafe { &*fresh },
                    Err(_) => {
                        // SAFETY: `fresh` came from Box::into_raw above and was not published.
                        drop(unsafe { Box::from_raw(fresh) });
                        continue; // another thread appended a chunk: look there
                    }
                }
            }
        };
    }
}

/// The live entry whose range holds `addr`. Async-signal-safe (atomic loads only).
fn find(addr: usize) -> Option<&'static Entry> {
    let mut chunk: &'static Chunk = &FIRST;
    loop {
        for entry in &chunk.entries {
            if entry.state.load(Ordering::Acquire) == LIVE
                && entry.start.load(Ordering::Relaxed) <= addr
                && addr < entry.end.load(Ordering::Relaxed)
            {
                return Some(entry);
            }
        }
        chunk = chunk.next()?;
    }
}

fn install() {
    INSTALL.call_once(|| {
        // SAFETY: sysconf has no memory preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if page > 0 && (page as usize).is_power_of_two() {
            PAGE.store(page as usize, Ordering::Relaxed);
        }
        // SAFETY: an all-zero sigaction is a valid value to fill in.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            on_sigbus;
        action.sa_sigaction = handler as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        // SAFETY: `action.sa_mask` is a valid sigset_t to initialise.
        unsafe { libc::sigemptyset(&mut action.sa_mask) };
        // SAFETY: installing a handler that is async-signal-safe (see `on_sigbus`) with a
        // valid, initialised sigaction; no old action is asked for.
        unsafe { libc::sigaction(libc::SIGBUS, &action, ptr::null_mut()) };
    });
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: with SA_SIGINFO the kernel passes a valid siginfo_t for this signal.
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    // si_code > 0: raised by the kernel for a memory access, so si_addr is the faulting address.
    if code > 0 {
        if let Some(entry) = find(addr) {
            let page = PAGE.load(Ordering::Relaxed);
            let from = addr & !(page - 1);
            let end = entry.end.load(Ordering::Relaxed);
            // SAFETY: `from..end` lies inside a live channel mapping owned by the collector
            // (registered, page-aligned, unregistered before it is unmapped); replacing those
            // pages with private zero pages leaves no reference dangling: readers only ever
            // read plain integers from them.
            let mapped = unsafe {
                libc::mmap(
                    from as *mut libc::c_void,
                    end - from,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_FIXED | libc::MAP_ANONYMOUS | libc::MAP_PRIVATE,
                    -1,
                    0,
                )
            };
            if mapped != libc::MAP_FAILED {
                entry.faulted.store(true, Ordering::Release);
                return; // the access is retried and reads zeros
            }
        }
    }
    // Not ours: die of it as we would have without this handler.
    // SAFETY: an all-zero sigaction with SIG_DFL (0) is the default disposition.
    let mut default: libc::sigaction = unsafe { std::mem::zeroed() };
    default.sa_sigaction = libc::SIG_DFL;
    // SAFETY: sigaction and raise are async-signal-safe; `default` is initialised.
    unsafe {
        libc::sigaction(sig, &default, ptr::null_mut());
        libc::raise(sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;
    use std::os::fd::AsRawFd;
    use std::process::Command;

    fn map_file(path: &std::path::Path, len: usize) -> (std::fs::File, *mut u8) {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .unwrap();
        file.set_len(len as u64).unwrap();
        // SAFETY: mapping `len` bytes of a file of that size, shared, no fixed address.
        let base = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        (file, base.cast())
    }

    fn read(at: *const u8) -> u8 {
        // SAFETY: the callers pass addresses inside a live mapping of theirs.
        unsafe { ptr::read_volatile(at) }
    }

    #[test]
    fn truncated_registered_mapping_reads_zeros_and_is_flagged() {
        let dir = std::env::temp_dir().join(format!("mlprof-sigbus-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.ring");
        let len = 4 * 4096;
        let (file, base) = map_file(&path, len);
        // SAFETY: the first byte of the fresh mapping.
        unsafe { *base = 7 };
        let registration = register(base, len);
        let other = register(base.wrapping_add(len), 4096); // a neighbour, not faulted
        assert_eq!(read(base), 7);
        file.set_len(0).unwrap(); // the program truncates its channel
        assert_eq!(
            read(base.wrapping_add(4096 + 10)),
            0,
            "read past the end: zeros"
        );
        assert_eq!(read(base), 0, "the page before too (faults again, handled)");
        assert!(registration.faulted());
        assert!(!other.faulted());
        drop(registration);
        drop(other);
        // SAFETY: unmapping exactly what map_file mapped; nothing uses it any more.
        unsafe { libc::munmap(base.cast(), len) };
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn many_registrations_grow_the_registry() {
        let held: Vec<Registration> = (0..3 * PER_CHUNK)
            .map(|i| register((0x1000_0000 + i * 0x10_000) as *const u8, 0x1000))
            .collect();
        let probe = 0x1000_0000 + (2 * PER_CHUNK + 5) * 0x10_000 + 0x800;
        assert!(find(probe).is_some());
        drop(held);
        assert!(find(probe).is_none());
    }

    /// A SIGBUS outside every registered mapping still kills the process with SIGBUS. Run in
    /// a child process (this test binary, this one test, with an environment flag).
    #[test]
    fn foreign_sigbus_still_kills() {
        const FLAG: &str = "MLPROF_SIGBUS_CHILD";
        if std::env::var_os(FLAG).is_some() {
            let dir = std::env::temp_dir().join(format!("mlprof-sigbus-c{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join("b.ring");
            let (file, base) = map_file(&path, 2 * 4096);
            let _registration = register(base.wrapping_add(2 * 4096), 4096); // elsewhere
            let no_core = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: a valid rlimit; no core file for the expected crash.
            unsafe { libc::setrlimit(libc::RLIMIT_CORE, &no_core) };
            std::fs::remove_dir_all(&dir).unwrap();
            file.set_len(0).unwrap();
            read(base.wrapping_add(4096)); // SIGBUS, not ours: the process dies here
            std::process::exit(0);
        }
        let me = std::env::current_exe().unwrap();
        let out = Command::new(me)
            .args([
                "--exact",
                "collect::sigbus::tests::foreign_sigbus_still_kills",
                "--nocapture",
            ])
            .env(FLAG, "1")
            .output()
            .unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGBUS),
            "{:?} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

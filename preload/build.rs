//! Compiles the C files of the preload library: the initial-exec thread-local state, and the
//! code that must let a thread's forced unwinding (`pthread_exit`, `pthread_cancel`) pass
//! through it: the thread entry, the blocking-wait hooks and the wrapper of the program's
//! signal handlers. Also hands the linker `exports.map`, the list of what the library exports.

fn main() {
    let files = [
        "csrc/local.c",
        "csrc/thread.c",
        "csrc/wait.c",
        "csrc/deadline.c",
        "csrc/signal.c",
        "csrc/sigwait.c",
        "csrc/mprotect.c",
        "csrc/fortify.c",
    ];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    cc::Build::new()
        .files(files)
        .flag("-fPIC")
        // Unwind tables and cleanup handlers that run during a forced unwind.
        .flag("-fexceptions")
        .flag("-fasynchronous-unwind-tables")
        .opt_level(2)
        .compile("mlprof_c");
    // What the library exports: rustc's own list (every `#[no_mangle]` item) merged with this
    // one, which names them all and keeps everything else local (tests/e2e/preload_exports.rs
    // checks the two agree).
    let map = std::path::Path::new(&std::env::var_os("CARGO_MANIFEST_DIR").expect("manifest dir"))
        .join("exports.map");
    println!("cargo:rerun-if-changed=exports.map");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map.display()
    );
}

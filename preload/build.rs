//! Compiles the C files of the preload library: the initial-exec thread-local state, and the
//! code that must let a thread's forced unwinding (`pthread_exit`, `pthread_cancel`) pass
//! through it: the thread entry, the blocking-wait hooks and the wrapper of the program's
//! signal handlers.

fn main() {
    let files = [
        "csrc/local.c",
        "csrc/thread.c",
        "csrc/wait.c",
        "csrc/deadline.c",
        "csrc/signal.c",
        "csrc/sigwait.c",
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
}

//! Compiles the one C file of the preload library: the initial-exec thread-local state.

fn main() {
    println!("cargo:rerun-if-changed=csrc/local.c");
    cc::Build::new()
        .file("csrc/local.c")
        .flag("-fPIC")
        .opt_level(2)
        .compile("mlprof_local");
}

//! Builds the preload library (a separate cdylib crate) and embeds it in the `mlprof` binary,
//! so that `cargo install --path .` gives a self-contained `mlprof`. A nested cargo with its own
//! target directory avoids deadlocking on the outer build's lock.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("manifest dir"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let profile = if std::env::var("PROFILE").as_deref() == Ok("release") {
        "release"
    } else {
        "dev"
    };
    for path in [
        "preload/src",
        "preload/Cargo.toml",
        "preload/build.rs",
        "preload/exports.map",
        "preload/csrc",
        "wire/src",
        "wire/Cargo.toml",
        "pyframes/src",
        "pyframes/Cargo.toml",
    ] {
        println!("cargo:rerun-if-changed={}", manifest.join(path).display());
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target_dir = out.join("preload-target");
    let mut cmd = Command::new(cargo);
    cmd.arg("build")
        .arg("--manifest-path")
        .arg(manifest.join("preload/Cargo.toml"))
        .arg("--profile")
        .arg(profile)
        .arg("--target-dir")
        .arg(&target_dir);
    if std::env::var_os("CARGO_NET_OFFLINE").is_some() {
        cmd.arg("--offline");
    }
    // Settings meant for the outer build (flags, jobserver, target dir, clippy as the
    // compiler wrapper, which would skip code generation) must not leak in.
    for var in [
        "CARGO_TARGET_DIR",
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "CARGO_MAKEFLAGS",
    ] {
        cmd.env_remove(var);
    }
    let status = cmd
        .status()
        .expect("failed to run cargo for the preload library");
    assert!(status.success(), "building the preload library failed");
    let dir = if profile == "dev" { "debug" } else { "release" };
    let built = target_dir.join(dir).join("libmlprof_preload.so");
    std::fs::copy(&built, out.join("libmlprof_preload.so")).expect("copy preload library");
}

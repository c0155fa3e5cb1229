//! Builds every plugin (the examples and the test guests) to a wasm component with
//! `cargo build --release --target wasm32-wasip2` and whole-program optimisation (what
//! `wasmformer new` puts in a plugin's Cargo.toml, given here as `--config` so the host's own
//! release build is not slowed by it), with the inlining the workspace's `.cargo/config.toml`
//! sets for that target (as `wasmformer new` sets it in a plugin's own), into `target/wasm`, and
//! writes their paths as constants into `$OUT_DIR/guests.rs`. A guest crate without a constant
//! cannot be used, and a constant without a crate fails this build.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest_dir.parent().unwrap().to_path_buf();
    let mut crates: Vec<(String, String)> = Vec::new(); // (package, const name)
    for (dir, prefix) in [("examples", ""), ("tests/guests", "guest-")] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.join("Cargo.toml").exists() {
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                crates.push((
                    format!("{prefix}{name}"),
                    name.to_uppercase().replace('-', "_"),
                ));
            }
        }
    }
    crates.sort();
    for watched in [
        "wit",
        "guest-sdk",
        "examples",
        "tests/guests",
        "Cargo.toml",
        "Cargo.lock",
        ".cargo/config.toml",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
    }

    let target_dir = root.join("target/wasm");
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cargo
        .current_dir(&root)
        .args([
            "build",
            "--release",
            "--config",
            "profile.release.lto=true",
            "--config",
            "profile.release.codegen-units=1",
            "--target",
            "wasm32-wasip2",
            "--target-dir",
        ])
        .arg(&target_dir);
    for (package, _) in &crates {
        cargo.args(["-p", package]);
    }
    // The outer build's settings are for the host target, not for wasm.
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_MAKEFLAGS",
        "MAKEFLAGS",
        "MFLAGS",
    ] {
        cargo.env_remove(var);
    }
    let status = cargo.status().expect("run cargo to build the wasm plugins");
    assert!(
        status.success(),
        "building the wasm plugins failed; is the target installed? run `rustup target add wasm32-wasip2`"
    );

    let mut out =
        String::from("// Paths of the wasm components built from examples/ and tests/guests/.\n");
    for (package, constant) in &crates {
        let wasm = target_dir
            .join("wasm32-wasip2/release")
            .join(format!("{}.wasm", package.replace('-', "_")));
        assert!(wasm.exists(), "{} was not built", wasm.display());
        out += &format!(
            "pub const {constant}: &str = {:?};\n",
            wasm.display().to_string()
        );
    }
    out += &format!(
        "pub const ALL: &[(&str, &str)] = &[{}];\n",
        crates
            .iter()
            .map(|(p, c)| format!("({p:?}, {c})"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let dest = Path::new(&std::env::var("OUT_DIR").unwrap()).join("guests.rs");
    std::fs::write(dest, out).unwrap();
}

//! Compiles the sockmap fast path's BPF program (`bpf/sockmap.c`) with clang into
//! `$OUT_DIR/sockmap.o`, which `proxy::sockmap` embeds.
//!
//! Tolerant by design: without clang or libbpf's headers (`libbpf-dev` on Debian) the build
//! warns and embeds an empty object, and a service with `fast_path = "sockmap"` splices instead,
//! with one warning at start saying the binary was built without the program.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let source = "bpf/sockmap.c";
    println!("cargo::rerun-if-changed={source}");
    println!("cargo::rerun-if-env-changed=FULCRUM_CLANG");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("sockmap.o");
    let clang = std::env::var("FULCRUM_CLANG").unwrap_or_else(|_| "clang".into());
    // The asm/ headers linux/bpf.h includes live under the host's multiarch directory on Debian;
    // -target bpf does not look there on its own.
    let multiarch = format!("/usr/include/{}-linux-gnu", std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default());
    let result = Command::new(&clang).args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"]).arg(format!("-I{multiarch}")).args(["-c", source, "-o"]).arg(&out).output();
    let failure = match result {
        Ok(o) if o.status.success() => return,
        Ok(o) => format!("{clang} failed: {}", String::from_utf8_lossy(&o.stderr).lines().take(3).collect::<Vec<_>>().join(" | ")),
        Err(e) => format!("cannot run {clang}: {e}"),
    };
    println!("cargo::warning=building without the sockmap BPF program ({failure}); install clang and libbpf-dev to have it. fast_path = \"sockmap\" will splice.");
    std::fs::write(&out, b"").expect("OUT_DIR is writable");
}

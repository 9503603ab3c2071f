//! Records the optimisation level this crate is built at (its profile's, with any per-package
//! override), so that a measurement can say which build it measured: `OPT_LEVEL` at run time.

fn main() {
    let level = std::env::var("OPT_LEVEL").unwrap_or_else(|_| "unknown".into());
    println!("cargo:rustc-env=OPT_LEVEL={level}");
    println!("cargo:rerun-if-changed=build.rs");
}

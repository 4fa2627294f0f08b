//! Hands shim-hip/symbol-versions.txt to the workspace's linker wrapper (scripts/cc-link.sh), which
//! writes libvitamin_hip.so's version script from it. The variable is set only for rustc while it
//! compiles this crate, so every other link is passed through unchanged.

fn main() {
    let list = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("symbol-versions.txt");
    println!("cargo:rerun-if-changed={}", list.display());
    println!("cargo:rustc-env=VITAMIN_VERSION_NODES={}", list.display());
    // The version definitions name the file by its soname, as libamdhip64's do.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libvitamin_hip.so");
}

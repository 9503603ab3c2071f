//! The `fulcrum` command: argument parsing and the exit code; everything else is in the library.

/// jemalloc (its background thread purges freed pages) gives memory back to the system; glibc's malloc kept most of what
/// a thousand slow HTTP readers had used after they left (see docs/hardening.md).
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read once at start: freed pages go back to the system after a second
/// unused (its default is ten), so memory a burst used and an idle connection gave up (HTTP
/// mode frees hyper's buffers while a client is quiet) leaves the RSS soon; the purge runs on
/// jemalloc's background thread, never on a thread that moves traffic.
// The symbol is how jemalloc finds its options: a NUL-terminated C string, by the name the
// tikv-jemallocator documentation gives.
#[cfg(feature = "jemalloc")]
#[allow(unsafe_code, non_upper_case_globals)]
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static malloc_conf: &[u8] = b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

fn main() -> std::process::ExitCode {
    fulcrum::cli::main()
}

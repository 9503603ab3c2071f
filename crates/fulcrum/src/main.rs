//! The `fulcrum` command: argument parsing and the exit code; everything else is in the library.

/// jemalloc (its background thread purges freed pages) gives memory back to the system; glibc's malloc kept most of what
/// a thousand slow HTTP readers had used after they left (see the README's "Limits and hardening").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    fulcrum::cli::main()
}

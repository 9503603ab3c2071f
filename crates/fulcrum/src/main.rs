//! The `fulcrum` command: argument parsing and the exit code; everything else is in the library.

fn main() -> std::process::ExitCode {
    fulcrum::cli::main()
}

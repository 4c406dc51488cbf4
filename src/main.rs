//! The binary: everything is in [`ccs_reap::cli`].

fn main() -> std::process::ExitCode {
    ccs_reap::cli::main()
}

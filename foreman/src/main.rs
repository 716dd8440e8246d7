//! The `saheeli` binary; everything is in the library (`src/lib.rs`).

fn main() -> std::process::ExitCode {
    saheeli_foreman::main()
}

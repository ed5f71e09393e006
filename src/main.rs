//! The `stead` binary: parses the command line and hands over to the library.

/// mimalloc rather than glibc's allocator: under `stead bench gateway` glibc's arena locks
/// showed in `perf`, and mimalloc used ~10% less CPU per proxied request.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    stead::cli::main()
}

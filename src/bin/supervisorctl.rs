#![no_main]

use clap::Parser;

// The unwinder linked in, as `gcc -static-libgcc` does: otherwise the dynamic loader maps
// libgcc_s.so.1 at every start of every command, and its constructor probes the CPU's
// features with CPUID, which traps to the hypervisor on a virtual machine; together about
// 0.15 ms of a 1.2 ms start (docs/benchmarks.md, (6)). It is listed before std's
// `-lgcc_s`, so the linker takes the unwinder from here and drops libgcc_s.so.1
// (`--as-needed`); panics unwind as before. The linker takes the unwinder from it only
// because this binary's own code calls it: the generic code instantiated here, such as
// clap's parsing, has landing pads that call `_Unwind_Resume`. Test: `tests/fake_slurm.rs`
// `the_client_links_no_regex_engine_and_no_libgcc_s`.
#[cfg_attr(
    all(
        target_os = "linux",
        target_env = "gnu",
        not(target_feature = "crt-static")
    ),
    link(name = "gcc_eh", kind = "static", modifiers = "-bundle")
)]
extern "C" {}

// The C `main`, not Rust's: Rust's start-up, which a one-request client does not need,
// reads /proc/self/maps to place a guard below the main thread's stack, maps an
// alternate signal stack and installs SIGSEGV and SIGBUS handlers (a stack overflow is
// then reported by name rather than as a plain SIGSEGV), and ignores SIGPIPE, which this
// client wants at its default anyway: about 0.04 ms of a 0.7 ms start (docs/benchmarks.md,
// issue 32, session 20). The arguments still reach `std::env::args` (glibc hands them to
// the standard library's initialiser), and a panic still ends the process with 101.
#[no_mangle]
extern "C" fn main(_argc: libc::c_int, _argv: *const *const libc::c_char) -> libc::c_int {
    let code = std::panic::catch_unwind(|| {
        let cli = slurm_supervisor::ctl::Cli::parse();
        slurm_supervisor::ctl::main_with(cli)
    })
    .unwrap_or(101);
    // Flushes standard output, as returning from Rust's `main` would.
    std::process::exit(code)
}

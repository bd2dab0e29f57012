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

fn main() {
    // Like any Unix filter: a closed pipe (`supervisorctl status | head`) ends the
    // process quietly instead of a panic on the next print.
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = slurm_supervisor::ctl::Cli::parse();
    std::process::exit(slurm_supervisor::ctl::main_with(cli));
}

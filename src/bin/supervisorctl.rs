use clap::Parser;

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

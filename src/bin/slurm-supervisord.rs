use clap::Parser;

fn main() {
    let args = slurm_supervisor::daemon_main::Args::parse();
    std::process::exit(slurm_supervisor::daemon_main::main(args));
}

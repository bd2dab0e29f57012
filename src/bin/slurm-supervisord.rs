use clap::Parser;

fn main() {
    let args = slurm_supervisor::daemon::start::Args::parse();
    std::process::exit(slurm_supervisor::daemon::start::main(args));
}

use clap::Parser;

fn main() {
    let cli = slurm_supervisor::ctl::Cli::parse();
    std::process::exit(slurm_supervisor::ctl::main_with(cli));
}

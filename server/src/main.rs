//! `podkv`: see `podkv --help`.

use clap::Parser;

fn main() {
    let cli = podkv::cli::Cli::parse();
    if let Err(err) = podkv::cli::run(cli) {
        eprintln!("podkv: {err}");
        std::process::exit(1);
    }
}

use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// Dump and restore throughput against disk-write and first-touch bandwidth.
    Engine {
        /// Sizes of touched memory, in MiB.
        #[arg(long, value_delimiter = ',', default_value = "64,1024,4096")]
        sizes: Vec<u64>,
        /// Repetitions per size (median and range are reported).
        #[arg(long, default_value_t = 3)]
        reps: usize,
        /// Image directory (its file system is what the dump is compared with).
        #[arg(long, default_value = "/var/tmp/pmig-bench")]
        dir: PathBuf,
        /// Also write the rows as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Remote execution overhead: `pmig run` of a null program against a local
    /// fork+exec+wait (run inside a node: `pmig cluster exec n1 -- pmig bench exec`).
    Exec(super::exec_bench::Args),
    /// Host selection: request + return pairs per second and their latency.
    Selector(super::hosts::BenchArgs),
}

pub fn run(a: Args) -> Result<i32> {
    match a.what {
        What::Exec(a) => super::exec_bench::run(a),
        What::Engine {
            sizes,
            reps,
            dir,
            json,
        } => {
            let o = pmig_bench::engine::Options {
                pmig: std::env::current_exe()?,
                dir,
                sizes_mib: sizes,
                reps,
            };
            let bar = indicatif::ProgressBar::new_spinner();
            bar.enable_steady_tick(std::time::Duration::from_millis(200));
            let rows = pmig_bench::engine::run(&o, &|m| bar.set_message(m.to_string()))?;
            bar.finish_and_clear();
            print!("{}", pmig_bench::engine::markdown(&rows));
            if let Some(p) = json {
                std::fs::write(&p, serde_json::to_string_pretty(&rows)?)?;
            }
            Ok(0)
        }
        What::Selector(b) => super::hosts::bench(b),
    }
}

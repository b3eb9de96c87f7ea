//! `pmig`: one binary, many subcommands. Each subcommand lives in `cmd/`.

use clap::{Parser, Subcommand};

mod cmd;

#[derive(Parser)]
#[command(
    name = "pmig",
    version,
    about = "Live process migration for Linux clusters"
)]
struct Cli {
    /// More log output (repeat for more).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Capture a running process into an image directory.
    Dump(cmd::dump::Args),
    /// Recreate a process from an image directory and resume it.
    Restore(cmd::restore::Args),
    /// Check that this kernel offers everything pmig needs.
    Check(cmd::check::Args),
    /// Local test cluster: `up`, `down`, `exec`, `status`.
    Cluster(cmd::cluster::Args),
    /// Benchmarks.
    Bench(cmd::bench::Args),
    /// Run the node daemon (control socket @pmig-control, node-to-node listener).
    Daemon(cmd::daemon::Args),
    /// Move a running process of this node to another node.
    Migrate(cmd::migrate::Args),
    /// Run a command on another node; this terminal stays its home.
    Run(cmd::run::Args),
    /// A shell for make: `pmig sh [SH OPTIONS] -c CMD` runs `/bin/sh -c CMD` on an
    /// idle node (here when there is none).
    Sh(cmd::pmake::ShCli),
    /// Parallel make on idle nodes: GNU make with `pmig sh` as its SHELL.
    Make(cmd::pmake::MakeArgs),
    /// The cluster's jobs (started with `pmig run`): home, node, history.
    Ps(cmd::run::PsArgs),
    /// Signal a job wherever it runs.
    Kill(cmd::run::KillArgs),
    /// Idle hosts from the cluster's selector: `request`, `status`.
    Hosts(cmd::hosts::HostsArgs),
    /// Owner activity: `pmig owner active [--node N]`.
    Owner(cmd::hosts::OwnerArgs),
    /// Load balancing: `pmig balance status`.
    Balance(cmd::hosts::BalanceArgs),
    /// Evict the foreign processes of a node (this one by default).
    Evict(cmd::hosts::EvictArgs),
}

fn main() {
    // `pmig sh` (or `pmig-sh`, a link) is make's shell, started once per recipe
    // line: its arguments are sh's own, parsed by hand, and nothing else is set up.
    let mut args = std::env::args_os();
    let argv0 = args.next();
    let as_sh = argv0
        .as_deref()
        .and_then(|a| std::path::Path::new(a).file_name())
        .is_some_and(|n| n == "pmig-sh");
    let mut rest: Vec<std::ffi::OsString> = args.collect();
    if as_sh || rest.first().is_some_and(|a| a == "sh") {
        if !as_sh {
            rest.remove(0);
        }
        logging("warn", false);
        let argv: Option<Vec<String>> = rest.into_iter().map(|a| a.into_string().ok()).collect();
        finish(match argv {
            Some(a) => cmd::pmake::sh(&a),
            None => Err(anyhow::anyhow!("pmig sh: an argument is not UTF-8")),
        });
    }
    let cli = Cli::parse();
    let level = match cli.verbose {
        // The daemon logs what it does (its log is its only output).
        0 if matches!(cli.command, Command::Daemon(_)) => "info",
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    // A daemon's log is read after the fact: its lines carry the time.
    logging(level, matches!(cli.command, Command::Daemon(_)));
    let result = match cli.command {
        Command::Dump(a) => cmd::dump::run(a),
        Command::Restore(a) => cmd::restore::run(a),
        Command::Check(a) => cmd::check::run(a),
        Command::Cluster(a) => cmd::cluster::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Daemon(a) => cmd::daemon::run(a),
        Command::Migrate(a) => cmd::migrate::run(a),
        Command::Run(a) => cmd::run::run(a),
        Command::Sh(a) => cmd::pmake::sh(&a.args),
        Command::Make(a) => cmd::pmake::make(a),
        Command::Ps(a) => cmd::run::ps(a),
        Command::Kill(a) => cmd::run::kill(a),
        Command::Hosts(a) => cmd::hosts::hosts(a),
        Command::Owner(a) => cmd::hosts::owner(a),
        Command::Evict(a) => cmd::hosts::evict(a),
        Command::Balance(a) => cmd::hosts::balance(a),
    };
    finish(result)
}

fn logging(level: &str, with_time: bool) {
    let b = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("PMIG_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level)),
        )
        .with_writer(std::io::stderr)
        // No colour codes in log files (the daemon's stderr is its log).
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    if with_time {
        b.init();
    } else {
        b.without_time().init();
    }
}

/// Exits with the command's status, or 1 after one line naming the cause chain.
fn finish(result: anyhow::Result<i32>) -> ! {
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            // One line naming the cause chain.
            let mut msg = format!("pmig: {e}");
            let mut src = e.source();
            while let Some(s) = src {
                let t = s.to_string();
                if !msg.contains(&t) {
                    msg.push_str(": ");
                    msg.push_str(&t);
                }
                src = s.source();
            }
            eprintln!("{msg}");
            std::process::exit(1);
        }
    }
}

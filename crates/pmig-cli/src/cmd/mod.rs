//! One module per subcommand.
pub mod bench;
pub mod check;
pub mod cluster;
pub mod daemon;
pub mod dump;
pub mod exec_bench;
pub mod hosts;
pub mod migrate;
pub mod pmake;
pub mod restore;
pub mod run;

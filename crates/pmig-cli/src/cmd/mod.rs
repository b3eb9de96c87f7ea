//! One module per subcommand.
pub mod bench;
pub mod check;
pub mod cluster;
pub mod daemon;
pub mod dump;
pub mod hosts;
pub mod migrate;
pub mod restore;

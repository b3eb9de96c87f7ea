//! One module per subcommand.
pub mod bench;
pub mod check;
pub mod cluster;
pub mod dump;
pub mod restore;

//! One module per subcommand.
pub mod check;
pub mod dump;
pub mod restore;

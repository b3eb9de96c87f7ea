//! pmig's engine: capture a stopped process into an image and restore it.
//!
//! * [`dump`] freezes a process, captures every resource and writes an image;
//! * [`restore`] recreates a process from an image;
//! * [`resources`] holds one module per kind of state, with its capture and
//!   restore side by side.

pub mod ampom;
pub mod check;
pub mod dirty;
pub mod dump;
pub mod error;
pub mod fsowner;
pub mod image;
pub mod lazy;
pub mod pagestore;
pub mod procfs;
pub mod ptrace;
pub mod resources;
pub mod restore;
pub mod skeleton;
pub mod sys;
pub mod timing;
pub mod uffd;

pub use dump::{dump, DumpOptions, DumpReport};
pub use error::{EngineError, Result};
pub use resources::RestoreOptions;
pub use restore::{
    restore, restore_held, restore_held_with, restore_skeleton, Bring, Release, Restored, Verify,
};

//! Shared by this crate's integration tests (`mod common;`); each test
//! file uses what it needs. `offload serve` in a child process and the
//! device helpers live in test-support, shared with the remote plugin's
//! tests (`plugins/remote/tests`).

#[allow(unused_imports)] // each test file uses what it needs
pub use test_support::device::{packed, read, read_into, write};
#[allow(unused_imports)]
pub use test_support::serve::{peak_rss, Server};
#[allow(unused_imports)]
pub use test_support::{skip, text};

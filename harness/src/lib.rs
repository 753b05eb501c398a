//! podkv's evaluation harness: everything that measures podkv rather than serves it.
//!
//! # Map
//! - [`helpers`]: byte sizes, medians and NDJSON record files, shared by every command.
pub mod helpers;

//! Where the heap's pages live: the placement word in the header, the checks that refuse a
//! placement this machine or this file cannot take, and applying it to a process's mapping.
//!
//! # The placement word (header offset [`OFFSET_PLACEMENT`])
//! ```text
//! Placement::to_word (mode bits 0..8 but bit 7, node mask 8..64) | FLAG_CLAIMED (bit 7)
//! ```
//! Zero (every heap made before the word existed, and a zero-filled file) is the default
//! policy. A creator claims the word by one CAS from zero, always setting `FLAG_CLAIMED` (so
//! even a default placement claims it), *before* its CAS of the format word. So once any
//! process sees a formatted heap the word is final: whoever published the format word found it
//! claimed, by itself or by a racing creator whose placement then wins, as the format word's
//! geometry does. Every opener applies the word's policy to its own mapping before it backs a
//! page (`mbind` on a shared file mapping; on tmpfs the policy is the file's, per offset).

use super::config::Config;
use crate::error::HeapError;
use crate::file::{HeapFile, Mapping};
use podkv_hw::topology::{Placement, Topology};
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// Header word: the heap's placement (see the module's map).
pub(super) const OFFSET_PLACEMENT: u64 = 8;
/// Set in every placement word a creator writes, so a default placement claims it too.
pub(super) const FLAG_CLAIMED: u64 = 0x80;

/// The placement word a creator with `config` claims.
pub(super) fn claim_word(config: &Config) -> u64 {
    FLAG_CLAIMED | config.placement.to_word()
}

/// The placement a header's word names.
pub(super) fn decode(file: &HeapFile, word: u64) -> Result<Placement, HeapError> {
    Placement::from_word(word & !FLAG_CLAIMED).ok_or_else(|| HeapError::Corrupt {
        path: file.path.clone(),
        what: format!("placement word {word:#x} names no placement"),
    })
}

/// Refuses, before anything is created, a configured placement for a device or naming a node
/// that is not online.
pub(super) fn refuse_configured(path: &Path, config: &Config) -> Result<(), HeapError> {
    if config.placement == Placement::Default {
        return Ok(());
    }
    let is_device = std::fs::metadata(path)
        .map(|m| m.file_type().is_char_device() || m.file_type().is_block_device())
        .unwrap_or(false);
    refuse(path, is_device, &config.placement)
}

/// Refuses the placement a heap's header records if this process cannot apply it.
pub(super) fn refuse_recorded(file: &HeapFile, placement: &Placement) -> Result<(), HeapError> {
    refuse(&file.path, file.is_device, placement)
}

fn refuse(path: &Path, is_device: bool, placement: &Placement) -> Result<(), HeapError> {
    if *placement == Placement::Default {
        return Ok(());
    }
    if is_device {
        return Err(HeapError::DaxPlacement {
            path: path.to_owned(),
            placement: placement.clone(),
        });
    }
    Topology::discover()?
        .check(placement)
        .map_err(|source| HeapError::Placement {
            path: path.to_owned(),
            source,
        })
}

/// Applies `placement` to `[base, base + len)`, a mapping of `file` in this process; nothing
/// for the default policy.
pub(super) fn apply(
    file: &HeapFile,
    base: *mut u8,
    len: u64,
    placement: &Placement,
) -> Result<(), HeapError> {
    if *placement == Placement::Default {
        return Ok(());
    }
    placement
        .apply(base, len as usize)
        .map_err(|source| HeapError::Placement {
            path: file.path.clone(),
            source,
        })
}

/// Applies `placement` to the eagerly mapped part of this process's reservation.
pub(super) fn apply_to_mapping(
    file: &HeapFile,
    mapping: &Mapping,
    mapped: u64,
    placement: &Placement,
) -> Result<(), HeapError> {
    apply(file, mapping.base(), mapped, placement)
}

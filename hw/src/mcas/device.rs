//! `device`: a hardware near-memory processor, as CXLALLOC §4 built in an FPGA.
//!
//! # The interface a device implementation would provide
//! - A device file (a CXL DAX device such as `/dev/daxX.Y`, or a driver's character device)
//!   exposing one device-biased range: the targets, the `spwr` lines and the `sprd` lines,
//!   in the [`Region`](super::Region) layout `nmp` uses, so clients are unchanged.
//! - The host maps the `spwr`/`sprd` lines and the targets **uncachable** (an MTRR or PAT
//!   entry), since the NMP cannot snoop CPU caches.
//! - A client writes its 64-byte `spwr` line (target, expected, new), then reads 16 bytes of
//!   its `sprd` line; the read triggers the compare and returns success and the previous
//!   value. The device serialises operations per target (Figure 6). A device needs no
//!   heartbeat word: its driver reports a failed device.
//!
//! No machine podkv runs on has such a device, so opening one is always refused with
//! [`McasError::DeviceUnavailable`](super::McasError::DeviceUnavailable).

use super::McasError;

/// The error every attempt to open an mCAS device returns on this machine.
pub fn unavailable() -> McasError {
    McasError::DeviceUnavailable(
        "mCAS device not available on this machine: no CXL device with near-memory CAS \
         logic was found (use `nmp` for the software processor or `flush-cas` to emulate)"
            .into(),
    )
}

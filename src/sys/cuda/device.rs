//! Facts about a device by ordinal: its UUID (how cuFile's per-GPU statistics name it), its PCI
//! bus id and the NUMA node the machine puts it on (`sys::numa`), and the device of the calling
//! thread's current context. UUIDs and nodes are looked up once per device and cached.

use std::collections::HashMap;
use std::ffi::{CStr, c_char};
use std::path::Path;
use std::sync::Mutex;

use cudarc::driver::sys;
use once_cell::sync::Lazy;

use super::driver::cuda;
use super::error::{CudaFailure, check};
use crate::sys::numa::{self, NodeLookup};

fn device(ordinal: i32) -> Result<sys::CUdevice, CudaFailure> {
    let mut device: sys::CUdevice = 0;
    // SAFETY: callers ran cuda(); valid out-pointer.
    check("cuDeviceGet", unsafe { sys::cuDeviceGet(&mut device, ordinal) })?;
    Ok(device)
}

/// Devices visible to this process (`cuDeviceGetCount` at initialisation).
///
/// Errors: `Unavailable`/`Forked`.
pub(crate) fn device_count() -> Result<i32, CudaFailure> {
    Ok(cuda()?.device_count())
}

static UUIDS: Lazy<Mutex<HashMap<i32, [u8; 16]>>> = Lazy::new(|| Mutex::new(HashMap::new()));

/// The 16 bytes of device `ordinal`'s UUID (`cuDeviceGetUuid_v2`; the `GPU-…` string of
/// nvidia-smi in binary), cached.
///
/// Errors: `Unavailable`/`Forked`; the CUresult of `cuDeviceGet` or `cuDeviceGetUuid_v2`.
pub fn device_uuid(ordinal: i32) -> Result<[u8; 16], CudaFailure> {
    cuda()?;
    if let Some(uuid) = UUIDS.lock().unwrap_or_else(|p| p.into_inner()).get(&ordinal) {
        return Ok(*uuid);
    }
    let mut uuid = sys::CUuuid { bytes: [0; 16] };
    // SAFETY: cuda() succeeded; valid out-pointer; the device came from cuDeviceGet.
    check("cuDeviceGetUuid_v2", unsafe { sys::cuDeviceGetUuid_v2(&mut uuid, device(ordinal)?) })?;
    let bytes = uuid.bytes.map(|b| b as u8);
    UUIDS.lock().unwrap_or_else(|p| p.into_inner()).insert(ordinal, bytes);
    Ok(bytes)
}

/// Whether the host may read and write device `ordinal`'s managed memory while GPU work runs
/// (`CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS`; 0 on pre-Pascal GPUs and under Windows or
/// WSL, where such an access faults the process).
///
/// Errors: `Unavailable`/`Forked`; the CUresult of `cuDeviceGet` or `cuDeviceGetAttribute`.
pub(crate) fn concurrent_managed_access(ordinal: i32) -> Result<bool, CudaFailure> {
    cuda()?;
    let mut value = 0;
    // SAFETY: cuda() succeeded; valid out-pointer; the device came from cuDeviceGet.
    check("cuDeviceGetAttribute", unsafe {
        sys::cuDeviceGetAttribute(&mut value, sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, device(ordinal)?)
    })?;
    Ok(value != 0)
}

/// Device `ordinal`'s PCI bus id as CUDA prints it (`cuDeviceGetPCIBusId`, e.g. `0000:3B:00.0`).
///
/// Errors: `Unavailable`/`Forked`; the CUresult of `cuDeviceGet` or `cuDeviceGetPCIBusId`.
pub fn device_pci_bus_id(ordinal: i32) -> Result<String, CudaFailure> {
    cuda()?;
    let mut buf = [0 as c_char; 64];
    // SAFETY: cuda() succeeded; the driver writes at most `len` bytes, NUL included.
    check("cuDeviceGetPCIBusId", unsafe { sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as i32, device(ordinal)?) })?;
    buf[buf.len() - 1] = 0;
    // SAFETY: NUL-terminated within the buffer (the last byte is 0).
    Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
}

/// The NUMA node of device `ordinal`, from `/sys/bus/pci/devices/<bus id>/numa_node`; `Unknown`
/// with the reason when the machine does not say (a virtual machine usually reports -1) or CUDA
/// cannot tell the bus id.
pub fn device_numa_node(ordinal: i32) -> NodeLookup {
    match device_pci_bus_id(ordinal) {
        Ok(bus_id) => numa::node_of_pci_device(Path::new("/sys"), &bus_id),
        Err(e) => NodeLookup::Unknown(format!("no PCI bus id for device {ordinal}: {e}")),
    }
}

/// The device of the context current on the calling thread; `None` without one.
///
/// Errors: `Unavailable`/`Forked`; a CUresult of `cuCtxGetDevice` other than "no context".
pub(crate) fn current_device() -> Result<Option<i32>, CudaFailure> {
    cuda()?;
    let mut device: sys::CUdevice = 0;
    // SAFETY: cuda() succeeded; valid out-pointer.
    match unsafe { sys::cuCtxGetDevice(&mut device) } {
        sys::CUresult::CUDA_SUCCESS => Ok(Some(device)),
        sys::CUresult::CUDA_ERROR_INVALID_CONTEXT => Ok(None),
        other => check("cuCtxGetDevice", other).map(|()| None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_driver_device_facts_are_errors_or_unknown() {
        if cuda().is_err() {
            assert!(device_count().is_err());
            assert!(device_uuid(0).is_err());
            assert!(device_pci_bus_id(0).is_err());
            assert!(current_device().is_err());
            assert!(matches!(device_numa_node(0), NodeLookup::Unknown(why) if why.contains("no PCI bus id")));
        }
    }
}

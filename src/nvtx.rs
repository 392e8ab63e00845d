//! NVTX ranges for profilers (Nsight Systems and any NVTX tool): one range per logical call
//! (domain `gdsroute`, a process range from the call to its result, named by direction, payload
//! the bytes asked for) and one per task (a thread range on the thread that runs it, named by
//! route and direction, payload its bytes), as KvikIO's `KVIKIO_NVTX_FUNC_RANGE`.
//!
//! No CUDA and no NVTX headers at build time: NVTX3 is a protocol, not a library. A tool that
//! wants the ranges names its injection library in `NVTX_INJECTION64_PATH` (nsys does); at the
//! first call the library loads it and calls its `InitializeInjectionNvtx2` with our export-table
//! getter, through which the tool writes its functions into our tables of function slots (one
//! table per NVTX module; the CORE2 module's slots are the domain calls used here). Without the
//! variable, or when the tool declines, every range is one atomic load and a branch. Written here
//! (about as long as the C shim over the NVTX3 headers would be) rather than with the `nvtx` crate,
//! whose build needs libclang.

use std::ffi::{CStr, c_char, c_void};
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};

/// An NVTX function slot: the tool writes its function here (any signature; cast at the call).
type Slot = Option<unsafe extern "C" fn()>;

/// Slots per NVTX module id (CORE 1, CUDA 2, OPENCL 3, CUDART 4, CORE2 5, SYNC 6): each module's
/// callback-id count. The tool may ask for every module; only CORE2's slots are called.
const MODULE_SLOTS: [usize; 7] = [0, 16, 9, 15, 7, 16, 7];
const CORE2: usize = 5;
const CORE2_RANGE_START_EX: usize = 2;
const CORE2_RANGE_END: usize = 3;
const CORE2_RANGE_PUSH_EX: usize = 4;
const CORE2_RANGE_POP: usize = 5;
const CORE2_DOMAIN_CREATE_A: usize = 12;

struct Tables {
    slots: [[Slot; 16]; 7],
    /// Per module, the addresses of its slots: the table `GetModuleFunctionTable` hands out.
    pointers: [[*mut Slot; 16]; 7],
}

/// Written only by the tool, during `init` (under `INIT`); read afterwards.
static mut TABLES: Tables = Tables { slots: [[None; 16]; 7], pointers: [[std::ptr::null_mut(); 16]; 7] };

static INIT: Once = Once::new();
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// The `gdsroute` domain the tool made (an opaque handle).
static mut DOMAIN: *mut c_void = std::ptr::null_mut();

#[repr(C)]
struct ExportTableCallbacks {
    struct_size: usize,
    get_module_function_table: unsafe extern "C" fn(module: i32, out_table: *mut *mut *mut Slot, out_size: *mut u32) -> i32,
}

#[repr(C)]
struct ExportTableVersionInfo {
    struct_size: usize,
    version: u32,
    reserved0: u32,
    set_injection_nvtx_version: unsafe extern "C" fn(u32),
}

static CALLBACKS: ExportTableCallbacks =
    ExportTableCallbacks { struct_size: std::mem::size_of::<ExportTableCallbacks>(), get_module_function_table };
static VERSION_INFO: ExportTableVersionInfo = ExportTableVersionInfo {
    struct_size: std::mem::size_of::<ExportTableVersionInfo>(),
    version: 3,
    reserved0: 0,
    set_injection_nvtx_version,
};

unsafe extern "C" fn set_injection_nvtx_version(_version: u32) {}

/// NVTX's `GetModuleFunctionTable`: the slots of `module`.
unsafe extern "C" fn get_module_function_table(module: i32, out_table: *mut *mut *mut Slot, out_size: *mut u32) -> i32 {
    let Some(&count) = usize::try_from(module).ok().and_then(|m| MODULE_SLOTS.get(m)).filter(|&&c| c > 0) else { return 0 };
    if out_table.is_null() || out_size.is_null() {
        return 0;
    }
    let module = module as usize;
    // SAFETY: called by the tool from inside `InitializeInjectionNvtx2`, under `INIT`; the
    // addresses stay valid for the process (a static).
    unsafe {
        let tables = &raw mut TABLES;
        for i in 0..count {
            (*tables).pointers[module][i] = &raw mut (*tables).slots[module][i];
        }
        *out_table = (&raw mut (*tables).pointers[module]).cast();
        *out_size = count as u32;
    }
    1
}

/// NVTX's export-table getter handed to the tool.
unsafe extern "C" fn get_export_table(id: u32) -> *const c_void {
    match id {
        1 => (&raw const CALLBACKS).cast(),
        3 => (&raw const VERSION_INFO).cast(),
        _ => std::ptr::null(),
    }
}

type InitializeInjection = unsafe extern "C" fn(unsafe extern "C" fn(u32) -> *const c_void) -> i32;
type DomainCreateA = unsafe extern "C" fn(*const c_char) -> *mut c_void;
type DomainRangeStartEx = unsafe extern "C" fn(*mut c_void, *const EventAttributes) -> u64;
type DomainRangeEnd = unsafe extern "C" fn(*mut c_void, u64);
type DomainRangePushEx = unsafe extern "C" fn(*mut c_void, *const EventAttributes) -> i32;
type DomainRangePop = unsafe extern "C" fn(*mut c_void) -> i32;

/// `nvtxEventAttributes_v2` (48 bytes): version 3, an ASCII message, a u64 payload.
#[repr(C)]
struct EventAttributes {
    version: u16,
    size: u16,
    category: u32,
    color_type: i32,
    color: u32,
    payload_type: i32,
    reserved0: i32,
    payload: u64,
    message_type: i32,
    message: *const c_char,
}

fn attributes(message: &'static CStr, bytes: u64) -> EventAttributes {
    EventAttributes {
        version: 3,
        size: std::mem::size_of::<EventAttributes>() as u16,
        category: 0,
        color_type: 0,
        color: 0,
        payload_type: 1, // NVTX_PAYLOAD_TYPE_UNSIGNED_INT64
        reserved0: 0,
        payload: bytes,
        message_type: 1, // NVTX_MESSAGE_TYPE_ASCII
        message: message.as_ptr(),
    }
}

/// The tool's CORE2 function in `slot`, as `F`.
///
/// # Safety
/// `F` is the function type of that slot in NVTX's CORE2 module; read after `INIT` completed.
unsafe fn core2<F: Copy>(slot: usize) -> Option<F> {
    // SAFETY: written only during init, which happened-before (Once); F is a function pointer.
    let f = unsafe { TABLES.slots[CORE2][slot] }?;
    Some(unsafe { std::mem::transmute_copy::<unsafe extern "C" fn(), F>(&f) })
}

fn init() {
    let Some(path) = std::env::var_os("NVTX_INJECTION64_PATH").filter(|p| !p.is_empty()) else { return };
    // SAFETY: loading the tool the user named for this purpose; it stays loaded (leaked).
    let Ok(library) = (unsafe { libloading::Library::new(&path) }) else {
        crate::log::log(crate::log::Level::Warn, || format!("NVTX_INJECTION64_PATH={path:?} could not be loaded: no NVTX ranges"));
        return;
    };
    let library: &'static libloading::Library = Box::leak(Box::new(library));
    // SAFETY: the NVTX3 entry point's type.
    let Ok(initialize) = (unsafe { library.get::<InitializeInjection>(b"InitializeInjectionNvtx2\0") }) else { return };
    // SAFETY: the protocol: the tool calls back into `get_export_table` before it returns.
    if unsafe { initialize(get_export_table) } == 0 {
        return;
    }
    // SAFETY: the slots' types (NVTX's CORE2 module), after the tool filled them.
    let create: Option<DomainCreateA> = unsafe { core2(CORE2_DOMAIN_CREATE_A) };
    let complete = unsafe {
        core2::<DomainRangeStartEx>(CORE2_RANGE_START_EX).is_some()
            && core2::<DomainRangeEnd>(CORE2_RANGE_END).is_some()
            && core2::<DomainRangePushEx>(CORE2_RANGE_PUSH_EX).is_some()
            && core2::<DomainRangePop>(CORE2_RANGE_POP).is_some()
    };
    if let (Some(create), true) = (create, complete) {
        // SAFETY: a NUL-terminated name; the handle is the tool's.
        unsafe { DOMAIN = create(c"gdsroute".as_ptr()) };
        ACTIVE.store(true, Ordering::Release);
        crate::log::log(crate::log::Level::Info, || format!("NVTX ranges on, through {path:?}"));
    }
}

/// Whether a tool takes the ranges (decided at the first call).
#[inline]
pub(crate) fn active() -> bool {
    INIT.call_once(init);
    ACTIVE.load(Ordering::Acquire)
}

fn domain() -> *mut c_void {
    // SAFETY: written once during init, before ACTIVE was set (Release/Acquire).
    unsafe { DOMAIN }
}

/// A process range (it may end on another thread): a logical call.
pub(crate) struct CallRange(u64);

impl CallRange {
    /// Starts a range named `message` with `bytes` as payload, when a tool takes them.
    pub(crate) fn start(message: &'static CStr, bytes: u64) -> Option<CallRange> {
        if !active() {
            return None;
        }
        let attributes = attributes(message, bytes);
        // SAFETY: active: the slot is filled; valid attributes for the call.
        let start: DomainRangeStartEx = unsafe { core2(CORE2_RANGE_START_EX) }?;
        Some(CallRange(unsafe { start(domain(), &attributes) }))
    }
}

impl Drop for CallRange {
    fn drop(&mut self) {
        // SAFETY: as in `start`.
        if let Some(end) = unsafe { core2::<DomainRangeEnd>(CORE2_RANGE_END) } {
            unsafe { end(domain(), self.0) };
        }
    }
}

/// A thread range (pushed and popped on one thread): a task.
pub(crate) struct TaskRange(());

impl TaskRange {
    /// Pushes a range named `message` with `bytes` as payload, when a tool takes them.
    pub(crate) fn push(message: &'static CStr, bytes: u64) -> Option<TaskRange> {
        if !active() {
            return None;
        }
        let attributes = attributes(message, bytes);
        // SAFETY: as for `CallRange::start`.
        let push: DomainRangePushEx = unsafe { core2(CORE2_RANGE_PUSH_EX) }?;
        unsafe { push(domain(), &attributes) };
        Some(TaskRange(()))
    }
}

impl Drop for TaskRange {
    fn drop(&mut self) {
        // SAFETY: as in `push`; popped on the thread that pushed (the value is not Send).
        if let Some(pop) = unsafe { core2::<DomainRangePop>(CORE2_RANGE_POP) } {
            unsafe { pop(domain()) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attributes_have_nvtx_s_layout() {
        assert_eq!(std::mem::size_of::<EventAttributes>(), 48);
        assert_eq!(std::mem::offset_of!(EventAttributes, payload), 24);
        assert_eq!(std::mem::offset_of!(EventAttributes, message), 40);
        assert_eq!(std::mem::size_of::<ExportTableVersionInfo>(), 24);
    }

    #[test]
    fn without_a_tool_no_range_is_made() {
        if std::env::var_os("NVTX_INJECTION64_PATH").is_none() {
            assert!(!active());
            assert!(CallRange::start(c"gdsroute read", 1).is_none());
            assert!(TaskRange::push(c"gdsroute task", 1).is_none());
        }
    }

    #[test]
    fn the_module_tables_hand_out_their_slots() {
        let mut table: *mut *mut Slot = std::ptr::null_mut();
        let mut size = 0u32;
        // SAFETY: valid out-pointers; the tables are static.
        assert_eq!(unsafe { get_module_function_table(5, &mut table, &mut size) }, 1);
        assert_eq!(size, 16);
        assert_eq!(unsafe { get_module_function_table(9, &mut table, &mut size) }, 0);
        assert_eq!(unsafe { get_module_function_table(0, &mut table, &mut size) }, 0);
        assert!(unsafe { get_export_table(2) }.is_null());
    }
}

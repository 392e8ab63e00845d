//! What relayed stream-ordered calls queue on the caller's stream, and the pinned host memory
//! they share with the host: the relay kernels (`relay/relay.cu`; the library loads the
//! PTX beside it), the queued copies and the waits and stores between them (`relay/queue.rs`:
//! `StreamOp`, `queue`), a control block per call (`Control`) and rings of slots the bytes pass
//! through (`Slots`). Bindings only; `io::relay` runs the protocol. One job, although over 450
//! lines: the memory the stream and the host share and its reuse, which the kernels and the
//! queued copies both use.
//!
//! Why everything is queued at the call (docs/routing.md, "Relayed stream-ordered calls"): on a
//! stream the legacy default stream waits for, a program's synchronous legacy-stream call holds a
//! lock of the CUDA driver until the stream has passed our call, and every copy the transfer
//! would queue later needs that lock. Copies queued at the call (where the size is known then),
//! or a kernel launched then, move the bytes between the caller's device buffer and the slots
//! while host threads only `pread`/`pwrite` the slots and store words: the transfer needs no
//! CUDA call once queued.
//!
//! Memory the stream may still touch is never freed: control blocks and slots go back to free
//! lists once every block of the kernel (or the queued copies) that used them has said it left
//! (`Control::all_left`), and are reused; the driver would make `cuMemFreeHost` wait for the
//! device anyway.

use super::context::{ContextHandle, ScopedContext, primary_context};
use super::device::current_device;
use super::driver::cuda;
use super::error::{CudaFailure, check};
use super::pinned::PinnedAllocation;
use super::stream::CallerStream;
use cudarc::driver::sys;
use std::collections::HashMap;
use std::ffi::c_void;
use once_cell::sync::OnceCell;
use std::sync::{Arc, Mutex};
use std::sync::atomic::{AtomicU32, Ordering};

mod queue;
pub(crate) use queue::{StreamOp, can_queue, control_for_queue, queue};

/// The kernels' PTX (`tools/gpu/relay-ptx.sh` makes it from `relay/relay.cu`).
const PTX: &str = include_str!("relay/relay.ptx");

/// Words of the control block (`relay/relay.cu` names them the same; the CPU tests of
/// `io::relay` play the kernel's part with them).
pub(crate) const W_STARTED: usize = 0;
pub(crate) const W_GO: usize = 1;
pub(crate) const W_STOP: usize = 2;
pub(crate) const W_ABORT: usize = 3;
pub(crate) const W_SLOTS: usize = 4;
pub(crate) const W_TOTAL: usize = 8;
pub(crate) const W_PROGRESS: usize = 16;
pub(crate) const W_EXITED: usize = 96;
pub(crate) const W_HEADERS: usize = 256;
const W_SLOT_BYTES: usize = 6;
const W_NSLOTS: usize = 7;
/// Bit of a slot's length word: the call's last chunk.
pub(crate) const LAST_CHUNK: u32 = 0x8000_0000;
/// Bytes between two slots beyond a chunk: slots stay page-aligned, and a chunk lies in its slot
/// at the caller's buffer's distance past a 16-byte boundary (`Slots::chunk_offset`), so that the
/// kernels copy 16 bytes at a time whatever the buffer's alignment.
const SLOT_PAD: usize = 4096;
/// The kernels' limits: blocks (progress and exit words) and slots (headers).
const MAX_BLOCKS: u32 = 64;
pub(crate) const MAX_SLOTS: u32 = 64;
/// Bytes of a control block: one page.
const CONTROL_BYTES: usize = 4096;
/// Blocks and threads of a moving kernel: 8 x 512 threads keep 256 KiB of 16-byte loads in
/// flight (4 per thread), more than the bus needs, on 8 of the GPU's SMs at most while the call
/// runs.
const MOVING_BLOCKS: u32 = 8;
const THREADS: u32 = 512;
const _: () = assert!(MOVING_BLOCKS <= MAX_BLOCKS);

/// How many streams may have relay kernels at their head at once: a started kernel's blocks must
/// all find room on the GPU beside those of the kernels waiting for a ring, so at most a quarter
/// of the room (512-thread blocks, four to an SM) goes to relay kernels. Asked of the current
/// context's device once.
pub(crate) fn streams_at_once() -> usize {
    static STREAMS: OnceCell<usize> = OnceCell::new();
    *STREAMS.get_or_init(|| {
        if cuda().is_err() {
            return 2;
        }
        let mut sms = 0;
        let mut device: sys::CUdevice = 0;
        // SAFETY: called with a context current (a relayed call's); valid out-pointers.
        let asked = unsafe { sys::cuCtxGetDevice(&mut device) } == sys::CUresult::CUDA_SUCCESS
            && unsafe { sys::cuDeviceGetAttribute(&mut sms, sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device) }
                == sys::CUresult::CUDA_SUCCESS;
        let sms = if asked { sms.max(0) as usize } else { 0 };
        (sms * 4 / MOVING_BLOCKS as usize / 4).max(2)
    })
}

/// Which kernel a call launches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RelayKernel {
    /// A read into device memory: slots to the buffer.
    In,
    /// A write from device memory: the buffer to slots.
    Out,
    /// Host memory: only the call's place on the stream.
    Gate,
}

impl RelayKernel {
    fn name(self) -> &'static std::ffi::CStr {
        match self {
            RelayKernel::In => c"gdsroute_relay_in",
            RelayKernel::Out => c"gdsroute_relay_out",
            RelayKernel::Gate => c"gdsroute_relay_gate",
        }
    }

    /// The blocks it is launched with.
    pub(crate) fn blocks(self) -> u32 {
        match self {
            RelayKernel::Gate => 1,
            _ => MOVING_BLOCKS,
        }
    }
}

/// The kernels of each context, by context address: loaded at the context's first relayed call.
static FUNCTIONS: Mutex<Option<HashMap<usize, [usize; 3]>>> = Mutex::new(None);

/// `kernel` of `context` (current on this thread), its module loaded now if it is not yet.
///
/// Errors: `Unavailable`/`Forked`; the CUresult of `cuModuleLoadData` (e.g. a driver too old for
/// the PTX: `CUDA_ERROR_UNSUPPORTED_PTX_VERSION`) or `cuModuleGetFunction`.
fn function(context: ContextHandle, kernel: RelayKernel) -> Result<sys::CUfunction, CudaFailure> {
    cuda()?;
    let mut functions = FUNCTIONS.lock().unwrap_or_else(|p| p.into_inner());
    let functions = functions.get_or_insert_with(HashMap::new);
    let index = kernel as usize;
    if let Some(found) = functions.get(&(context.as_raw() as usize)) {
        return Ok(found[index] as sys::CUfunction);
    }
    let text = std::ffi::CString::new(PTX).map_err(|_| CudaFailure::Unavailable("the relay kernels' PTX holds a NUL byte".into()))?;
    let mut module: sys::CUmodule = std::ptr::null_mut();
    // SAFETY: cuda() succeeded; the context is current (the caller's contract); NUL-terminated PTX.
    check("cuModuleLoadData", unsafe { sys::cuModuleLoadData(&mut module, text.as_ptr().cast()) })?;
    let mut loaded = [0usize; 3];
    for k in [RelayKernel::In, RelayKernel::Out, RelayKernel::Gate] {
        let mut f: sys::CUfunction = std::ptr::null_mut();
        // SAFETY: a module just loaded; a NUL-terminated name; valid out-pointer.
        check("cuModuleGetFunction", unsafe { sys::cuModuleGetFunction(&mut f, module, k.name().as_ptr()) })?;
        loaded[k as usize] = f as usize;
    }
    // The module stays loaded for the context's life (a kernel of it may be queued anywhere).
    functions.insert(context.as_raw() as usize, loaded);
    Ok(loaded[index] as sys::CUfunction)
}

/// Bytes of host memory pinned for relayed calls (rings and control blocks), which are kept for
/// reuse until the process exits: the counters' `relay_pinned_bytes`.
static PINNED_BYTES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// `PINNED_BYTES` now.
pub(crate) fn pinned_bytes() -> u64 {
    PINNED_BYTES.load(Ordering::Relaxed)
}

/// Pinned host memory mapped into every context (`cuMemHostAlloc(PORTABLE | DEVICEMAP)`),
/// allocated in the primary context of the current context's device, which the library retains
/// for the process's life; counted in `PINNED_BYTES`.
fn mapped_host_memory(bytes: usize) -> Result<(usize, u64), CudaFailure> {
    let device = current_device()?.ok_or(CudaFailure::NoContext("relay memory"))?;
    let _scope = ScopedContext::push(primary_context(device)?)?;
    let mut host: *mut c_void = std::ptr::null_mut();
    let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
    // SAFETY: cuda() succeeded (current_device asks it); a context is current; valid out-pointer.
    check("cuMemHostAlloc", unsafe { sys::cuMemHostAlloc(&mut host, bytes, flags) })?;
    let mut address: sys::CUdeviceptr = 0;
    // SAFETY: the allocation above, mapped (DEVICEMAP); valid out-pointer.
    check("cuMemHostGetDevicePointer", unsafe { sys::cuMemHostGetDevicePointer_v2(&mut address, host, 0) })?;
    PINNED_BYTES.fetch_add(bytes as u64, Ordering::Relaxed);
    Ok((host as usize, address))
}

/// What a retired call keeps alive until the stream has passed it (`retire`), beside its control
/// block and ring: the memory its queued copies read (registered page-cache windows).
pub(crate) type KeepAlive = Box<dyn Send + Sync>;

/// Free control blocks and slot rings, and those whose kernel may still run (`retired`).
#[derive(Default)]
struct Pools {
    controls: Vec<(usize, u64)>,
    rings: Vec<Slots>,
    retired: Vec<(Control, Option<Arc<Slots>>, Option<KeepAlive>)>,
}

impl Pools {
    /// A free ring of that shape, taken out of the free list.
    fn take_free(&mut self, slot_bytes: u32, nslots: u32, packed: bool) -> Option<Slots> {
        let at = self.rings.iter().position(|r| r.is(slot_bytes, nslots, packed))?;
        Some(self.rings.swap_remove(at))
    }

    /// A ring no call holds any more is free again; one still held by another stays with it.
    fn give_back(&mut self, ring: Arc<Slots>) {
        if let Ok(ring) = Arc::try_unwrap(ring) {
            self.rings.push(ring);
        }
    }
}

static POOLS: Mutex<Option<Pools>> = Mutex::new(None);

fn with_pools<R>(f: impl FnOnce(&mut Pools) -> R) -> R {
    // What retired calls kept alive is let go after the lock.
    let mut let_go = Vec::new();
    let result = {
        let mut pools = POOLS.lock().unwrap_or_else(|p| p.into_inner());
        let pools = pools.get_or_insert_with(Pools::default);
        // What the kernels have left is free again.
        let (done, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut pools.retired).into_iter().partition(|(c, _, _)| c.all_left());
        pools.retired = waiting;
        for (control, slots, keep) in done {
            pools.controls.push((control.host, control.device));
            if let Some(ring) = slots {
                pools.give_back(ring);
            }
            let_go.extend(keep);
        }
        f(pools)
    };
    drop(let_go);
    result
}

/// The control block of one relayed call: a page of pinned, mapped host memory whose words the
/// host and the kernel each write their own of (`relay/relay.cu` lists them).
#[derive(Clone, Debug)]
pub(crate) struct Control {
    host: usize,
    device: u64,
    blocks: u32,
}

impl Control {
    /// A control block over `page` (host memory the test keeps for the process's life), for the
    /// CPU tests, which play the kernel's part.
    #[cfg(test)]
    pub(crate) fn for_tests(page: &'static [AtomicU32; 1024], blocks: u32) -> Control {
        Control { host: page.as_ptr() as usize, device: page.as_ptr() as u64, blocks }
    }

    pub(crate) fn word(&self, w: usize) -> &AtomicU32 {
        // SAFETY: `host` is a page of pinned memory that is never freed; `w` < 1024; the host
        // reaches the words only through atomics.
        unsafe { AtomicU32::from_ptr((self.host as *mut u32).add(w)) }
    }

    /// True once the stream reached the call (the kernel started).
    pub(crate) fn started(&self) -> bool {
        self.word(W_STARTED).load(Ordering::Acquire) != 0
    }

    /// Lets the kernel move the bytes: through `slots`, `total` bytes (a write's; a read's
    /// chunks say their own lengths).
    pub(crate) fn go(&self, slots: &Slots, total: u64) {
        self.word(W_SLOTS).store(slots.device as u32, Ordering::Relaxed);
        self.word(W_SLOTS + 1).store((slots.device >> 32) as u32, Ordering::Relaxed);
        self.word(W_SLOT_BYTES).store(slots.slot_bytes, Ordering::Relaxed);
        self.word(W_NSLOTS).store(slots.nslots, Ordering::Relaxed);
        self.word(W_TOTAL).store(total as u32, Ordering::Relaxed);
        self.word(W_TOTAL + 1).store((total >> 32) as u32, Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::SeqCst);
        self.word(W_GO).store(1, Ordering::SeqCst);
    }

    /// Tells the kernel to leave and let the stream go on: the call is settled (or the process
    /// exits). Idempotent.
    pub(crate) fn stop(&self) {
        std::sync::atomic::fence(Ordering::SeqCst);
        self.word(W_STOP).store(1, Ordering::SeqCst);
    }

    /// Tells the kernel to move no more (a task failed); it still holds the stream until `stop`,
    /// so that the stream goes on only once the call is settled. Idempotent.
    pub(crate) fn abort(&self) {
        std::sync::atomic::fence(Ordering::SeqCst);
        self.word(W_ABORT).store(1, Ordering::SeqCst);
    }

    /// True once the kernel is to move no more (`abort` or `stop`).
    pub(crate) fn stopped(&self) -> bool {
        self.word(W_STOP).load(Ordering::Acquire) != 0 || self.word(W_ABORT).load(Ordering::Acquire) != 0
    }

    /// Chunks every block has moved.
    pub(crate) fn chunks_moved(&self) -> u32 {
        (0..self.blocks as usize).map(|b| self.word(W_PROGRESS + b).load(Ordering::Acquire)).min().unwrap_or(0)
    }

    /// Says for the stream that it has left, where the caller knows it has passed everything
    /// queued for the call (a queue that failed part-way, after `cuStreamSynchronize`).
    pub(crate) fn mark_left(&self) {
        for b in 0..self.blocks as usize {
            self.word(W_EXITED + b).store(1, Ordering::SeqCst);
        }
    }

    /// True once every block has left: it touches neither this block nor the slots any more.
    fn all_left(&self) -> bool {
        (0..self.blocks as usize).all(|b| self.word(W_EXITED + b).load(Ordering::Acquire) != 0)
    }

    /// Slot `slot` holds chunk `index` (a read): `len` bytes, `last` if it is the call's last.
    /// The slot's bytes written before are visible to the kernel before the header.
    pub(crate) fn publish_filled(&self, slot: u32, index: u64, len: u32, last: bool) {
        self.word(W_HEADERS + 2 * slot as usize + 1).store(len | if last { LAST_CHUNK } else { 0 }, Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::SeqCst);
        self.word(W_HEADERS + 2 * slot as usize).store(index as u32 + 1, Ordering::SeqCst);
    }

    /// Piece `index` of the copy engine's ring (`queue`) lies in its group of slots `group`: a
    /// read's is filled, a write's is in the file (its slots are free again). Never moves the word
    /// back (a release by `release_pieces` may have run first).
    pub(crate) fn publish_piece(&self, group: u32, index: u64) {
        std::sync::atomic::fence(Ordering::SeqCst);
        raise(self.word(W_HEADERS + 2 * group as usize), index as u32 + 1);
    }

    /// Lets every wait of the copy engine's queued copies pass (`queue`: `pieces` pieces in
    /// `groups` groups): the call failed, is settled or the process exits, and the stream must not
    /// wait for pieces that will not come. Copies still queued then move whatever the slots hold.
    pub(crate) fn release_pieces(&self, groups: u32, pieces: u64) {
        std::sync::atomic::fence(Ordering::SeqCst);
        for group in 0..groups as usize {
            raise(self.word(W_HEADERS + 2 * group), pieces as u32);
        }
    }

    /// Chunk `index` of slot `slot` is in the file (a write): the slot is free again.
    pub(crate) fn publish_written(&self, slot: u32, index: u64) {
        std::sync::atomic::fence(Ordering::SeqCst);
        self.word(W_HEADERS + 2 * slot as usize).store(index as u32 + 1, Ordering::SeqCst);
    }
}

/// Raises `word` to `value` if it is below, as a release. Not `fetch_max`: ThreadSanitizer does
/// not see that as a release (a data race between a task's slot and the played stream's copy was
/// reported with it, none with this loop, 2026-12-07).
fn raise(word: &AtomicU32, value: u32) {
    let mut now = word.load(Ordering::Acquire);
    while now < value {
        match word.compare_exchange_weak(now, value, Ordering::SeqCst, Ordering::Acquire) {
            Ok(_) => return,
            Err(seen) => now = seen,
        }
    }
}

/// Slots of pinned host memory, `nslots` of `slot_bytes` each, in one allocation: mapped for the
/// kernels' ring (`device` is its address on the GPU), not for the packed ring (`device` is 0).
#[derive(Debug)]
pub(crate) struct Slots {
    host: usize,
    device: u64,
    pub(crate) slot_bytes: u32,
    pub(crate) nslots: u32,
    /// Slots back to back, a chunk at the start of its slot: the copy engine's ring (`queue`),
    /// whose copies take any alignment and span several slots. Otherwise the kernels' ring
    /// (`SLOT_PAD`).
    packed: bool,
}

impl Slots {
    /// Slots over `memory` (kept for the process's life), for the CPU tests.
    #[cfg(test)]
    pub(crate) fn for_tests(memory: &'static mut [u8], slot_bytes: u32, nslots: u32, packed: bool) -> Slots {
        assert!(memory.len() >= Slots::bytes(slot_bytes, nslots, packed));
        Slots { host: memory.as_mut_ptr() as usize, device: memory.as_mut_ptr() as u64, slot_bytes, nslots, packed }
    }

    /// The host address of the first slot (a call's tasks name slots by offset from it).
    pub(crate) fn base(&self) -> *mut u8 {
        self.host as *mut u8
    }

    /// Where slot `slot`'s chunk lies, from `base`, for a caller's buffer at `buffer`.
    pub(crate) fn chunk_offset(&self, slot: u32, buffer: u64) -> usize {
        match self.packed {
            true => slot as usize * self.slot_bytes as usize,
            false => slot as usize * (self.slot_bytes as usize + SLOT_PAD) + (buffer & 15) as usize,
        }
    }

    /// Sets the ring's first `bytes` to zero (no call's copies may be reading them).
    pub(crate) fn zero_prefix(&self, bytes: usize) {
        let bytes = bytes.min(Slots::bytes(self.slot_bytes, self.nslots, self.packed));
        // SAFETY: the ring's own memory, never freed, of at least `bytes`; the caller ensures
        // nothing else uses it now.
        unsafe { std::ptr::write_bytes(self.host as *mut u8, 0, bytes) };
    }

    fn bytes(slot_bytes: u32, nslots: u32, packed: bool) -> usize {
        nslots as usize * (slot_bytes as usize + if packed { 0 } else { SLOT_PAD })
    }

    fn is(&self, slot_bytes: u32, nslots: u32, packed: bool) -> bool {
        (self.slot_bytes, self.nslots, self.packed) == (slot_bytes, nslots, packed)
    }
}

/// Makes sure a ring of `nslots` slots of `slot_bytes` is free for a call about to be queued
/// (allocated now, on the calling thread: once the stream waits, no CUDA call is made). Needs a
/// current context.
pub(crate) fn reserve_ring(slot_bytes: u32, nslots: u32) -> Result<(), CudaFailure> {
    if with_pools(|p| p.rings.iter().any(|r| r.is(slot_bytes, nslots, false))) {
        return Ok(());
    }
    let (host, device) = mapped_host_memory(Slots::bytes(slot_bytes, nslots, false))?;
    with_pools(|p| p.rings.push(Slots { host, device, slot_bytes, nslots, packed: false }));
    Ok(())
}

/// A free ring of that shape for the kernels, if there is one now (no CUDA call).
pub(crate) fn take_ring(slot_bytes: u32, nslots: u32) -> Option<Arc<Slots>> {
    with_pools(|p| p.take_free(slot_bytes, nslots, false)).map(Arc::new)
}

/// A ring of packed slots for the copy engine (`queue`): a free one, or one allocated now.
/// Needs a current context.
pub(crate) fn take_packed_ring(slot_bytes: u32, nslots: u32) -> Result<Arc<Slots>, CudaFailure> {
    let ring = match with_pools(|p| p.take_free(slot_bytes, nslots, true)) {
        Some(ring) => ring,
        None => {
            // Pinned as the bounce buffers are (huge pages, registered), not mapped: only copies
            // touch it on the GPU's side, and host threads `pread` into it and `pwrite` from it.
            // Never released: rings live as long as the process.
            let (memory, _refused) = PinnedAllocation::allocate(Slots::bytes(slot_bytes, nslots, true), None)?;
            PINNED_BYTES.fetch_add(memory.pinned_bytes(), Ordering::Relaxed);
            Slots { host: memory.as_ptr() as usize, device: 0, slot_bytes, nslots, packed: true }
        }
    };
    Ok(Arc::new(ring))
}

/// Hands a share of a ring back: free again once no call holds it (a call that may still use it
/// holds it through `retire`).
pub(crate) fn give_back_ring(ring: Arc<Slots>) {
    with_pools(|p| p.give_back(ring));
}

/// Hands a call's control block and its share of a ring back: reused once what the stream runs
/// for it (its kernel, or its queued copies) has left; `keep` is let go then, on whichever thread
/// finds it so (its drop must make no CUDA call that could wait for a stream).
pub(crate) fn retire(control: Control, slots: Option<Arc<Slots>>, keep: Option<KeepAlive>) {
    with_pools(|p| p.retired.push((control, slots, keep)));
}

/// Launches `kernel` on `stream` (of `context`, current on this thread) for `buffer` (the
/// caller's device address; 0 for the gate), with a control block of its own, zeroed.
///
/// Errors: `Unavailable`/`Forked`; the kernels could not be loaded; the CUresult of
/// `cuMemHostAlloc` (a new page of control blocks) or `cuLaunchKernel`.
pub(crate) fn launch(kernel: RelayKernel, stream: CallerStream, context: ContextHandle, buffer: u64) -> Result<Control, CudaFailure> {
    let function = function(context, kernel)?;
    let control = take_control(kernel.blocks())?;
    let (mut control_arg, mut buffer_arg) = (control.device, buffer);
    let mut args = [(&mut control_arg as *mut u64).cast::<c_void>(), (&mut buffer_arg as *mut u64).cast::<c_void>()];
    let threads = if kernel == RelayKernel::Gate { 32 } else { THREADS };
    // SAFETY: a function of the current context; two 8-byte arguments as the kernels declare;
    // the control block lives as long as the process.
    let launched = unsafe {
        sys::cuLaunchKernel(function, kernel.blocks(), 1, 1, threads, 1, 1, 0, stream.as_raw(), args.as_mut_ptr(), std::ptr::null_mut())
    };
    if let Err(e) = check("cuLaunchKernel", launched) {
        with_pools(|p| p.controls.push((control.host, control.device)));
        return Err(e);
    }
    Ok(control)
}

/// A control block of its own, zeroed, for a call whose stream work has `blocks` progress words.
/// Errors: the CUresult of `cuMemHostAlloc` (a new page of control blocks).
fn take_control(blocks: u32) -> Result<Control, CudaFailure> {
    let (host, device) = match with_pools(|p| p.controls.pop()) {
        Some(free) => free,
        None => {
            const PER_ALLOCATION: usize = 64;
            let (host, device) = mapped_host_memory(CONTROL_BYTES * PER_ALLOCATION)?;
            let more = (1..PER_ALLOCATION).map(|i| (host + i * CONTROL_BYTES, device + (i * CONTROL_BYTES) as u64));
            with_pools(|p| p.controls.extend(more));
            (host, device)
        }
    };
    let control = Control { host, device, blocks };
    for w in 0..CONTROL_BYTES / 4 {
        control.word(w).store(0, Ordering::Relaxed);
    }
    std::sync::atomic::fence(Ordering::SeqCst);
    Ok(control)
}

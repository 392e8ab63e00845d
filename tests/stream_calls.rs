//! Stream-ordered calls and stream registration without a GPU (the CI machine has none): bad
//! arguments and a missing CUDA driver give a status, never a crash, and the calls and
//! registrations are counted. The ordering itself is tested with fake streams in
//! src/api/stream_order_tests.rs and on the GPU in tests/gpu_stream.rs.

mod common;

use gdsroute::settings::{self, CompatMode};
use gdsroute::{Error, Status, counters};

#[test]
fn without_cuda_stream_calls_fail_with_a_status_and_registration_is_a_counted_no_op() {
    if common::cuda_works() {
        eprintln!("CUDA works here: the GPU suite (tests/gpu_stream.rs) covers this machine");
        return;
    }
    let data = common::random_bytes(10_000, 31);
    let tmp = common::temp_file_in(None, &data);
    let file = common::open(tmp.path(), Some(CompatMode::Auto));
    let mut buf = vec![0u8; 100];
    for stream in [0usize, 1, 2, 0x1234] {
        let err = unsafe { file.read_async_raw(buf.as_mut_ptr(), 100, 0, stream) }.err().unwrap();
        assert!(matches!(err, Error::CudaUnavailable(_)), "stream {stream:#x}: {err}");
    }
    let c = file.stats();
    assert_eq!((c.calls, c.calls_failed, c.stream_calls_ordered), (4, 4, 0));

    let before = counters::process_counters();
    assert_eq!(gdsroute::stream::register_stream(0x1234, 0x10).unwrap_err().status(), Status::InvalidArgument);
    assert!(!gdsroute::stream::register_stream(0x1234, 0xF).unwrap());
    gdsroute::stream::deregister_stream(0x1234).unwrap();
    settings::set_cufile_async_native(true);
    assert!(settings::cufile_async_native().unwrap());
    let err = gdsroute::stream::register_stream(0x1234, 0).unwrap_err();
    assert_eq!(err.status(), Status::CudaUnavailable, "{err}");
    // The default streams are never registered, and their context is not asked for.
    for default in [0usize, 1, 2] {
        assert!(!gdsroute::stream::register_stream(default, 0).unwrap(), "stream {default}");
    }
    settings::set_cufile_async_native(false);
    let after = counters::process_counters();
    assert_eq!(after.stream_registrations_skipped - before.stream_registrations_skipped, 4);
    assert_eq!(after.stream_registrations_cufile, before.stream_registrations_cufile);
}

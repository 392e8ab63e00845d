//! The CUDA layer on a machine without a GPU or libcuda: everything answers, nothing panics.

use crate::sys::cuda;

#[test]
fn public_api_is_callable_without_a_gpu() {
    let line = cuda::describe();
    println!("CUDA: {line}");
    if cuda::cuda().is_err() {
        assert!(line.starts_with("unavailable: "), "{line}");
        let x = 5u32;
        assert_eq!(
            cuda::classify((&x as *const u32).cast()).unwrap(),
            cuda::MemoryKind::Host
        );
        assert!(cuda::allocation_range((&x as *const u32).cast()).is_err());
        assert!(cuda::primary_context(0).is_err());
        assert!(cuda::current_context().is_err());
        assert!(cuda::thread_stream().is_err());
        assert!(crate::backend::device::PinnedPool::new(4096, 1).acquire().is_err());
    }
}

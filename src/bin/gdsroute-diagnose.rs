//! `gdsroute-diagnose [FILE]`: prints how gdsroute would route reads on this machine (and for
//! FILE): cuFile library and version, CUDA, GDS availability, udev, compat mode, the file's
//! verdict and its reason.

fn main() {
    let path = std::env::args_os().nth(1).map(|p| p.into_encoded_bytes());
    print!("{}", gdsroute::diagnose::report(path.as_deref()));
}

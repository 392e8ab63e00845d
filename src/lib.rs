//! gdsroute: KvikIO-equivalent reads of files into host or GPU memory, with counters that show
//! which route every read took. The safe core lives in the modules below; `ffi` is the only place
//! with `extern "C"`.

pub mod cufile;

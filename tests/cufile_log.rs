//! The library's load-time step: a single-threaded process that configured no cuFile log gets
//! CUFILE_LOGFILE_PATH=/dev/null before main, so cuFile leaves no cufile.log in the working
//! directory. (The test harness starts threads only after the constructor ran.)

#[test]
fn cufile_log_goes_nowhere_unless_configured() {
    // Make sure the library is linked in (its constructor runs at load).
    let _ = gdsroute::testing::cufile::DEFAULT_CUFILE_LOG;
    let configured_by_user = std::env::var_os("GDSROUTE_TEST_USER_CUFILE_LOG").is_some();
    let value = std::env::var("CUFILE_LOGFILE_PATH").ok();
    if configured_by_user {
        assert_ne!(value.as_deref(), Some("/dev/null"));
    } else if gdsroute::testing::cufile::log_configuration() != Some("cufile.json sets logging.dir") {
        assert_eq!(value.as_deref(), Some("/dev/null"));
    }
    // Later calls in a threaded process change nothing.
    std::thread::spawn(|| {}).join().unwrap();
    let before = std::env::var_os("CUFILE_LOGFILE_PATH");
    unsafe { std::env::remove_var("CUFILE_LOGFILE_PATH") };
    let other = std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_millis(200)));
    assert!(!gdsroute::testing::cufile::quiet_cufile_log(), "must not setenv with other threads running");
    other.join().unwrap();
    if let Some(v) = before {
        unsafe { std::env::set_var("CUFILE_LOGFILE_PATH", v) };
    }
}

//! `gdsroute_stats_render` through the C ABI: a caller's struct shorter than the current layout
//! (built against an older header) renders only the fields it holds, in both formats; the full
//! struct's text leads with the summary and leaves zeros out, its JSON keeps every field.

mod common;

use common::capi::{gdsroute_stats_get, gdsroute_stats_render};
use gdsroute::{Counters, Status};

fn render(stats: *const Counters, format: u32) -> String {
    let mut len = 0usize;
    // SAFETY: sizing call; `stats` points to a struct with struct_size set.
    assert_eq!(unsafe { gdsroute_stats_render(stats, format, std::ptr::null_mut(), 0, &mut len) }, Status::Ok);
    let mut buf = vec![0u8; len + 1];
    // SAFETY: buf has len + 1 bytes.
    assert_eq!(unsafe { gdsroute_stats_render(stats, format, buf.as_mut_ptr().cast(), buf.len(), &mut len) }, Status::Ok);
    buf.truncate(len);
    String::from_utf8(buf).unwrap()
}

#[test]
fn a_short_struct_renders_only_its_own_fields() {
    // An "old" caller's struct: struct_size, calls, calls_failed (24 bytes).
    let mut old = [24u64, 5, 1];
    // SAFETY: the library reads at most struct_size (24) bytes.
    let json = render(old.as_mut_ptr().cast::<Counters>(), 1);
    assert_eq!(json, r#"{"struct_size":24,"calls":5,"calls_failed":1}"#);
    let text = render(old.as_ptr().cast::<Counters>(), 0);
    assert_eq!(text, "calls                        5\ncalls_failed                 1\n");
}

/// A `struct_size` between two fields gets the whole fields below it, none of the next, and is
/// told so.
#[test]
fn a_struct_size_between_two_fields_gets_whole_fields_only() {
    let mut odd = [12u64, 0xA5A5_A5A5_A5A5_A5A5, 0xA5A5_A5A5_A5A5_A5A5];
    // SAFETY: the library writes at most struct_size (12) bytes.
    assert_eq!(unsafe { gdsroute_stats_get(odd.as_mut_ptr().cast::<Counters>()) }, Status::Ok);
    assert_eq!(odd, [8, 0xA5A5_A5A5_A5A5_A5A5, 0xA5A5_A5A5_A5A5_A5A5]);
}

#[test]
fn the_full_struct_leads_with_the_summary() {
    let mut stats = Counters { struct_size: Counters::SIZE, ..Counters::default() };
    // SAFETY: a full struct with struct_size set.
    assert_eq!(unsafe { gdsroute_stats_get(&mut stats) }, Status::Ok);
    let text = render(&stats, 0);
    assert_eq!(text.lines().next(), Some(stats.summary().as_str()), "{text}");
    assert!(!text.lines().skip(1).any(|l| l.ends_with(" 0")), "{text}");
    let json = render(&stats, 1);
    assert_eq!(json.matches(':').count(), Counters::default().entries().len(), "{json}");
}

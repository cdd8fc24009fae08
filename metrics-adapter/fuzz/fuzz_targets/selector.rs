//! Fuzzes the label selector parser: it never panics, and what it accepts prints back to
//! a string that parses to the same selector.
#![no_main]

use gpu_metrics_adapter::selector::Selector;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(sel) = Selector::parse(text) {
        let again = Selector::parse(&sel.to_string()).expect("printed selector parses");
        assert_eq!(sel, again);
        let _ = sel.to_label_selector();
    }
});

//! How the binary's allocator returns memory it no longer uses, when it is
//! mimalloc (the `mimalloc` feature; the default build uses the system
//! allocator, and [`tune`] does nothing there).
//!
//! mimalloc keeps freed pages committed for `purge_delay` before it gives
//! them back to the system: 1,000 ms by default in the version linked here
//! (3.x). A streaming job frees every event a moment after decoding it, so
//! with that delay the process keeps about a second of its allocation churn
//! resident: on a stream of small transactions (the `e2e_stream` bench's
//! realistic W2 row: bigint, int, 100 characters of text, timestamptz,
//! numeric) 21–24 MB of resident memory, against 14–15 MB with the 10 ms set
//! here. The price is a purge system call per freed page run: on 1 KB rows
//! changed 1,000,000 times about 10–15% more client CPU, and no measured
//! difference on the small-transaction and one-large-transaction workloads
//! (see benches/RESULTS.md).
//!
//! `MIMALLOC_PURGE_DELAY` in the environment wins over this setting.
#![allow(unsafe_code)]

/// mimalloc's option number of `purge_delay` (`mi_option_purge_delay` in
/// its `mimalloc.h`, 2.x and 3.x alike; the Rust binding does not name it).
/// A test reads the option back by its name to prove the number.
#[cfg(feature = "mimalloc")]
const PURGE_DELAY_OPTION: libmimalloc_sys::mi_option_t = 15;

/// The purge delay the binary runs with, in milliseconds.
pub const PURGE_DELAY_MS: u32 = 10;

/// Sets mimalloc's purge delay to [`PURGE_DELAY_MS`] unless
/// `MIMALLOC_PURGE_DELAY` is set. Call it first thing in `main`. Without the
/// `mimalloc` feature it does nothing.
pub fn tune() {
    #[cfg(feature = "mimalloc")]
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: mi_option_set takes any option number and value; it
        // stores the value in mimalloc's option table, which is safe to do
        // from any thread at any time.
        unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY_OPTION, PURGE_DELAY_MS.into()) };
    }
}

#[cfg(all(test, feature = "mimalloc"))]
mod tests {
    use std::ffi::{c_char, c_void, CStr};

    extern "C" {
        /// Prints every option as `option '<name>': <value>` (mimalloc 3.x).
        fn mi_options_print_out(out: libmimalloc_sys::mi_output_fun, arg: *mut c_void);
    }

    unsafe extern "C" fn collect(msg: *const c_char, arg: *mut c_void) {
        // SAFETY: `arg` is the `String` passed below, `msg` a C string.
        let out = unsafe { &mut *arg.cast::<String>() };
        out.push_str(&unsafe { CStr::from_ptr(msg) }.to_string_lossy());
    }

    #[test]
    fn the_option_number_is_purge_delay() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return;
        }
        super::tune();
        let mut out = String::new();
        // SAFETY: `collect` writes to `out`, which outlives the call.
        unsafe { mi_options_print_out(Some(collect), (&raw mut out).cast()) };
        let line = out
            .lines()
            .find(|l| l.contains("option 'purge_delay'"))
            .unwrap_or_else(|| panic!("no purge_delay option in:\n{out}"));
        assert!(
            line.contains(&format!(": {} ", super::PURGE_DELAY_MS))
                || line
                    .trim_end()
                    .ends_with(&format!(": {}", super::PURGE_DELAY_MS)),
            "{line}"
        );
    }
}

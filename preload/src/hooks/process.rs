//! Process-lifetime hooks: `_exit`/`_Exit` skip `atexit` and `on_exit` handlers, so they are
//! interposed to record the exit status before the process disappears.

use libc::c_int;

use crate::{lifecycle, real};

/// Interposed `_exit` (what `os._exit` calls).
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn _exit(code: c_int) -> ! {
    lifecycle::record_exit(code, true);
    real::exit_group(code)
}

/// Interposed `_Exit` (C99 alias of `_exit`).
#[allow(non_snake_case)] // the C name
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn _Exit(code: c_int) -> ! {
    lifecycle::record_exit(code, true);
    real::exit_group(code)
}

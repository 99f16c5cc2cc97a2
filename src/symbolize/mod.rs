//! Turning raw addresses from the profiled process into names: CPython code objects to file,
//! function and line (`linetable`), native instruction pointers to library and symbol.

pub mod linetable;

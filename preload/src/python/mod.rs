//! Reading the CPython interpreter from inside its own process: version layouts (3.9-3.13)
//! chosen once at load time, the frame walker, and the code-object table.

pub mod codes;
#[allow(dead_code)] // the full table and its helpers are also read by tests and tools
pub mod layouts;
mod read;
pub mod runtime;
pub mod walk;

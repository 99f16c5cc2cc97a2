//! Reading the CPython interpreter from inside its own process: the runtime found at load
//! time, direct memory reads, and the code-object table. Layouts and the walker are shared
//! with the collector (`mlprof-pyframes`).

pub mod codes;
pub mod jit;
pub mod read;
pub mod runtime;
pub mod stack;
pub mod tensors;

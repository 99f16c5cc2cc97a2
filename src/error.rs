//! mlprof's own errors: one line for the user and a documented exit code.

use std::fmt;

/// Exit code when the command cannot be found (as a shell does).
pub const EXIT_NOT_FOUND: i32 = 127;
/// Exit code when the command exists but cannot be executed (as a shell does).
pub const EXIT_NOT_EXECUTABLE: i32 = 126;
/// Exit code for mlprof's own failures (bad input, unreadable profile, I/O).
pub const EXIT_ERROR: i32 = 70;
/// Exit code for a command-line usage error.
pub const EXIT_USAGE: i32 = 2;

/// An error mlprof reports as `mlprof: <message>`.
#[derive(Debug)]
pub struct Error {
    message: String,
    code: i32,
}

impl Error {
    /// An error with the generic exit code.
    pub fn new(message: impl Into<String>) -> Error {
        Error {
            message: message.into(),
            code: EXIT_ERROR,
        }
    }

    /// An error with a specific exit code.
    pub fn with_code(message: impl Into<String>, code: i32) -> Error {
        Error {
            message: message.into(),
            code,
        }
    }

    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        self.code
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// Shorthand for results with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

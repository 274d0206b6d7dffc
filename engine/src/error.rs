//! The error that ends a runner, with its class: what the exit code and the log come from.

use std::fmt;

/// Exit status: everything drained and stored.
pub const EXIT_OK: i32 = 0;
/// Exit status: a sink or the source failed for good.
pub const EXIT_FAILED: i32 = 1;
/// Exit status: the configuration cannot work (a config that does not load, or a peer that
/// refuses what it asks for, such as an Iggy server that does not accept this protocol).
pub const EXIT_CONFIG: i32 = 2;
/// Exit status: stopped by a second signal without waiting for the sinks.
pub const EXIT_FORCED: i32 = 130;

/// What kind of failure it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// It may go away by itself (a lost connection, a server busy for now): the runner
    /// reconnects or retries; a run that still ends with one exits 1.
    Transient,
    /// Retrying cannot help (a refused login, a rejected message under `on_error = "fail"`,
    /// a store that refuses our credentials): exit 1.
    Permanent,
    /// The configuration cannot work with the peer it names (an Iggy server that speaks
    /// another protocol version, a bad key in the file): exit 2.
    Config,
}

impl ErrorClass {
    /// The process exit status for a run that ended with this.
    pub fn exit_code(self) -> i32 {
        match self {
            ErrorClass::Transient | ErrorClass::Permanent => EXIT_FAILED,
            ErrorClass::Config => EXIT_CONFIG,
        }
    }
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorClass::Transient => "transient",
            ErrorClass::Permanent => "permanent",
            ErrorClass::Config => "configuration",
        })
    }
}

/// The engine's one error: why a runner ended, why a sink stopped or a source request failed,
/// with the class the exit status comes from and a message that names the cause (the config
/// key, the broker's reason code, the S3 error code). Sinks return it too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineError {
    /// What kind.
    pub class: ErrorClass,
    /// What happened.
    pub message: String,
}

impl EngineError {
    /// An error of `class`.
    pub fn new(class: ErrorClass, message: impl Into<String>) -> EngineError {
        EngineError {
            class,
            message: message.into(),
        }
    }

    /// A failure that retrying cannot mend.
    pub fn permanent(message: impl Into<String>) -> EngineError {
        EngineError::new(ErrorClass::Permanent, message)
    }

    /// A failure that may go away.
    pub fn transient(message: impl Into<String>) -> EngineError {
        EngineError::new(ErrorClass::Transient, message)
    }

    /// Whether it may go away by itself, so that trying again can help.
    pub fn is_transient(&self) -> bool {
        self.class == ErrorClass::Transient
    }

    /// A configuration that cannot work.
    pub fn config(message: impl Into<String>) -> EngineError {
        EngineError::new(ErrorClass::Config, message)
    }
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for EngineError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exit_status_comes_from_the_class() {
        assert_eq!(EngineError::config("x").class.exit_code(), 2);
        assert_eq!(EngineError::permanent("x").class.exit_code(), 1);
        assert_eq!(EngineError::transient("x").class.exit_code(), 1);
        assert_eq!(EngineError::config("bad key").to_string(), "bad key");
    }
}

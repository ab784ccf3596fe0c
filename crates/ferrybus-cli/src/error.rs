//! [`CliError`]: the one error type of the tool, with a [`CliErrorKind`] that decides the exit
//! status (2 for misuse, 1 for everything else).

use ferrybus_core::address::redact;
use std::fmt;

/// What kind of failure a [`CliError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CliErrorKind {
    /// The command line asks for something impossible (exit status 2).
    Usage,
    /// Reading the input failed, or the input is not usable.
    Input,
    /// RabbitMQ refused or could not be reached.
    Broker,
    /// PostgreSQL refused or could not be reached.
    Database,
    /// The thing checked is not as it should be (schema check, topology differences, a replay
    /// with failures); the report was printed already.
    Check,
    /// The output could not be written.
    Output,
    /// Standard output was closed by its reader (`| head`): stop quietly.
    OutputClosed,
}

/// Why a command failed. `Display` is the reason printed after `error: `, with every URL's
/// password replaced by `***`.
#[derive(Debug)]
pub(crate) struct CliError {
    kind: CliErrorKind,
    message: String,
}

impl CliError {
    /// An error of `kind` explained by `message`.
    pub(crate) fn new(kind: CliErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// A misuse of the command line.
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self::new(CliErrorKind::Usage, message)
    }

    /// A broker failure while doing `what`.
    pub(crate) fn broker(what: impl fmt::Display, error: impl fmt::Display) -> Self {
        Self::new(CliErrorKind::Broker, format!("{what}: {error}"))
    }

    /// A database failure while doing `what`.
    pub(crate) fn database(what: impl fmt::Display, error: impl fmt::Display) -> Self {
        Self::new(CliErrorKind::Database, format!("{what}: {error}"))
    }

    /// A failed check whose details were printed already.
    pub(crate) fn check(message: impl Into<String>) -> Self {
        Self::new(CliErrorKind::Check, message)
    }

    /// The output could not be written.
    pub(crate) fn output(error: impl fmt::Display) -> Self {
        Self::new(
            CliErrorKind::Output,
            format!("cannot write output: {error}"),
        )
    }

    /// The exit status for this error: 2 for misuse, 0 when the reader of standard output went
    /// away, 1 otherwise.
    pub(crate) fn exit_code(&self) -> u8 {
        match self.kind {
            CliErrorKind::Usage => 2,
            CliErrorKind::OutputClosed => 0,
            _ => 1,
        }
    }

    /// Whether to print the error (not when nobody reads the output any more).
    pub(crate) fn is_reported(&self) -> bool {
        self.kind != CliErrorKind::OutputClosed
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let one_line = self
            .message
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        f.write_str(&redact(&one_line))
    }
}

impl std::error::Error for CliError {}

impl From<ferrybus_core::envelope::EnvelopeError> for CliError {
    fn from(error: ferrybus_core::envelope::EnvelopeError) -> Self {
        Self::new(CliErrorKind::Input, error.to_string())
    }
}

impl From<std::io::Error> for CliError {
    fn from(error: std::io::Error) -> Self {
        if error.kind() == std::io::ErrorKind::BrokenPipe {
            return Self::new(CliErrorKind::OutputClosed, "standard output closed");
        }
        Self::output(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_one_redacted_line() {
        let error = CliError::broker(
            "connecting to amqp://ops:hunter2@broker:5672/%2f",
            "ACCESS_REFUSED\n - login refused",
        );
        assert_eq!(
            error.to_string(),
            "connecting to amqp://ops:***@broker:5672/%2f: ACCESS_REFUSED - login refused"
        );
        assert_eq!(error.exit_code(), 1);
        assert_eq!(CliError::usage("x").exit_code(), 2);
        assert_eq!(CliError::usage("x").kind, CliErrorKind::Usage);
    }
}

//! One error type for the whole runtime.
//!
//! Every [`ErrorCode`] maps one-to-one onto liboffload's `ol_errc_t`
//! (`OffloadAPI.h`, LLVM 22), so the C faces convert without a table.

use std::fmt;

/// Error codes, numbered exactly as LLVM 22's `ol_errc_t`. LLVM adds codes
/// over time: matches need a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(u32)]
pub enum ErrorCode {
    Success = 0,
    Unknown = 1,
    HostIo = 2,
    InvalidBinary = 3,
    InvalidNullPointer = 4,
    InvalidArgument = 5,
    NotFound = 6,
    OutOfResources = 7,
    InvalidSize = 8,
    InvalidEnumeration = 9,
    HostToolNotFound = 10,
    InvalidValue = 11,
    Unimplemented = 12,
    Unsupported = 13,
    AssembleFailure = 14,
    CompileFailure = 15,
    LinkFailure = 16,
    BackendFailure = 17,
    Uninitialized = 18,
    InvalidNullHandle = 19,
    InvalidPlatform = 20,
    InvalidDevice = 21,
    InvalidQueue = 22,
    InvalidEvent = 23,
    SymbolKind = 24,
}

impl ErrorCode {
    /// Every code, in `ol_errc_t` order (`ALL[n]` has value `n`).
    pub const ALL: [ErrorCode; 25] = {
        use ErrorCode::*;
        [
            Success,
            Unknown,
            HostIo,
            InvalidBinary,
            InvalidNullPointer,
            InvalidArgument,
            NotFound,
            OutOfResources,
            InvalidSize,
            InvalidEnumeration,
            HostToolNotFound,
            InvalidValue,
            Unimplemented,
            Unsupported,
            AssembleFailure,
            CompileFailure,
            LinkFailure,
            BackendFailure,
            Uninitialized,
            InvalidNullHandle,
            InvalidPlatform,
            InvalidDevice,
            InvalidQueue,
            InvalidEvent,
            SymbolKind,
        ]
    };

    /// The `ol_errc_t` value.
    pub fn as_raw(self) -> u32 {
        self as u32
    }

    /// The code of an `ol_errc_t` value (from the wire, say); None when
    /// LLVM 22 has no such code.
    pub fn from_raw(value: u32) -> Option<ErrorCode> {
        Self::ALL.get(value as usize).copied()
    }

    /// Short lower-case description, as LLVM prints error codes ("invalid value").
    pub fn description(self) -> &'static str {
        use ErrorCode::*;
        match self {
            Success => "success",
            Unknown => "unknown or internal error",
            HostIo => "I/O error on host",
            InvalidBinary => "a provided binary image is malformed",
            InvalidNullPointer => "a pointer argument is null when it should not be",
            InvalidArgument => "an argument is invalid",
            NotFound => "requested object was not found in the binary image",
            OutOfResources => "out of resources",
            InvalidSize => "invalid size",
            InvalidEnumeration => "enumerator argument is not valid",
            HostToolNotFound => "a required binary (linker, etc.) was not found on the host",
            InvalidValue => "invalid value",
            Unimplemented => "generic error code for features currently unimplemented",
            Unsupported => "generic error code for features unsupported by the device/backend",
            AssembleFailure => "assembler failure while processing binary image",
            CompileFailure => "compiler failure while processing binary image",
            LinkFailure => "linker failure while processing binary image",
            BackendFailure => "the plugin backend is in an invalid or unsupported state",
            Uninitialized => "not initialized",
            InvalidNullHandle => "a handle argument is null when it should not be",
            InvalidPlatform => "invalid platform",
            InvalidDevice => "invalid device",
            InvalidQueue => "invalid queue",
            InvalidEvent => "invalid event",
            SymbolKind => "the operation does not support this symbol kind",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.description())
    }
}

/// A runtime error: a code and a message naming the handle, image or address at fault.
///
/// Boxed, so that `Result<(), Error>` is one pointer wide and the success
/// path of every call returns in a register.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.message)]
pub struct Error(Box<Inner>);

/// `{:?}` is what a `main` returning `Result<_, Error>` prints: the message
/// and the code, without the box and field names (`{:#?}` shows those).
impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if f.alternate() {
            f.debug_struct("Error")
                .field("code", &self.0.code)
                .field("message", &self.0.message)
                .finish()
        } else {
            write!(f, "{} ({:?})", self.0.message, self.0.code)
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Inner {
    code: ErrorCode,
    message: String,
    /// The device's process died of this signal (a remote session's worker).
    signal: Option<i32>,
}

impl Error {
    #[cold]
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Error(Box::new(Inner {
            code,
            message: message.into(),
            signal: None,
        }))
    }
    pub fn code(&self) -> ErrorCode {
        self.0.code
    }
    /// Mark the error as the death of the device's process by signal `sig`
    /// (a remote session's worker killed by SIGSEGV, SIGILL, ...): the
    /// device code would have killed a local process the same way.
    pub fn with_signal(mut self, sig: i32) -> Self {
        self.0.signal = Some(sig);
        self
    }
    /// The signal the device's process died of, when that is what failed.
    pub fn signal(&self) -> Option<i32> {
        self.0.signal
    }
    pub fn message(&self) -> &str {
        &self.0.message
    }
    /// Prefix the message with context, keeping the code.
    pub fn context(mut self, what: impl fmt::Display) -> Self {
        self.0.message = format!("{what}: {}", self.0.message);
        self
    }

    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidArgument, message)
    }
    pub fn invalid_value(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidValue, message)
    }
    pub fn invalid_binary(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidBinary, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }
    pub fn out_of_resources(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::OutOfResources, message)
    }
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unsupported, message)
    }
    pub fn backend(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BackendFailure, message)
    }
    pub fn host_io(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::HostIo, message)
    }
}

impl From<offload_image::ImageError> for Error {
    fn from(e: offload_image::ImageError) -> Self {
        Error::invalid_binary(e.to_string())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_ol_errc_t() {
        assert_eq!(ErrorCode::InvalidBinary.as_raw(), 3);
        assert_eq!(ErrorCode::InvalidValue.as_raw(), 11);
        assert_eq!(ErrorCode::BackendFailure.as_raw(), 17);
        assert_eq!(ErrorCode::SymbolKind.as_raw(), 24);
    }

    #[test]
    fn a_result_is_one_pointer_wide() {
        assert_eq!(
            std::mem::size_of::<Result<()>>(),
            std::mem::size_of::<usize>()
        );
    }

    #[test]
    fn context_keeps_code() {
        let e = Error::not_found("kernel 'k'").context("program 0x10");
        assert_eq!(e.code(), ErrorCode::NotFound);
        assert_eq!(e.to_string(), "program 0x10: kernel 'k'");
    }

    #[test]
    fn every_code_round_trips_through_its_value() {
        for (n, code) in ErrorCode::ALL.iter().enumerate() {
            assert_eq!(code.as_raw() as usize, n);
            assert_eq!(ErrorCode::from_raw(n as u32), Some(*code));
        }
        assert_eq!(ErrorCode::from_raw(25), None);
    }

    #[test]
    fn debug_is_the_message_and_code() {
        let e = Error::not_found("kernel 'k'");
        assert_eq!(format!("{e:?}"), "kernel 'k' (NotFound)");
        let full = format!("{e:#?}");
        assert!(full.contains("code: NotFound") && full.contains("message: \"kernel 'k'\""));
    }
}

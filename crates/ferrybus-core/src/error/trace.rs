//! What faults say about an error: its Rust type name (`exceptionType`) and its stack trace
//! (`stackTrace`, `MT-Fault-StackTrace`), both stable across machines and environments.
//!
//! MassTransit writes `TypeCache.GetShortName(exception.GetType())` (the namespace-qualified
//! type name) and `ExceptionUtil.GetStackTrace` (cleaned up, cut to 2048 characters;
//! `src/MassTransit.Abstractions/Util/ExceptionUtil.cs`). The Rust counterparts: the error type's
//! path without private `error` modules (`serde_json::Error`, `std::io::Error`,
//! `billing::invoice::InvoiceError`), and the backtrace captured where the `ConsumeError` was
//! made — always, whatever `RUST_BACKTRACE` says — with std, tokio, futures and tower frames
//! left out and source paths relative to the crate (`billing/src/invoice.rs`), never the build
//! machine's absolute paths.

use std::backtrace::Backtrace;

/// MassTransit cuts exception messages and stack traces to this many characters.
pub(crate) const MAX_TEXT: usize = 2048;

/// `text` cut to [`MAX_TEXT`] characters.
pub(crate) fn truncate(text: &str) -> String {
    match text.char_indices().nth(MAX_TEXT) {
        Some((i, _)) => text[..i].to_owned(),
        None => text.to_owned(),
    }
}

/// A readable Rust type name from `std::any::type_name`: every path loses its private
/// `error`/`errors` modules, as crates re-export their error types above them.
///
/// `serde_json::error::Error` → `serde_json::Error`; `core::num::error::ParseIntError` →
/// `core::num::ParseIntError`; `my::Wrapper<std::io::error::Error>` → `my::Wrapper<std::io::Error>`.
pub(crate) fn readable_type_name(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut path = String::new();
    let flush = |path: &mut String, out: &mut String| {
        if path.is_empty() {
            return;
        }
        let segments: Vec<&str> = path.split("::").collect();
        let last = segments.len() - 1;
        let kept: Vec<&str> = segments
            .iter()
            .enumerate()
            .filter(|(i, s)| *i == last || !matches!(**s, "error" | "errors"))
            .map(|(_, s)| *s)
            .collect();
        out.push_str(&kept.join("::"));
        path.clear();
    };
    for c in raw.chars() {
        if c.is_alphanumeric() || c == '_' || c == ':' {
            path.push(c);
        } else {
            flush(&mut path, &mut out);
            out.push(c);
        }
    }
    flush(&mut path, &mut out);
    out
}

/// Frames that say nothing about the failing code: the runtime, the standard library, the
/// combinators, and ferrybus's own error construction.
const SKIPPED_FRAMES: [&str; 21] = [
    "std::",
    "core::",
    "alloc::",
    "tokio::",
    "futures::",
    "futures_util::",
    "futures_core::",
    "futures_executor::",
    "tower::",
    "tracing::",
    "ferrybus_core::error::ConsumeError",
    "ferrybus_core::error::trace::render",
    "ferrybus_core::consume::panic::",
    "__rust",
    "test::",
    "fn(",
    "rust_begin_unwind",
    "_start",
    "__libc_start",
    "start_thread",
    "clone",
];

/// Renders a backtrace as .NET writes a stack trace: one `   at <function> in <file>:line <n>`
/// per frame of the application and its libraries, source paths relative to their crate, cut
/// to 2048 characters.
pub(crate) fn render(backtrace: &Backtrace) -> String {
    // The alternate form lists every frame with absolute paths, whatever the environment or the
    // working directory; the filtering and the paths are then ours.
    let text = format!("{backtrace:#}");
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let Some(symbol) = frame_symbol(line) else {
            continue;
        };
        let location = match lines
            .peek()
            .and_then(|l| l.trim_start().strip_prefix("at "))
        {
            Some(location) => {
                let location = location.to_owned();
                lines.next();
                Some(location)
            }
            None => None,
        };
        let symbol = strip_disambiguators(strip_hash(symbol));
        if symbol.is_empty() || symbol == "<unknown>" || is_skipped(&symbol) {
            continue;
        }
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str("   at ");
        out.push_str(&symbol);
        if let Some(location) = location.as_deref().and_then(relative_location) {
            out.push_str(" in ");
            out.push_str(&location);
        }
        if out.len() > MAX_TEXT * 2 {
            break;
        }
    }
    truncate(&out)
}

/// `   12:     0x55d0c0ffee00 - some::function` (or without the address) → `some::function`.
fn frame_symbol(line: &str) -> Option<&str> {
    let trimmed = line.trim_start();
    let (index, rest) = trimmed.split_once(": ")?;
    if !index.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let rest = rest.trim();
    Some(match rest.split_once(" - ") {
        Some((address, symbol)) if address.starts_with("0x") => symbol,
        _ => rest,
    })
}

/// `std[e28293b1aa0f68bd]::io` → `std::io`: the compiler's crate disambiguators left out.
fn strip_disambiguators(symbol: &str) -> String {
    let mut out = String::with_capacity(symbol.len());
    let mut rest = symbol;
    while let Some(open) = rest.find('[') {
        let tail = &rest[open + 1..];
        match tail.find(']') {
            Some(16) if tail[..16].chars().all(|c| c.is_ascii_hexdigit()) => {
                let close = 16;
                out.push_str(&rest[..open]);
                rest = &tail[close + 1..];
            }
            _ => {
                out.push_str(&rest[..=open]);
                rest = tail;
            }
        }
    }
    out.push_str(rest);
    out
}

/// `path::to::fn::h0123456789abcdef` → `path::to::fn`.
fn strip_hash(symbol: &str) -> &str {
    match symbol.rsplit_once("::h") {
        Some((head, hash)) if hash.len() == 16 && hash.chars().all(|c| c.is_ascii_hexdigit()) => {
            head
        }
        _ => symbol,
    }
}

fn is_skipped(symbol: &str) -> bool {
    let bare = symbol.strip_prefix('<').unwrap_or(symbol);
    if SKIPPED_FRAMES.iter().any(|p| bare.starts_with(p)) {
        return true;
    }
    // `<F as core::future::Future>::poll`, `<T as core::convert::Into<U>>::into`: a generic
    // parameter's impl of a standard trait.
    match bare.split_once(" as ") {
        Some((param, rest)) => {
            param.len() == 1
                && param.chars().all(|c| c.is_ascii_uppercase())
                && ["core::", "std::", "alloc::"]
                    .iter()
                    .any(|p| rest.starts_with(p))
        }
        None => false,
    }
}

/// `/home/ci/work/billing/src/invoice.rs:42:17` → `billing/src/invoice.rs:line 42`: the path from
/// the crate's directory (the one holding `src/`), else the last two components.
fn relative_location(location: &str) -> Option<String> {
    let (path, line) = split_line(location);
    let path = path.replace('\\', "/");
    let relative = match path.rfind("/src/") {
        Some(i) => {
            let crate_start = path[..i].rfind('/').map_or(0, |j| j + 1);
            path[crate_start..].to_owned()
        }
        None => {
            let parts: Vec<&str> = path.rsplit('/').take(2).collect();
            parts.into_iter().rev().collect::<Vec<_>>().join("/")
        }
    };
    if relative.is_empty() {
        return None;
    }
    Some(match line {
        Some(line) => format!("{relative}:line {line}"),
        None => relative,
    })
}

/// `file.rs:42:17` → (`file.rs`, Some(42)).
fn split_line(location: &str) -> (&str, Option<&str>) {
    let mut parts = location.rsplitn(3, ':');
    let last = parts.next();
    let middle = parts.next();
    let rest = parts.next();
    let numeric = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    match (rest, middle, last) {
        (Some(path), Some(line), Some(col)) if numeric(line) && numeric(col) => (path, Some(line)),
        (_, Some(path), Some(line)) if numeric(line) => (path, Some(line)),
        _ => (location, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_names_lose_private_error_modules() {
        assert_eq!(
            readable_type_name("serde_json::error::Error"),
            "serde_json::Error"
        );
        assert_eq!(
            readable_type_name("core::num::error::ParseIntError"),
            "core::num::ParseIntError"
        );
        assert_eq!(
            readable_type_name("my::Wrapper<std::io::error::Error>"),
            "my::Wrapper<std::io::Error>"
        );
        assert_eq!(readable_type_name("billing::error"), "billing::error");
    }

    #[test]
    fn frames_lose_addresses_and_disambiguators() {
        assert_eq!(
            frame_symbol("  12:     0x555fae73d4b1 - stack_trace::fail"),
            Some("stack_trace::fail")
        );
        assert_eq!(frame_symbol("   3: a::b"), Some("a::b"));
        assert_eq!(
            strip_disambiguators("<std[e28293b1aa0f68bd]::x as core[c1f1a4ba060b9bfa]::Y>::z[0]"),
            "<std::x as core::Y>::z[0]"
        );
    }

    #[test]
    fn locations_are_relative() {
        assert_eq!(
            relative_location("/home/ci/work/billing/src/invoice.rs:42:17").unwrap(),
            "billing/src/invoice.rs:line 42"
        );
        assert_eq!(
            relative_location("/root/.cargo/registry/src/index-abc/tokio-1.0.0/src/rt/mod.rs:7:1")
                .unwrap(),
            "tokio-1.0.0/src/rt/mod.rs:line 7"
        );
        assert_eq!(
            relative_location("/work/ferrybus/tests/tests/scenarios.rs:10:5").unwrap(),
            "tests/scenarios.rs:line 10"
        );
        assert_eq!(
            relative_location("C:\\build\\app\\src\\main.rs:3:1").unwrap(),
            "app/src/main.rs:line 3"
        );
    }

    #[test]
    fn renders_application_frames_only() {
        let rendered = render(&Backtrace::force_capture());
        assert!(rendered.len() <= MAX_TEXT);
        assert!(!rendered.contains("/work/"), "{rendered}");
        assert!(!rendered.contains(" at std::"), "{rendered}");
        if !rendered.is_empty() {
            assert!(rendered.starts_with("   at "), "{rendered}");
        }
    }
}

//! Helpers for output meant for people.

use std::io::IsTerminal;

use comfy_table::ContentArrangement;

/// Tables wrap to the terminal's width; piped to a file or another program they do not wrap,
/// so every cell stays on one line.
pub(crate) fn arrangement() -> ContentArrangement {
    if std::io::stdout().is_terminal() {
        ContentArrangement::Dynamic
    } else {
        ContentArrangement::Disabled
    }
}

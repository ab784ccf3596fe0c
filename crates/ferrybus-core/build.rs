//! Records the version of the Rust compiler building ferrybus-core, for the `frameworkVersion`
//! that every message's `host` carries (MassTransit writes .NET's `Environment.Version` there).

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=RUSTC");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let version = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.split_whitespace().nth(1).map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=FERRYBUS_RUSTC_VERSION={version}");
}

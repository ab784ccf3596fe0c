//! `HostInfo`: which process wrote a message.

use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize, Serializer};
use serde_json::value::RawValue;

/// The `host` object of an envelope and the `MT-Host-*` headers: which machine and process wrote
/// a message. Fields are in MassTransit's order; every field is optional on read.
///
/// ```
/// let host = ferrybus_core::envelope::HostInfo::current();
/// assert_eq!(host.process_id, Some(std::process::id() as i64));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HostInfo {
    /// The machine (host) name.
    #[serde(alias = "MachineName")]
    pub machine_name: Option<String>,
    /// The process name.
    #[serde(alias = "ProcessName")]
    pub process_name: Option<String>,
    /// The operating-system process id.
    #[serde(alias = "ProcessId")]
    pub process_id: Option<i64>,
    /// The application ("assembly") name.
    #[serde(alias = "Assembly")]
    pub assembly: Option<String>,
    /// The application version.
    #[serde(alias = "AssemblyVersion")]
    pub assembly_version: Option<String>,
    /// The runtime version (`Environment.Version` for .NET).
    #[serde(alias = "FrameworkVersion")]
    pub framework_version: Option<String>,
    /// The messaging library's version (`massTransitVersion` on the wire).
    #[serde(alias = "MassTransitVersion")]
    pub mass_transit_version: Option<String>,
    /// The operating system version.
    #[serde(alias = "OperatingSystemVersion")]
    pub operating_system_version: Option<String>,
}

static CURRENT: OnceLock<Arc<HostInfo>> = OnceLock::new();

/// [`CURRENT`] as JSON text, made once: every message this process writes carries it.
static CURRENT_JSON: OnceLock<Box<RawValue>> = OnceLock::new();

/// Writes an envelope's `host`: this process's [`HostInfo::shared`] from its JSON text made
/// once, any other host field by field.
pub(super) fn serialize<S: Serializer>(
    host: &Option<Arc<HostInfo>>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match host {
        // `CURRENT.get()`, not `shared_ref()`: writing another host must not fix this
        // process's before `set_application`.
        Some(host)
            if CURRENT
                .get()
                .is_some_and(|current| Arc::ptr_eq(host, current)) =>
        {
            CURRENT_JSON
                .get_or_init(|| {
                    serde_json::value::to_raw_value(&**host).expect("a HostInfo always serializes")
                })
                .serialize(serializer)
        }
        other => other.serialize(serializer),
    }
}

impl HostInfo {
    /// The host information of this process, computed once.
    ///
    /// Call [`HostInfo::set_application`] first to report the application's name and version.
    pub fn current() -> &'static HostInfo {
        Self::shared_ref()
    }

    /// The host information of this process, shared: what every message ferrybus writes
    /// carries in its envelope's `host` (a reference count, not a copy per message).
    ///
    /// ```
    /// use ferrybus_core::envelope::HostInfo;
    /// assert_eq!(*HostInfo::shared(), *HostInfo::current());
    /// ```
    pub fn shared() -> Arc<HostInfo> {
        Self::shared_ref().clone()
    }

    fn shared_ref() -> &'static Arc<HostInfo> {
        CURRENT.get_or_init(|| Arc::new(HostInfo::detect(None, None)))
    }

    /// Sets the application name and version reported in `assembly` / `assemblyVersion` (without
    /// it, `assembly` is the process name and `assemblyVersion` is `Unknown`, as MassTransit
    /// writes an assembly without a version). Only the first call
    /// before any message is written takes effect; returns whether it did.
    ///
    /// ```
    /// use ferrybus_core::envelope::HostInfo;
    /// HostInfo::set_application(env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION"));
    /// let host = HostInfo::current();
    /// assert_eq!(host.assembly.as_deref(), Some("ferrybus-core"));
    /// assert!(host.framework_version.as_deref().unwrap().starts_with("Rust 1."));
    /// assert_eq!(host.mass_transit_version.as_deref(), Some(concat!("ferrybus ", env!("CARGO_PKG_VERSION"))));
    /// ```
    pub fn set_application(name: &str, version: &str) -> bool {
        CURRENT
            .set(Arc::new(HostInfo::detect(Some(name), Some(version))))
            .is_ok()
    }

    /// MassTransit's `HostMetadataCache.Host` (`src/MassTransit.Abstractions/Metadata/BusHostInfo.cs`):
    /// machine, process name and id, entry assembly and its version, `Environment.Version`,
    /// MassTransit's version, `Environment.OSVersion`. Here: the executable's name, the
    /// application given to [`HostInfo::set_application`] (else the executable's name), the
    /// Rust compiler that built ferrybus (`Rust 1.xx.y`), `ferrybus <version>`, and the kernel
    /// release as .NET writes it on Unix (`Unix 6.8.0`).
    fn detect(assembly: Option<&str>, version: Option<&str>) -> HostInfo {
        let process_name = process_name();
        HostInfo {
            machine_name: Some(gethostname::gethostname().to_string_lossy().into_owned()),
            process_id: Some(i64::from(std::process::id())),
            assembly: Some(assembly.map_or_else(|| process_name.clone(), str::to_owned)),
            assembly_version: Some(version.unwrap_or("Unknown").to_owned()),
            framework_version: Some(format!("Rust {}", env!("FERRYBUS_RUSTC_VERSION"))),
            mass_transit_version: Some(format!("ferrybus {}", env!("CARGO_PKG_VERSION"))),
            operating_system_version: Some(os_version()),
            process_name: Some(process_name),
        }
    }

    /// The eight `MT-Host-*` headers MassTransit adds to messages it moves to `_error` or
    /// `_skipped` (all strings).
    pub fn headers(&self) -> [(&'static str, String); 8] {
        let s = |v: &Option<String>| v.clone().unwrap_or_default();
        [
            ("MT-Host-MachineName", s(&self.machine_name)),
            ("MT-Host-ProcessName", s(&self.process_name)),
            (
                "MT-Host-ProcessId",
                self.process_id.map(|p| p.to_string()).unwrap_or_default(),
            ),
            ("MT-Host-Assembly", s(&self.assembly)),
            ("MT-Host-AssemblyVersion", s(&self.assembly_version)),
            ("MT-Host-MassTransitVersion", s(&self.mass_transit_version)),
            ("MT-Host-FrameworkVersion", s(&self.framework_version)),
            (
                "MT-Host-OperatingSystemVersion",
                s(&self.operating_system_version),
            ),
        ]
    }
}

/// The running executable's name (what `ps` shows), without an extension.
fn process_name() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .or_else(|| {
            std::fs::read_to_string("/proc/self/comm")
                .ok()
                .map(|s| s.trim().to_owned())
        })
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "ferrybus".to_owned())
}

fn os_version() -> String {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    // .NET writes `Unix <major.minor.build>`: the leading numeric part of the release.
    let numeric: String = release
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    match numeric.trim_end_matches('.') {
        "" => std::env::consts::OS.to_owned(),
        version => format!("Unix {version}"),
    }
}

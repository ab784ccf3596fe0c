//! Names MassTransit derives: z-base-32 ids and the bus (temporary) queue name (endpoint names:
//! `ferrybus_core::endpoint::EndpointNameFormatter`).

use ferrybus_core::envelope::HostInfo;
use uuid::Uuid;

const ZBASE32: &[u8; 32] = b"ybndrfg8ejkmcpqxot1uwisza345h769";
const MAX_TEMPORARY_NAME: usize = 72;

/// Encodes bytes as lowercase z-base-32 (5 bits per character, most significant bit first);
/// 16 bytes give 26 characters.
///
/// ```
/// use ferrybus_rabbitmq::naming::zbase32;
/// assert_eq!(zbase32(&[0; 16]), "y".repeat(26));
/// assert_eq!(zbase32(&[0xff; 16]).len(), 26);
/// assert_eq!(zbase32(b"\xf0\xbf\xc7"), "6n9hq");
/// ```
pub fn zbase32(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 8 / 5 + 1);
    let mut buffer: u32 = 0;
    let mut bits = 0;
    for &byte in bytes {
        buffer = (buffer << 8) | u32::from(byte);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(char::from(ZBASE32[((buffer >> bits) & 31) as usize]));
        }
    }
    if bits > 0 {
        out.push(char::from(ZBASE32[((buffer << (5 - bits)) & 31) as usize]));
    }
    out
}

/// The name MassTransit gives a temporary queue: `<machine>_<process>_<tag>_<26 z-base-32
/// chars of a new id>`, non-alphanumeric characters removed from the machine and process
/// names, and the parts cut to 14 characters while the name is longer than 72.
///
/// ```
/// use ferrybus_rabbitmq::naming::temporary_queue_name;
/// let name = temporary_queue_name("bus");
/// assert!(name.contains("_bus_"));
/// assert!(name.len() <= 72);
/// ```
pub fn temporary_queue_name(tag: &str) -> String {
    let host = HostInfo::current();
    let machine = host.machine_name.as_deref().unwrap_or("localhost");
    let process = host.process_name.as_deref().unwrap_or("ferrybus");
    let id = zbase32(Uuid::now_v7().as_bytes());
    build_temporary_name(machine, process, tag, &id)
}

fn build_temporary_name(machine: &str, process: &str, tag: &str, id: &str) -> String {
    let clean = |s: &str| {
        s.chars()
            .filter(char::is_ascii_alphanumeric)
            .collect::<String>()
    };
    let mut parts = [clean(machine), clean(process), tag.to_owned()];
    let join = |p: &[String; 3]| format!("{}_{}_{}_{id}", p[0], p[1], p[2]);
    for i in 0..3 {
        if join(&parts).len() <= MAX_TEMPORARY_NAME {
            break;
        }
        parts[i] = parts[i].chars().take(14).collect();
    }
    join(&parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporary_names_match_masstransit_captures() {
        let id = "kbdyyyfp5jkqd4a4bdqgqidibq";
        assert_eq!(
            build_temporary_name("DESKTOP-3VIT6KG", "OrdersApi", "bus", id),
            "DESKTOP3VIT6KG_OrdersApi_bus_kbdyyyfp5jkqd4a4bdqgqidibq"
        );
        let long = build_temporary_name(
            "DESKTOP-TNOQ92E",
            "DotnetMassTransitApp.Producer",
            "bus",
            id,
        );
        assert_eq!(
            long,
            "DESKTOPTNOQ92E_DotnetMassTran_bus_kbdyyyfp5jkqd4a4bdqgqidibq"
        );
        let very_long = build_temporary_name(&"M".repeat(40), &"P".repeat(40), "bus", id);
        assert_eq!(
            very_long,
            format!("{}_{}_bus_{id}", "M".repeat(14), "P".repeat(14))
        );
    }

    #[test]
    fn zbase32_of_an_id_has_26_lowercase_chars() {
        let s = zbase32(Uuid::now_v7().as_bytes());
        assert_eq!(s.len(), 26);
        assert!(s
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()));
    }
}

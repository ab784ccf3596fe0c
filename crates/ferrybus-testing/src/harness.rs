//! Waits on the in-memory [`TestHarness`]'s settlements.

use ferrybus_core::memory::{BusEvent, TestHarness};
use ferrybus_core::SettlementKind;
use uuid::Uuid;

use crate::{eventually, WAIT};

/// Waits until `n` deliveries of `id` were consumed (acknowledged, also as duplicates) or
/// faulted on the harness.
pub async fn wait_settled(harness: &TestHarness, id: Uuid, n: usize) {
    let text = id.to_string();
    let kinds = [
        SettlementKind::Ack,
        SettlementKind::Duplicate,
        SettlementKind::Fault,
    ];
    eventually(&format!("{n} settlements of {id}"), WAIT, || {
        let settled = harness
            .events()
            .iter()
            .filter(|e| e.settles(&text, &kinds))
            .count();
        async move { (settled >= n).then_some(()) }
    })
    .await;
}

/// How `id` was settled on the harness so far, in order.
pub fn settlements(harness: &TestHarness, id: Uuid) -> Vec<SettlementKind> {
    let text = Some(id.to_string());
    harness
        .events()
        .into_iter()
        .filter_map(|e| match e {
            BusEvent::Settled {
                message_id,
                settlement,
                ..
            } if message_id == text => Some(settlement),
            _ => None,
        })
        .collect()
}

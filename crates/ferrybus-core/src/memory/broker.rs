//! An in-process broker with RabbitMQ's routing model: fanout exchanges bound to exchanges and
//! queues, queues delivering in order.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::envelope::Headers;

/// A message sitting in an in-memory queue: body and transport properties.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StoredMessage {
    /// The body.
    pub body: Bytes,
    /// The content type property.
    pub content_type: Option<String>,
    /// Transport headers.
    pub headers: Headers,
    /// The message id property.
    pub message_id: Option<String>,
    /// The correlation id property.
    pub correlation_id: Option<String>,
    /// The message type URNs (kept for test assertions).
    pub message_type: Vec<String>,
    /// Whether this is a broker redelivery.
    pub redelivered: bool,
}

#[derive(Default)]
struct State {
    exchanges: HashMap<String, Vec<Target>>,
    queues: HashMap<String, VecDeque<StoredMessage>>,
}

#[derive(Clone, PartialEq, Eq)]
enum Target {
    Exchange(String),
    Queue(String),
}

/// The in-memory broker. Cheap to clone; clones share state.
#[derive(Clone, Default)]
pub struct InMemoryBroker {
    state: Arc<Mutex<State>>,
    arrived: Arc<Notify>,
}

impl InMemoryBroker {
    /// An empty broker.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Declares a fanout exchange (idempotent).
    pub fn declare_exchange(&self, name: &str) {
        self.state().exchanges.entry(name.to_owned()).or_default();
    }

    /// Declares a queue (idempotent).
    pub fn declare_queue(&self, name: &str) {
        self.state().queues.entry(name.to_owned()).or_default();
    }

    /// Binds exchange `source` to exchange `destination`.
    pub fn bind_exchange(&self, source: &str, destination: &str) {
        self.bind(source, Target::Exchange(destination.to_owned()));
    }

    /// Binds exchange `source` to queue `queue`.
    pub fn bind_queue(&self, source: &str, queue: &str) {
        self.bind(source, Target::Queue(queue.to_owned()));
    }

    fn bind(&self, source: &str, target: Target) {
        let mut state = self.state();
        let bindings = state.exchanges.entry(source.to_owned()).or_default();
        if !bindings.contains(&target) {
            bindings.push(target);
        }
    }

    /// Declares `name` as a MassTransit endpoint: exchange and queue of that name, bound.
    pub fn declare_endpoint(&self, name: &str) {
        self.declare_exchange(name);
        self.declare_queue(name);
        self.bind_queue(name, name);
    }

    /// Publishes to exchange `exchange`; every queue reachable through bindings gets one copy.
    /// Returns how many queues received it.
    pub fn publish(&self, exchange: &str, message: StoredMessage) -> usize {
        let mut state = self.state();
        let queues = routed_queues(&state, exchange);
        for queue in &queues {
            if let Some(q) = state.queues.get_mut(queue) {
                q.push_back(message.clone());
            }
        }
        drop(state);
        self.arrived.notify_waiters();
        queues.len()
    }

    /// Puts a message back at the front of `queue` (an un-acked delivery returned).
    pub fn requeue(&self, queue: &str, mut message: StoredMessage) {
        message.redelivered = true;
        if let Some(q) = self.state().queues.get_mut(queue) {
            q.push_front(message);
        }
        self.arrived.notify_waiters();
    }

    /// A snapshot of the messages in `queue`.
    pub fn messages(&self, queue: &str) -> Vec<StoredMessage> {
        self.state()
            .queues
            .get(queue)
            .map(|q| q.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Whether a queue exists.
    pub fn has_queue(&self, queue: &str) -> bool {
        self.state().queues.contains_key(queue)
    }

    /// Whether an exchange exists.
    pub fn has_exchange(&self, exchange: &str) -> bool {
        self.state().exchanges.contains_key(exchange)
    }

    /// Takes the next message from `queue`, waiting for one; `None` once `cancel` fires.
    pub async fn receive(&self, queue: &str, cancel: &CancellationToken) -> Option<StoredMessage> {
        loop {
            let notified = self.arrived.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(message) = self
                .state()
                .queues
                .get_mut(queue)
                .and_then(VecDeque::pop_front)
            {
                return Some(message);
            }
            tokio::select! {
                _ = &mut notified => {}
                _ = cancel.cancelled() => return None,
            }
        }
    }
}

fn routed_queues(state: &State, exchange: &str) -> Vec<String> {
    let mut seen_exchanges = HashSet::new();
    let mut queues = Vec::new();
    let mut pending = vec![exchange.to_owned()];
    while let Some(name) = pending.pop() {
        if !seen_exchanges.insert(name.clone()) {
            continue;
        }
        for target in state.exchanges.get(&name).into_iter().flatten() {
            match target {
                Target::Exchange(e) => pending.push(e.clone()),
                Target::Queue(q) if !queues.contains(q) => queues.push(q.clone()),
                Target::Queue(_) => {}
            }
        }
    }
    queues
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_once_per_queue_through_exchange_chains() {
        let broker = InMemoryBroker::new();
        broker.declare_endpoint("q");
        broker.declare_exchange("Ns:T");
        broker.declare_exchange("Ns:IBase");
        broker.bind_exchange("Ns:T", "Ns:IBase");
        broker.bind_exchange("Ns:T", "q");
        broker.bind_exchange("Ns:IBase", "q");
        assert_eq!(broker.publish("Ns:T", StoredMessage::default()), 1);
        assert_eq!(broker.messages("q").len(), 1);
        assert_eq!(broker.publish("nowhere", StoredMessage::default()), 0);
    }
}

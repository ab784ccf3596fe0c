//! In-process micro-benchmark of the core: envelope parse + dispatch through ferrybus's receive
//! pipeline and through the in-memory `TestHarness`, against `serde_json::from_slice` of the same
//! bodies. No broker, no database: the cost ferrybus-core adds per message.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use ferrybus_core::error::BoxError;
use ferrybus_core::memory::TestHarness;
use ferrybus_core::outgoing::MessageFactory;
use ferrybus_core::outgoing::MessageSink;
use ferrybus_core::outgoing::OutgoingMessage;
use ferrybus_core::BusConfig;
use ferrybus_core::{
    consumer_fn, ConsumeContext, ConsumeError, Delivery, EndpointConfig, Publish, PublishError,
    Settlement,
};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::broker::Counter;
use crate::messages::{self, BaselineEnvelope, OrderSubmitted};

/// Drops whatever is sent (the micro-benchmark's consumers send nothing).
struct NullSink;

#[async_trait]
impl MessageSink for NullSink {
    async fn deliver(&self, _message: OutgoingMessage) -> Result<(), PublishError> {
        Ok(())
    }
}

/// The figures of the micro-benchmark, msg/s.
pub(crate) struct MicroResult {
    /// `serde_json::from_slice` into a typed envelope, one thread.
    pub(crate) serde: f64,
    /// The endpoint service (parse, match, dispatch to a consumer, settle), one task.
    pub(crate) pipeline: f64,
    /// `TestHarness`: publish (build + serialize) and consume through the in-memory bus.
    pub(crate) harness: f64,
    /// Messages in each pass.
    pub(crate) messages: usize,
    /// How many messages the harness consumed (must equal `messages`).
    pub(crate) harness_consumed: usize,
}

fn counting_endpoint(endpoint: EndpointConfig, counter: Counter) -> EndpointConfig {
    endpoint.consumer(consumer_fn(
        "OrderConsumer",
        move |ctx: ConsumeContext<OrderSubmitted>| {
            let counter = counter.clone();
            async move {
                std::hint::black_box(ctx.message_id());
                std::hint::black_box(&ctx.message().order_id);
                counter.incr();
                Ok::<_, ConsumeError>(())
            }
        },
    ))
}

/// Runs the three passes over `n` messages.
pub(crate) async fn run(n: usize) -> Result<MicroResult, BoxError> {
    let factory = MessageFactory::new(messages::host());
    let bodies: Vec<Vec<u8>> = (0..n)
        .map(|i| messages::envelope(&factory, "bench-micro", &messages::order(i)).map(|(_, b)| b))
        .collect::<Result<_, _>>()?;

    // serde_json baseline (best of 3 passes to dodge a noisy neighbour).
    let mut serde = 0f64;
    for _ in 0..3 {
        let start = Instant::now();
        for body in &bodies {
            let envelope: BaselineEnvelope<OrderSubmitted> = serde_json::from_slice(body)?;
            std::hint::black_box(envelope);
        }
        serde = serde.max(n as f64 / start.elapsed().as_secs_f64());
    }

    // The endpoint service, as a transport drives it.
    let counter = Counter::new();
    let config = counting_endpoint(EndpointConfig::new("bench-micro"), counter.clone());
    // Instrumented, as every RabbitMQ bus is by default.
    let context = ferrybus_otel::instrument(BusConfig::default()).endpoint_context(
        &config,
        factory.host().entity_address("bench-micro"),
        Arc::new(NullSink),
        Arc::new(factory.clone()),
        CancellationToken::new(),
    );
    let endpoint = config.build(context);
    let delivery = |body: &Vec<u8>| {
        Delivery::new(body.clone()).content_type(crate::broker::ENVELOPE.to_owned())
    };
    let mut pipeline_rate = 0f64;
    for _ in 0..3 {
        // Built before the clock starts: a transport hands each delivery over once, by value.
        let deliveries: Vec<Delivery> = bodies.iter().map(delivery).collect();
        let start = Instant::now();
        for delivery in deliveries {
            let Ok(settlement) = endpoint.clone().oneshot(delivery).await;
            if !matches!(settlement, Settlement::Ack) {
                return Err(format!("endpoint settlement {settlement:?}").into());
            }
        }
        pipeline_rate = pipeline_rate.max(n as f64 / start.elapsed().as_secs_f64());
    }
    if counter.get() != 3 * n {
        return Err(format!("pipeline consumed {} of {}", counter.get(), 3 * n).into());
    }

    // The in-memory harness: publish every message, wait until every one was consumed.
    let counter = Counter::new();
    let c = counter.clone();
    let harness = TestHarness::builder()
        .receive_endpoint("bench-micro-harness", |e| counting_endpoint(e, c))
        .start()
        .await?;
    let orders: Vec<OrderSubmitted> = (0..n).map(messages::order).collect();
    let start = Instant::now();
    for order in &orders {
        harness.publish(order).await?;
    }
    let (consumed, last) = counter
        .wait_for(n, Duration::from_secs(30 + n as u64 / 1000))
        .await;
    let harness_rate = consumed as f64 / last.duration_since(start).as_secs_f64();
    harness.stop().await;

    Ok(MicroResult {
        serde,
        pipeline: pipeline_rate,
        harness: harness_rate,
        messages: n,
        harness_consumed: consumed,
    })
}

//! What the broker tests share beyond `ferrybus-testing`: test message types, a recording
//! consumer, starting a bus, a raw header check, and binding to an exchange as it is.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::future::Future;
use std::sync::{Arc, Mutex};

use ferrybus_core::Message;
use ferrybus_rabbitmq::{RabbitMqBus, RabbitMqBusBuilder};

/// What a [`recorder`] saw.
pub type Seen<T> = Arc<Mutex<Vec<T>>>;

/// Defines a message type `$name` with fields `n: u32` and `fail: bool`, named `$urn` (`Ns:Type`).
#[macro_export]
macro_rules! test_message {
    ($name:ident, $urn:expr) => {
        test_message!($name, $urn, []);
    };
    ($name:ident, $urn:expr, [$($base:expr),*]) => {
        #[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq)]
        #[serde(rename_all = "camelCase")]
        pub struct $name {
            pub n: u32,
            #[serde(default)]
            pub fail: bool,
        }
        impl ferrybus_core::Message for $name {
            fn message_type() -> ferrybus_core::MessageType {
                ferrybus_core::MessageType::parse($urn).unwrap()
                    $(.implements(ferrybus_core::MessageType::parse($base).unwrap()))*
            }
        }
    };
}

/// The future a boxed test consumer returns.
pub type ConsumeFuture =
    std::pin::Pin<Box<dyn Future<Output = Result<(), ferrybus_core::ConsumeError>> + Send>>;

/// A consumer body that records every message it sees.
pub fn recorder<M>(
    seen: Seen<M>,
) -> impl Fn(ferrybus_core::ConsumeContext<M>) -> ConsumeFuture + Send + Sync + 'static
where
    M: Message + Clone,
{
    move |ctx| {
        let seen = seen.clone();
        Box::pin(async move {
            seen.lock().unwrap().push(ctx.message().clone());
            Ok(())
        })
    }
}

/// Starts `bus`, panicking if it cannot.
pub async fn start(bus: RabbitMqBusBuilder) -> RabbitMqBus {
    bus.start().await.expect("bus starts")
}

/// Runs `rabbitmqctl` with `args` (blocking: also usable from `Drop`), returning its output;
/// panics if it fails.
pub fn rabbitmqctl(args: &[&str]) -> String {
    let output = std::process::Command::new("rabbitmqctl")
        .args(args)
        .output()
        .expect("rabbitmqctl runs");
    assert!(
        output.status.success(),
        "rabbitmqctl {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// `rabbitmqctl eval <expression>`: the broker's answer, as Erlang prints it.
pub fn rabbit_eval(expression: &str) -> String {
    rabbitmqctl(&["eval", expression])
}

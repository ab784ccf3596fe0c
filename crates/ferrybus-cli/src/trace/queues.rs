//! The broker's side of a trace: copies of the message in `_error` and `_skipped` queues, found
//! by peeking with [`crate::queues::Snapshot`] (every message read goes back to its place;
//! nothing is taken).

use ferrybus_rabbitmq::HostSettings;
use serde::Serialize;
use uuid::Uuid;

use crate::amqp::Broker;
use crate::error::{CliError, CliErrorKind};
use crate::management::{segment, Management};
use crate::message::{QueuedMessage, Summary};
use crate::queues::{progress, QueueKind, Snapshot};

/// The queues looked in and what was found there.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct QueueSearch {
    /// The queues peeked, with their ready messages at the time.
    pub(crate) searched: Vec<Searched>,
    /// The copies of the message found.
    pub(crate) copies: Vec<Copy>,
    /// What could not be searched, and why.
    pub(crate) notes: Vec<String>,
}

/// A queue peeked.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Searched {
    /// The queue.
    pub(crate) queue: String,
    /// `error` or `skipped`.
    pub(crate) kind: &'static str,
    /// Its ready messages when it was read.
    pub(crate) messages: u32,
}

/// A copy of the message in an `_error` or `_skipped` queue.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Copy {
    /// The queue.
    pub(crate) queue: String,
    /// `error` or `skipped`.
    pub(crate) kind: &'static str,
    /// The queue's ready messages when it was read.
    pub(crate) queue_messages: u32,
    /// What `errors list` shows of it (position, exception, input address …).
    #[serde(flatten)]
    pub(crate) summary: Summary,
    /// `MT-Fault-StackTrace`.
    pub(crate) stack_trace: Option<String>,
    /// `MT-Fault-MessageType`.
    pub(crate) fault_message_type: Option<String>,
    /// The envelope's `correlationId`.
    pub(crate) envelope_correlation_id: Option<Uuid>,
}

/// The name of a kind in the output.
fn kind_name(kind: QueueKind) -> &'static str {
    match kind {
        QueueKind::Error => "error",
        QueueKind::Skipped => "skipped",
    }
}

/// Looks for message `id` in the queues `names` mean, or, with none, in every `_error` and
/// `_skipped` queue the management API lists.
pub(crate) async fn search(
    amqp_url: &str,
    management_url: Option<&str>,
    names: &[String],
    id: Uuid,
) -> Result<QueueSearch, CliError> {
    let mut result = QueueSearch::default();
    let listed = if names.is_empty() {
        match discover(amqp_url, management_url) {
            Ok(listed) if listed.is_empty() => {
                result
                    .notes
                    .push("the management API lists no _error or _skipped queue".to_owned());
                return Ok(result);
            }
            Ok(listed) => Some(listed),
            Err(note) => {
                result.notes.push(note);
                return Ok(result);
            }
        }
    } else {
        None
    };
    let broker = Broker::connect(amqp_url).await?;
    let searched = async {
        let queues = match listed {
            Some(listed) => listed,
            None => resolve(&broker, names, &mut result.notes).await?,
        };
        for (queue, kind) in queues {
            peek(&broker, &queue, kind, id, &mut result).await?;
        }
        Ok::<_, CliError>(())
    }
    .await;
    broker.close().await;
    searched?;
    Ok(result)
}

/// The queues a `--queue` means: an `_error` or `_skipped` queue as it is (it must exist); for
/// an endpoint, those of its `_error` and `_skipped` queues that exist (the endpoint or one of
/// them must).
async fn resolve(
    broker: &Broker,
    names: &[String],
    notes: &mut Vec<String>,
) -> Result<Vec<(String, QueueKind)>, CliError> {
    let mut queues = Vec::new();
    for name in names {
        let given = [QueueKind::Error, QueueKind::Skipped]
            .into_iter()
            .find(|k| name.ends_with(k.suffix()));
        if let Some(kind) = given {
            broker.existing_queue(name).await?;
            queues.push((name.clone(), kind));
            continue;
        }
        let mut found = false;
        for kind in [QueueKind::Error, QueueKind::Skipped] {
            let queue = kind.resolve(name);
            if broker.queue_counts(&queue).await?.is_some() {
                queues.push((queue, kind));
                found = true;
            }
        }
        if !found {
            if broker.queue_counts(name).await?.is_none() {
                return Err(CliError::new(
                    CliErrorKind::Broker,
                    format!(
                        "queue {name} does not exist on vhost {} of {}, nor {name}_error or {name}_skipped",
                        broker.vhost(),
                        broker.shown_url()
                    ),
                ));
            }
            notes.push(format!(
                "{name} has no _error or _skipped queue: nothing faulted or was skipped there"
            ));
        }
    }
    Ok(queues)
}

/// Every `_error` and `_skipped` queue of the broker's virtual host, from the management API;
/// `Err` says why they could not be listed.
fn discover(
    amqp_url: &str,
    management_url: Option<&str>,
) -> Result<Vec<(String, QueueKind)>, String> {
    let vhost = HostSettings::parse(amqp_url)
        .map(|s| s.vhost().to_owned())
        .unwrap_or_else(|_| "/".to_owned());
    let unavailable = |url: &str, reason: &str| {
        format!(
            "no queue searched: the management API at {url} cannot list the queues ({reason}); name them with --queue"
        )
    };
    let management =
        Management::new(amqp_url, management_url).map_err(|u| unavailable(&u.url, &u.reason))?;
    let path = format!("queues/{}?columns=name", segment(&vhost));
    let listed = management
        .get(&path)
        .map_err(|u| unavailable(&u.url, &u.reason))?
        .ok_or_else(|| unavailable(management.url(), &format!("no virtual host {vhost}")))?;
    let mut queues: Vec<(String, QueueKind)> = listed
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|q| q["name"].as_str())
        .filter_map(|name| {
            [QueueKind::Error, QueueKind::Skipped]
                .into_iter()
                .find(|k| name.ends_with(k.suffix()))
                .map(|k| (name.to_owned(), k))
        })
        .collect();
    queues.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(queues)
}

/// Reads `queue` through, keeping the copies of `id`, and puts every message back.
async fn peek(
    broker: &Broker,
    queue: &str,
    kind: QueueKind,
    id: Uuid,
    result: &mut QueueSearch,
) -> Result<(), CliError> {
    let mut snapshot = Snapshot::open(broker, queue).await?;
    let total = snapshot.total;
    let bar = progress(total, &format!("peeking {queue}"));
    let read = async {
        while let Some((message, _acker)) = snapshot.next().await? {
            bar.inc(1);
            if is_copy(&message, id) {
                result.copies.push(copy(queue, kind, total, &message));
            }
        }
        Ok::<_, CliError>(())
    }
    .await;
    bar.finish_and_clear();
    let finished = snapshot.finish().await;
    read?;
    finished?;
    result.searched.push(Searched {
        queue: queue.to_owned(),
        kind: kind_name(kind),
        messages: total,
    });
    Ok(())
}

/// Whether `message` is a copy of `id`: its message id, or the `MT-OriginalMessageId` a
/// redelivery kept (the inbox's key).
fn is_copy(message: &QueuedMessage, id: Uuid) -> bool {
    let original = message
        .envelope
        .as_ref()
        .and_then(|e| e.headers.get_str("MT-OriginalMessageId"))
        .and_then(|s| Uuid::parse_str(s).ok());
    message.has_id(&id.to_string()) || original == Some(id)
}

fn copy(queue: &str, kind: QueueKind, total: u32, message: &QueuedMessage) -> Copy {
    Copy {
        queue: queue.to_owned(),
        kind: kind_name(kind),
        queue_messages: total,
        summary: message.summary(),
        stack_trace: message.header("MT-Fault-StackTrace"),
        fault_message_type: message.header("MT-Fault-MessageType"),
        envelope_correlation_id: message.envelope.as_ref().and_then(|e| e.correlation_id),
    }
}

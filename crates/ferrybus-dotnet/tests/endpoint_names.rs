//! Endpoint names under each formatter, equal to MassTransit's own expectations in
//! `tests/MassTransit.Tests/EndpointName_Specs.cs` and
//! `tests/MassTransit.Tests/Configuration/DefaultEndpointNameFormatter_Specs.cs` (v8.5). The
//! .NET types there are nested in `MassTransit.Tests.EndpointName_Specs`, so with the namespace
//! their names are `MassTransit.Tests.EndpointName_Specs+SomeReallyCoolConsumer`.

use ferrybus_dotnet::EndpointNameFormatter as F;

const COOL: &str = "MassTransit.Tests.EndpointName_Specs+SomeReallyCoolConsumer";
const ID_FORMAT: &str = "MassTransit.Tests.EndpointName_Specs+SomeSuperIDFormatConsumer";
const DIGITS: &str = "MassTransit.Tests.EndpointName_Specs+OneOr2MessageConsumer";
const PING: &str = "MassTransit.TestFramework.Messages.PingMessage";
const GENERIC: &str = "MassTransit.Tests.EndpointName_Specs+SomeGenericConsumer<MassTransit.TestFramework.Messages.PingMessage>";

#[test]
fn consumer_names_match_masstransit_specs() {
    let table: [(&str, F, &str, &str); 11] = [
        (
            "Should_convert_to_snake_case",
            F::snake_case(),
            COOL,
            "some_really_cool",
        ),
        (
            "Should_convert_to_snake_case_with_digits",
            F::snake_case(),
            DIGITS,
            "one_or2_message",
        ),
        (
            "Should_convert_to_snake_case_with_uppercase_ids",
            F::snake_case(),
            ID_FORMAT,
            "some_super_idformat",
        ),
        (
            "Should_include_the_namespace",
            F::kebab_case().include_namespace(true),
            COOL,
            "mass-transit-tests-endpoint-name-specs-some-really-cool",
        ),
        (
            "Should_include_the_namespace_and_prefix",
            F::kebab_case().prefix("Dev").include_namespace(true),
            COOL,
            "dev-mass-transit-tests-endpoint-name-specs-some-really-cool",
        ),
        (
            "Should_include_the_namespace_and_prefix_with_generic_consumer",
            F::kebab_case().prefix("Dev").include_namespace(true),
            GENERIC,
            "dev-mass-transit-test-framework-messages-ping-message",
        ),
        (
            "Should_include_the_prefix",
            F::kebab_case().prefix("Dev"),
            COOL,
            "dev-some-really-cool",
        ),
        (
            "Should_include_the_prefix_default",
            F::pascal_case().prefix("Dev"),
            COOL,
            "DevSomeReallyCool",
        ),
        (
            "Should_include_the_prefix_default_with_separator",
            F::pascal_case().prefix("Dev-"),
            COOL,
            "Dev-SomeReallyCool",
        ),
        (
            "Should_include_the_prefix_snake_with_separator",
            F::snake_case().prefix("Dev-"),
            COOL,
            "dev-some_really_cool",
        ),
        (
            "(kebab, no options)",
            F::kebab_case(),
            COOL,
            "some-really-cool",
        ),
    ];
    for (spec, formatter, type_name, expected) in table {
        assert_eq!(formatter.consumer(type_name).unwrap(), expected, "{spec}");
    }
}

#[test]
fn message_names_match_masstransit_specs() {
    assert_eq!(
        F::kebab_case().message(PING),
        "ping-message",
        "Should_only_include_the_message_name"
    );
    assert_eq!(
        F::kebab_case()
            .prefix("Dev")
            .include_namespace(true)
            .message(PING),
        "dev-mass-transit-test-framework-messages-ping-message",
        "Should_include_the_namespace_and_prefix_with_message_name"
    );
}

/// `When_consumers_are_generic_classes`: named after the (last) generic argument, so unique.
#[test]
fn generic_consumers_are_named_after_their_argument() {
    let names: Vec<String> = ["Msg1", "Msg2", "Msg3"]
        .iter()
        .map(|m| {
            let consumer = format!("MassTransit.Tests.Configuration.When_consumers_are_generic_classes+GenericConsumer<MassTransit.Tests.Configuration.When_consumers_are_generic_classes+{m}>");
            F::default().consumer(&consumer).unwrap()
        })
        .collect();
    assert_eq!(names, ["Msg1", "Msg2", "Msg3"]);
}

/// `Should_throw_exception_when_class_is_called_consumer` / `…_saga`.
#[test]
fn a_consumer_named_consumer_and_a_saga_named_saga_are_refused() {
    let error = F::default()
        .consumer("MassTransit.Tests.EndpointName_Specs+Consumer")
        .unwrap_err();
    assert!(
        error.to_string().contains("may not be named \"Consumer\""),
        "{error}"
    );
    assert!(F::default()
        .saga("MassTransit.Tests.EndpointName_Specs+Saga")
        .is_err());
}

/// `GetSagaName` trims `Saga` (any case) after the prefix is applied; sagas are named after the
/// instance type; the suffix check ignores case as .NET's `InvariantCultureIgnoreCase` does.
#[test]
fn saga_and_suffix_rules() {
    assert_eq!(
        F::kebab_case().saga("Sample.OrderState").unwrap(),
        "order-state"
    );
    assert_eq!(
        F::snake_case().saga("Sample.ShipmentSaga").unwrap(),
        "shipment"
    );
    assert_eq!(
        F::pascal_case().consumer("Sample.Audit_CONSUMER").unwrap(),
        "Audit_"
    );
    assert_eq!(
        F::kebab_case().consumer("Sample.Audit_CONSUMER").unwrap(),
        "audit-"
    );
    assert_eq!(
        F::snake_case()
            .separator('.')
            .consumer("Sample.SubmitOrderConsumer")
            .unwrap(),
        "submit.order"
    );
    assert_eq!(
        F::pascal_case()
            .include_namespace(true)
            .join_separator("-")
            .consumer("Sample.Orders.SubmitOrderConsumer")
            .unwrap(),
        "Sample-Orders-SubmitOrder"
    );
    // A prefix "Consumer" leaves a name: MassTransit checks what is left after the prefix.
    assert_eq!(
        F::kebab_case().prefix("Dev").consumer("Consumer").unwrap(),
        "dev"
    );
    // Batch consumers are consumers (`Consumer<T>()` of an `IConsumer<Batch<T>>`).
    assert_eq!(
        F::kebab_case()
            .consumer("Sample.AuditBatchConsumer")
            .unwrap(),
        "audit-batch"
    );
}

//! What `contracts check` finds in one message: its payload compared with the C# contract its
//! envelope's `messageType` names, the way a .NET consumer's System.Text.Json would read it
//! (MassTransit's options: case-insensitive names, unknown members ignored, no number read from
//! a string, `StringDecimalJsonConverter` reading strings and numbers).

use serde::Serialize;
use serde_json::{Map, Value};

use ferrybus_core::dotnet::{bytes, datetime, datetime_offset, decimal, timespan};

use super::model::{dotnet_name, Contract, EnumModel, Model, Shape};

/// How bad a finding is: errors make the command fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Severity {
    /// .NET reads it, as it is (a name differing only in case).
    Note,
    /// .NET reads it, but something is lost or defaulted (an unexpected or missing nullable
    /// member).
    Warning,
    /// .NET fails to read it or reads a default where a value was meant.
    Error,
}

/// What kind of drift.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Kind {
    /// No contract has any of the envelope's message types (or the body is no envelope).
    UnknownMessageType,
    /// A contract member is absent.
    MissingMember,
    /// A member no contract declares.
    UnexpectedMember,
    /// A value .NET cannot read as the member's type.
    WrongShape,
    /// A member name that matches only ignoring case.
    CaseOnly,
}

/// One finding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Finding {
    /// Where in the payload (`$.lines[0].sku`).
    pub(crate) path: String,
    /// What kind of drift.
    pub(crate) kind: Kind,
    /// How bad.
    pub(crate) severity: Severity,
    /// What exactly.
    pub(crate) detail: String,
}

/// The findings for the payload of a message of types `message_types` (`None` when the body is
/// not an envelope), and the contract it was bound to.
pub(crate) fn check<'m>(
    model: &'m Model,
    message_types: &[String],
    payload: Option<&Value>,
) -> (Option<&'m Contract>, Vec<Finding>) {
    let Some(payload) = payload else {
        return (
            None,
            vec![finding(
                "$",
                Kind::UnknownMessageType,
                Severity::Error,
                "the body is not a MassTransit envelope".to_owned(),
            )],
        );
    };
    let Some(contract) = message_types.iter().find_map(|urn| model.by_urn(urn)) else {
        let listed = if message_types.is_empty() {
            "none".to_owned()
        } else {
            message_types.join(", ")
        };
        return (
            None,
            vec![finding(
                "$",
                Kind::UnknownMessageType,
                Severity::Error,
                format!("no contract has any of its message types ({listed})"),
            )],
        );
    };
    let mut checker = Checker {
        model,
        findings: Vec::new(),
    };
    checker.object(contract, payload, "$");
    (Some(contract), checker.findings)
}

fn finding(path: &str, kind: Kind, severity: Severity, detail: String) -> Finding {
    Finding {
        path: path.to_owned(),
        kind,
        severity,
        detail,
    }
}

struct Checker<'m> {
    model: &'m Model,
    findings: Vec<Finding>,
}

impl Checker<'_> {
    fn push(&mut self, path: &str, kind: Kind, severity: Severity, detail: String) {
        self.findings.push(finding(path, kind, severity, detail));
    }

    fn wrong(&mut self, path: &str, detail: String) {
        self.push(path, Kind::WrongShape, Severity::Error, detail);
    }

    fn object(&mut self, contract: &Contract, value: &Value, path: &str) {
        let Value::Object(members) = value else {
            self.wrong(
                path,
                format!(
                    "{} where .NET expects a {} object",
                    kind_of(value),
                    contract.name
                ),
            );
            return;
        };
        for field in &contract.fields {
            let member_path = format!("{path}.{}", field.json_name);
            match lookup(members, &field.json_name) {
                Some((name, value)) => {
                    if name != field.json_name {
                        self.push(
                            &member_path,
                            Kind::CaseOnly,
                            Severity::Note,
                            format!("written as {name:?}; .NET reads names ignoring case"),
                        );
                    }
                    self.value(&field.shape, value, &member_path);
                }
                None => {
                    let nullable = matches!(field.shape, Shape::Nullable(_));
                    let severity = if nullable {
                        Severity::Warning
                    } else {
                        Severity::Error
                    };
                    let reads = if nullable {
                        "null"
                    } else {
                        "its default value"
                    };
                    self.push(
                        &member_path,
                        Kind::MissingMember,
                        severity,
                        format!(
                            "{}.{} ({}) is missing; .NET reads {reads}",
                            contract.name,
                            field.cs_name,
                            describe(self.model, &field.shape)
                        ),
                    );
                }
            }
        }
        for name in members.keys() {
            let known = contract
                .fields
                .iter()
                .any(|f| f.json_name.eq_ignore_ascii_case(name));
            if !known {
                self.push(
                    &format!("{path}.{name}"),
                    Kind::UnexpectedMember,
                    Severity::Warning,
                    format!("{} has no member {name}; .NET ignores it", contract.name),
                );
            }
        }
    }

    fn value(&mut self, shape: &Shape, value: &Value, path: &str) {
        if value.is_null() {
            if matches!(
                shape,
                Shape::String | Shape::Bytes | Shape::List(_) | Shape::Map(..) | Shape::Contract(_)
            ) {
                self.push(
                    path,
                    Kind::WrongShape,
                    Severity::Note,
                    format!(
                        "null for a non-nullable {}: .NET reads it, Rust types imported from the contract refuse it (declare it with `?`)",
                        describe(self.model, shape)
                    ),
                );
            } else if !is_reference(shape) {
                self.wrong(
                    path,
                    format!("null where .NET expects a {}", describe(self.model, shape)),
                );
            }
            return;
        }
        match shape {
            Shape::Nullable(inner) => self.value(inner, value, path),
            Shape::Any => {}
            Shape::String => self.string(value, path, "string", |_| true),
            Shape::Char => self.string(value, path, "char", |s| s.chars().count() == 1),
            Shape::Bool => {
                if !value.is_boolean() {
                    self.wrong(
                        path,
                        format!("{} where .NET expects a bool", kind_of(value)),
                    );
                }
            }
            Shape::Int(kind) => match value {
                Value::Number(n) => {
                    let fits = n
                        .as_i64()
                        .map(i128::from)
                        .or_else(|| n.as_u64().map(i128::from))
                        .is_some_and(|v| (kind.min..=kind.max).contains(&v));
                    if !fits {
                        self.wrong(path, format!("{n} does not fit a .NET {}", kind.dotnet));
                    }
                }
                other => self.wrong(
                    path,
                    format!(
                        "{} where .NET expects a number ({})",
                        kind_of(other),
                        kind.dotnet
                    ),
                ),
            },
            Shape::Float(_) => {
                if !value.is_number() {
                    self.wrong(
                        path,
                        format!(
                            "{} where .NET expects a number ({})",
                            kind_of(value),
                            dotnet_name(shape)
                        ),
                    );
                }
            }
            Shape::Decimal => match value {
                Value::Number(_) => self.push(
                    path,
                    Kind::WrongShape,
                    Severity::Note,
                    "a number where MassTransit writes a decimal as a string; .NET reads both"
                        .to_owned(),
                ),
                Value::String(s) if s.trim().is_empty() || decimal::parse_decimal(s).is_ok() => {}
                other => self.wrong(path, format!("{} is not a .NET decimal", shown(other))),
            },
            Shape::Guid => self.string(
                value,
                path,
                "Guid (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)",
                |s| s.len() == 36 && uuid::Uuid::try_parse(s).is_ok(),
            ),
            Shape::DateTime => self.string(value, path, "DateTime (ISO 8601)", |s| {
                datetime::parse_datetime(s).is_ok()
            }),
            Shape::DateTimeOffset => self.string(value, path, "DateTimeOffset (ISO 8601)", |s| {
                datetime_offset::parse_datetime_offset(s).is_ok()
            }),
            Shape::TimeSpan => {
                self.string(value, path, "TimeSpan ([-][d.]hh:mm:ss[.fffffff])", |s| {
                    timespan::signed::parse_timespan(s).is_ok()
                })
            }
            Shape::DateOnly => self.string(value, path, "DateOnly (yyyy-MM-dd)", |s| {
                chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok()
            }),
            Shape::TimeOnly => self.string(value, path, "TimeOnly (HH:mm:ss)", |s| {
                chrono::NaiveTime::parse_from_str(s, "%H:%M:%S%.f").is_ok()
            }),
            Shape::Bytes => self.string(value, path, "byte[] (base64)", |s| {
                bytes::parse_bytes(s).is_ok()
            }),
            Shape::Enum(i) => self.enumeration(&self.model.enums[*i], value, path),
            Shape::Contract(i) => {
                let contract = &self.model.contracts[*i];
                self.object(contract, value, path);
            }
            Shape::List(element) => match value {
                Value::Array(items) => {
                    for (i, item) in items.iter().enumerate() {
                        self.value(element, item, &format!("{path}[{i}]"));
                    }
                }
                other => self.wrong(
                    path,
                    format!("{} where .NET expects an array", kind_of(other)),
                ),
            },
            Shape::Map(key, element) => match value {
                Value::Object(entries) => {
                    for (name, item) in entries {
                        let key_ok = match **key {
                            Shape::Guid => name.len() == 36 && uuid::Uuid::try_parse(name).is_ok(),
                            Shape::Int(kind) => name
                                .parse::<i128>()
                                .is_ok_and(|v| (kind.min..=kind.max).contains(&v)),
                            // Written as the member name; a number is read too.
                            Shape::Enum(i) => self.model.enums[i].members.iter().any(|m| {
                                m.name == *name || name.parse::<i128>().is_ok_and(|v| v == m.value)
                            }),
                            _ => true,
                        };
                        let item_path = format!("{path}[{name:?}]");
                        if !key_ok {
                            self.wrong(
                                &item_path,
                                format!("key {name:?} is not a .NET {}", dotnet_name(key)),
                            );
                        }
                        self.value(element, item, &item_path);
                    }
                }
                other => self.wrong(
                    path,
                    format!(
                        "{} where .NET expects an object (a dictionary)",
                        kind_of(other)
                    ),
                ),
            },
        }
    }

    fn string(&mut self, value: &Value, path: &str, what: &str, valid: impl Fn(&str) -> bool) {
        match value {
            Value::String(s) if valid(s) => {}
            Value::String(s) => self.wrong(path, format!("{s:?} is not a .NET {what}")),
            other => {
                let what = if what == "string" {
                    String::new()
                } else {
                    format!(" ({what})")
                };
                self.wrong(
                    path,
                    format!("{} where .NET wants a string{what}", kind_of(other)),
                );
            }
        }
    }

    fn enumeration(&mut self, model: &EnumModel, value: &Value, path: &str) {
        match value {
            Value::String(s) if model.string => {
                if !model.members.iter().any(|m| m.json_name.eq_ignore_ascii_case(s)) {
                    self.wrong(path, format!("{s:?} is no member of enum {}", model.name));
                }
            }
            Value::String(s) => self.wrong(
                path,
                format!(
                    "enum {} as a string ({s:?}) where .NET expects a number (it has no JsonStringEnumConverter)",
                    model.name
                ),
            ),
            Value::Number(n) => {
                let v = n.as_i64().map(i128::from).or_else(|| n.as_u64().map(i128::from));
                match v {
                    Some(v) if (model.underlying.min..=model.underlying.max).contains(&v) => {
                        if !model.flags && !model.members.iter().any(|m| m.value == v) {
                            self.push(
                                path,
                                Kind::WrongShape,
                                Severity::Warning,
                                format!("{v} is no member of enum {}; .NET reads it anyway", model.name),
                            );
                        }
                    }
                    _ => self.wrong(
                        path,
                        format!("{n} does not fit enum {} ({})", model.name, model.underlying.dotnet),
                    ),
                }
            }
            other => self.wrong(
                path,
                format!("{} where .NET expects enum {}", kind_of(other), model.name),
            ),
        }
    }
}

/// The member named `name`, exactly or else ignoring case (as .NET finds it).
fn lookup<'v>(members: &'v Map<String, Value>, name: &str) -> Option<(&'v str, &'v Value)> {
    members
        .get_key_value(name)
        .or_else(|| members.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)))
        .map(|(k, v)| (k.as_str(), v))
}

/// Whether .NET reads `null` for this shape without failing (reference types and nullables).
fn is_reference(shape: &Shape) -> bool {
    matches!(
        shape,
        Shape::Nullable(_)
            | Shape::String
            | Shape::Bytes
            | Shape::Any
            | Shape::List(_)
            | Shape::Map(..)
            | Shape::Contract(_)
            // StringDecimalJsonConverter reads null as 0.
            | Shape::Decimal
    )
}

fn describe(model: &Model, shape: &Shape) -> String {
    match shape {
        Shape::Enum(i) => format!("enum {}", model.enums[*i].name),
        Shape::Contract(i) => model.contracts[*i].name.clone(),
        Shape::List(inner) => format!("list of {}", describe(model, inner)),
        Shape::Map(_, inner) => format!("dictionary of {}", describe(model, inner)),
        Shape::Nullable(inner) => format!("{}?", describe(model, inner)),
        other => dotnet_name(other).to_owned(),
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn shown(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 40 {
        format!("{}…", text.chars().take(40).collect::<String>())
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::model::build;
    use super::super::parse::parse_file;
    use super::*;

    fn model() -> Model {
        let (model, diagnostics) = build(
            &parse_file(
                "T.cs",
                r#"namespace Shop;
public enum Status { Open = 1, Closed = 2 }
[JsonConverter(typeof(JsonStringEnumConverter))] public enum Carrier { Dhl, Ups }
public record Line(string Sku, int Quantity);
public record Order(Guid OrderId, decimal Total, DateTime At, Status Status, Carrier Carrier,
    List<Line> Lines, string? Note, long Points);
"#,
            )
            .unwrap(),
        );
        assert_eq!(diagnostics, []);
        model
    }

    fn findings(payload: Value) -> Vec<(String, Kind, Severity)> {
        let model = model();
        let (bound, findings) = check(
            &model,
            &["urn:message:Shop:Order".to_owned()],
            Some(&payload),
        );
        assert_eq!(bound.unwrap().name, "Order");
        findings
            .into_iter()
            .map(|f| (f.path, f.kind, f.severity))
            .collect()
    }

    #[test]
    fn a_payload_as_dotnet_writes_it_has_no_finding() {
        let found = findings(json!({
            "orderId": "9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0", "total": "12.00",
            "at": "2025-05-24T18:39:56.3305069Z", "status": 1, "carrier": "Ups",
            "lines": [{"sku": "B-1", "quantity": 2}], "note": null, "points": 9007199254740993_i64
        }));
        assert_eq!(found, []);
    }

    #[test]
    fn finds_each_kind_of_drift() {
        let found = findings(json!({
            "OrderId": "not-a-guid", "total": 12.5, "at": "yesterday", "status": "Open",
            "carrier": "Fedex", "lines": [{"sku": 7, "quantity": "2", "color": "red"}],
            "points": 1, "coupon": "X"
        }));
        let expected = [
            ("$.orderId", Kind::CaseOnly, Severity::Note),
            ("$.orderId", Kind::WrongShape, Severity::Error),
            ("$.total", Kind::WrongShape, Severity::Note),
            ("$.at", Kind::WrongShape, Severity::Error),
            ("$.status", Kind::WrongShape, Severity::Error),
            ("$.carrier", Kind::WrongShape, Severity::Error),
            ("$.lines[0].sku", Kind::WrongShape, Severity::Error),
            ("$.lines[0].quantity", Kind::WrongShape, Severity::Error),
            (
                "$.lines[0].color",
                Kind::UnexpectedMember,
                Severity::Warning,
            ),
            ("$.note", Kind::MissingMember, Severity::Warning),
            ("$.coupon", Kind::UnexpectedMember, Severity::Warning),
        ];
        let found: Vec<_> = found.iter().map(|(p, k, s)| (p.as_str(), *k, *s)).collect();
        assert_eq!(found, expected);
    }

    #[test]
    fn an_unknown_type_or_body_is_an_error() {
        let model = model();
        let (bound, found) = check(
            &model,
            &["urn:message:Shop:Refund".to_owned()],
            Some(&json!({})),
        );
        assert!(bound.is_none());
        assert_eq!(found[0].kind, Kind::UnknownMessageType);
        assert!(found[0].detail.contains("urn:message:Shop:Refund"));
        let (_, found) = check(&model, &[], None);
        assert_eq!(found[0].severity, Severity::Error);
    }

    #[test]
    fn enum_dictionary_keys_are_member_names_or_numbers() {
        let (model, diagnostics) = build(
            &parse_file(
                "T.cs",
                "namespace Shop;\npublic enum Status { Open = 1, Closed = 2 }\npublic record Tally(Dictionary<Status, int> ByStatus);\n",
            )
            .unwrap(),
        );
        assert_eq!(diagnostics, []);
        let types = ["urn:message:Shop:Tally".to_owned()];
        let payload = json!({"byStatus": {"Open": 1, "2": 3, "Shipped": 4, "7": 5}});
        let (_, found) = check(&model, &types, Some(&payload));
        let found: Vec<_> = found.iter().map(|f| (f.path.as_str(), f.kind)).collect();
        assert_eq!(
            found,
            [
                ("$.byStatus[\"Shipped\"]", Kind::WrongShape),
                ("$.byStatus[\"7\"]", Kind::WrongShape),
            ]
        );
    }
}

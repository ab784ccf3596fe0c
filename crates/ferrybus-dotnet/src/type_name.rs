//! .NET type names and the MassTransit names derived from them.

use std::fmt;

/// The prefix of every MassTransit message URN.
pub const URN_PREFIX: &str = "urn:message:";

/// A .NET type name as MassTransit sees it: a namespace, a (possibly nested) type name and
/// generic arguments.
///
/// Nested types are written with `+` (`Outer+Inner`), exactly as .NET and MassTransit do. The generic
/// arity marker (`` `1 ``) is never part of the name.
///
/// ```
/// use ferrybus_dotnet::TypeName;
///
/// let order = TypeName::new("Contracts.Events", "OrderCreated");
/// assert_eq!(order.urn(), "urn:message:Contracts.Events:OrderCreated");
/// assert_eq!(order.entity_name(), "Contracts.Events:OrderCreated");
///
/// let fault = TypeName::generic("MassTransit", "Fault", vec![order]);
/// assert_eq!(fault.urn(), "urn:message:MassTransit:Fault[[Contracts.Events:OrderCreated]]");
/// assert_eq!(fault.entity_name(), "MassTransit:Fault--Contracts.Events:OrderCreated--");
/// assert_eq!(fault.dotnet_name(), "MassTransit.Fault<Contracts.Events.OrderCreated>");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TypeName {
    namespace: String,
    name: String,
    arguments: Vec<TypeName>,
}

/// A string that is not a MassTransit type name (`Namespace:Type`, optionally with `[[...]]` arguments).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid message type name {input:?}: {reason}")]
pub struct ParseTypeNameError {
    input: String,
    reason: &'static str,
}

impl ParseTypeNameError {
    /// Why the text is not a type name, without the text itself.
    pub fn reason(&self) -> &'static str {
        self.reason
    }
}

impl TypeName {
    /// A non-generic type: `TypeName::new("Ns", "Outer+Inner")`.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self::generic(namespace, name, Vec::new())
    }

    /// A closed generic type such as `Fault<T>`.
    pub fn generic(
        namespace: impl Into<String>,
        name: impl Into<String>,
        arguments: Vec<TypeName>,
    ) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            arguments,
        }
    }

    /// Parses `Ns:Type`, `Ns:Outer+Inner`, `Ns:G[[Ns:A],[Ns:B]]`, with or without the
    /// `urn:message:` prefix.
    ///
    /// ```
    /// use ferrybus_dotnet::TypeName;
    /// let t = TypeName::parse("urn:message:MassTransit:Fault[[Contracts:OrderPlaced]]").unwrap();
    /// assert_eq!(t.name(), "Fault");
    /// assert_eq!(t.arguments()[0].namespace(), "Contracts");
    /// ```
    pub fn parse(input: &str) -> Result<Self, ParseTypeNameError> {
        let body = strip_prefix_ignore_case(input, URN_PREFIX).unwrap_or(input);
        let (name, rest) = parse_type(body).map_err(|reason| ParseTypeNameError {
            input: input.to_owned(),
            reason,
        })?;
        if !rest.is_empty() {
            return Err(ParseTypeNameError {
                input: input.to_owned(),
                reason: "unexpected text after the type name",
            });
        }
        Ok(name)
    }

    /// The .NET namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The type name within the namespace (`Outer+Inner` for nested types).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The generic arguments (empty for non-generic types).
    pub fn arguments(&self) -> &[TypeName] {
        &self.arguments
    }

    /// The URN body without the `urn:message:` prefix: `Ns:Name[[Ns:Arg]]`.
    pub fn urn_body(&self) -> String {
        let mut out = format!("{}:{}", self.namespace, self.name);
        if !self.arguments.is_empty() {
            let args: Vec<String> = self
                .arguments
                .iter()
                .map(|a| format!("[{}]", a.urn_body()))
                .collect();
            out.push('[');
            out.push_str(&args.join(","));
            out.push(']');
        }
        out
    }

    /// The message URN, `urn:message:Ns:Name` (masstransit-wire §2).
    pub fn urn(&self) -> String {
        format!("{URN_PREFIX}{}", self.urn_body())
    }

    /// The RabbitMQ exchange name MassTransit's entity-name formatter gives this type:
    /// `Ns:Outer-Inner`, `MassTransit:Fault--Ns:T--`, `Ns:Pair--A::B--` (masstransit-wire §4.1).
    pub fn entity_name(&self) -> String {
        let mut out = format!("{}:{}", self.namespace, self.name.replace('+', "-"));
        if !self.arguments.is_empty() {
            let args: Vec<String> = self
                .arguments
                .iter()
                .map(|a| {
                    if a.namespace == self.namespace {
                        a.entity_name_without_namespace()
                    } else {
                        a.entity_name()
                    }
                })
                .collect();
            out.push_str("--");
            out.push_str(&args.join("::"));
            out.push_str("--");
        }
        out
    }

    fn entity_name_without_namespace(&self) -> String {
        let full = self.entity_name();
        full[self.namespace.len() + 1..].to_owned()
    }

    /// The .NET "short" type name MassTransit uses in `MT-Fault-*` headers and in consumer ids:
    /// `Ns.Outer+Inner`, `Ns.G<Ns.A,Ns.B>`.
    pub fn dotnet_name(&self) -> String {
        let mut out = format!("{}.{}", self.namespace, self.name);
        if !self.arguments.is_empty() {
            let args: Vec<String> = self.arguments.iter().map(TypeName::dotnet_name).collect();
            out.push('<');
            out.push_str(&args.join(","));
            out.push('>');
        }
        out
    }
}

impl fmt::Display for TypeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.urn_body())
    }
}

fn strip_prefix_ignore_case<'a>(input: &'a str, prefix: &str) -> Option<&'a str> {
    let head = input.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &input[prefix.len()..])
}

/// Parses one type at the start of `input`, returning it and the unparsed rest.
fn parse_type(input: &str) -> Result<(TypeName, &str), &'static str> {
    let end = input.find(['[', ']', ',']).unwrap_or(input.len());
    let head = &input[..end];
    let (namespace, name) = head
        .rsplit_once(':')
        .ok_or("it has no `:` between namespace and type")?;
    if namespace.is_empty() || name.is_empty() {
        return Err("namespace and type name must not be empty");
    }
    let mut rest = &input[end..];
    let mut arguments = Vec::new();
    if let Some(after) = rest.strip_prefix("[[") {
        rest = after;
        loop {
            let (arg, after) = parse_type(rest)?;
            arguments.push(arg);
            rest = after
                .strip_prefix(']')
                .ok_or("expected `]` after a generic argument")?;
            if let Some(after) = rest.strip_prefix(",[") {
                rest = after;
            } else {
                rest = rest
                    .strip_prefix(']')
                    .ok_or("expected `]]` closing the arguments")?;
                break;
            }
        }
    }
    Ok((TypeName::generic(namespace, name, arguments), rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_type_names() {
        let t = TypeName::new("Contracts.Events", "OrderCreated");
        assert_eq!(t.urn(), "urn:message:Contracts.Events:OrderCreated");
        assert_eq!(t.entity_name(), "Contracts.Events:OrderCreated");
        assert_eq!(t.dotnet_name(), "Contracts.Events.OrderCreated");
    }

    #[test]
    fn nested_type_names() {
        let t = TypeName::new("MassTransit.Tests", "MessageUrnSpecs+X");
        assert_eq!(t.urn(), "urn:message:MassTransit.Tests:MessageUrnSpecs+X");
        assert_eq!(t.entity_name(), "MassTransit.Tests:MessageUrnSpecs-X");
        assert_eq!(t.dotnet_name(), "MassTransit.Tests.MessageUrnSpecs+X");
    }

    #[test]
    fn generic_type_names() {
        let ping = TypeName::new("MassTransit.TestFramework.Messages", "PingMessage");
        let g = TypeName::generic("MassTransit.Tests", "G", vec![ping]);
        assert_eq!(
            g.urn(),
            "urn:message:MassTransit.Tests:G[[MassTransit.TestFramework.Messages:PingMessage]]"
        );
        assert_eq!(
            g.entity_name(),
            "MassTransit.Tests:G--MassTransit.TestFramework.Messages:PingMessage--"
        );
    }

    #[test]
    fn generic_arguments_in_the_same_namespace_drop_it() {
        let pair = TypeName::generic(
            "Ns",
            "Pair",
            vec![TypeName::new("Ns", "A"), TypeName::new("Ns", "B")],
        );
        assert_eq!(pair.entity_name(), "Ns:Pair--A::B--");
        assert_eq!(pair.urn(), "urn:message:Ns:Pair[[Ns:A],[Ns:B]]");
        assert_eq!(pair.dotnet_name(), "Ns.Pair<Ns.A,Ns.B>");
    }

    #[test]
    fn parse_round_trips() {
        for s in [
            "urn:message:Contracts.Events:OrderCreated",
            "urn:message:MassTransit:Fault[[DOMAIN.Messages:AcceptMessage]]",
            "urn:message:Ns:Pair[[Ns:A],[Other:B+C]]",
            "urn:message:MassTransit:Fault[[MassTransit:Fault[[Ns:T]]]]",
        ] {
            assert_eq!(TypeName::parse(s).unwrap().urn(), s);
        }
        assert_eq!(
            TypeName::parse("URN:MESSAGE:Ns:T").unwrap().urn(),
            "urn:message:Ns:T"
        );
    }

    #[test]
    fn parse_rejects_garbage() {
        assert!(TypeName::parse("NoNamespace").is_err());
        assert!(TypeName::parse("Ns:G[[Ns:A]").is_err());
        assert!(TypeName::parse(":T").is_err());
    }
}

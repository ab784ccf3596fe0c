//! The C# → .NET-wire mapping: parsed [`Declaration`]s resolved into [`Model`] — each type's
//! MassTransit identity (namespace, `Outer+Inner` name, `[MessageUrn]`, `[EntityName]`, the base
//! classes and interfaces it advertises, as `MessageTypeCache<T>.MessageTypes` lists them in
//! `src/MassTransit.Abstractions/MessageTypeCache.cs`) and each property's JSON name and
//! [`Shape`] as MassTransit's System.Text.Json options write it
//! (`src/MassTransit/Serialization/SystemTextJsonMessageSerializer.cs`: camelCase names,
//! `StringDecimalJsonConverter`, no enum converter). What cannot be mapped becomes a
//! [`Diagnostic`] with its file and line, never a guess.

use std::collections::HashMap;

use super::parse::Location;
use super::parse::{Attribute, DeclKind, Declaration, TypeRef};

/// Something the import cannot map, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Diagnostic {
    /// Where.
    pub(crate) location: Location,
    /// Why.
    pub(crate) message: String,
}

/// A .NET integer type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IntKind {
    /// The Rust type (`i32`).
    pub(crate) rust: &'static str,
    /// The .NET keyword (`int`).
    pub(crate) dotnet: &'static str,
    /// Smallest value.
    pub(crate) min: i128,
    /// Largest value.
    pub(crate) max: i128,
}

const fn int(rust: &'static str, dotnet: &'static str, min: i128, max: i128) -> IntKind {
    IntKind {
        rust,
        dotnet,
        min,
        max,
    }
}

const INTS: [(&str, &str, IntKind); 8] = [
    ("byte", "Byte", int("u8", "byte", 0, u8::MAX as i128)),
    (
        "sbyte",
        "SByte",
        int("i8", "sbyte", i8::MIN as i128, i8::MAX as i128),
    ),
    (
        "short",
        "Int16",
        int("i16", "short", i16::MIN as i128, i16::MAX as i128),
    ),
    (
        "ushort",
        "UInt16",
        int("u16", "ushort", 0, u16::MAX as i128),
    ),
    (
        "int",
        "Int32",
        int("i32", "int", i32::MIN as i128, i32::MAX as i128),
    ),
    ("uint", "UInt32", int("u32", "uint", 0, u32::MAX as i128)),
    (
        "long",
        "Int64",
        int("i64", "long", i64::MIN as i128, i64::MAX as i128),
    ),
    ("ulong", "UInt64", int("u64", "ulong", 0, u64::MAX as i128)),
];

/// The JSON shape of a .NET type as System.Text.Json writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// `string`, `Uri`: a JSON string.
    String,
    /// `char`: a one-character string.
    Char,
    /// `bool`.
    Bool,
    /// An integer type: a JSON number (a `long` keeps every digit, beyond 2^53 too).
    Int(IntKind),
    /// `float` (`true`) or `double`.
    Float(bool),
    /// `decimal`: a string (`StringDecimalJsonConverter`), read from a number too.
    Decimal,
    /// `Guid`: a string in `D` form.
    Guid,
    /// `DateTime`: an ISO 8601 string.
    DateTime,
    /// `DateTimeOffset`: an ISO 8601 string with an offset.
    DateTimeOffset,
    /// `TimeSpan`: `[-][d.]hh:mm:ss[.fffffff]`.
    TimeSpan,
    /// `DateOnly`: `yyyy-MM-dd`.
    DateOnly,
    /// `TimeOnly`: `HH:mm:ss[.fffffff]`.
    TimeOnly,
    /// `byte[]`: a base64 string.
    Bytes,
    /// `object`, `JsonElement`, `JsonNode`: any JSON.
    Any,
    /// A declared enum (index into [`Model::enums`]).
    Enum(usize),
    /// A declared record, class, struct or interface (index into [`Model::contracts`]).
    Contract(usize),
    /// Arrays, lists, sets, enumerables: a JSON array.
    List(Box<Shape>),
    /// Dictionaries: a JSON object (keys as written, no naming policy).
    Map(Box<Shape>, Box<Shape>),
    /// `T?`: the value or `null`.
    Nullable(Box<Shape>),
}

impl Shape {
    /// The name of ferrybus's .NET serde helper a value of this shape needs (its Rust type's
    /// own serde form differs from .NET's): the module of `ferrybus::dotnet` and its adapter in
    /// `ferrybus::dotnet::as_dotnet`.
    pub(crate) fn helper(&self) -> Option<(&'static str, &'static str)> {
        Some(match self {
            Shape::Decimal => ("decimal", "Decimal"),
            Shape::DateTime => ("datetime", "DateTime"),
            Shape::DateTimeOffset => ("datetime_offset", "DateTimeOffset"),
            Shape::TimeSpan => ("timespan::signed", "TimeSpan"),
            Shape::Bytes => ("bytes", "Bytes"),
            _ => return None,
        })
    }
}

/// A property of a contract.
#[derive(Clone, Debug)]
pub(crate) struct Field {
    /// The C# name (`OrderId`).
    pub(crate) cs_name: String,
    /// The JSON name (`orderId`, or `[JsonPropertyName]`'s).
    pub(crate) json_name: String,
    /// Its shape.
    pub(crate) shape: Shape,
    /// Where it is declared.
    pub(crate) location: Location,
}

/// A record, class, struct or interface.
#[derive(Clone, Debug)]
pub(crate) struct Contract {
    /// The C# simple name, which is also the Rust item's name.
    pub(crate) name: String,
    /// The MassTransit type name (`Outer+Inner`).
    pub(crate) type_name: String,
    /// The namespace; a type without one is no valid message type (it is only rendered as data).
    pub(crate) namespace: Option<String>,
    /// `[MessageUrn]`.
    pub(crate) urn: Option<String>,
    /// `[EntityName]`.
    pub(crate) entity_name: Option<String>,
    /// `[FaultEntityName]`.
    pub(crate) fault_entity_name: Option<String>,
    /// The advertised base classes and interfaces, as `Namespace:Name`, nearest base first.
    pub(crate) implements: Vec<String>,
    /// Its properties, inherited first.
    pub(crate) fields: Vec<Field>,
    /// Its `<summary>`.
    pub(crate) summary: Option<String>,
    /// Where it is declared.
    pub(crate) location: Location,
}

impl Contract {
    /// The URN .NET puts in `messageType` for it.
    pub(crate) fn message_urn(&self) -> Option<String> {
        match (&self.urn, &self.namespace) {
            (Some(urn), _) if urn.starts_with("urn:") => Some(urn.clone()),
            (Some(urn), _) => Some(format!("urn:message:{urn}")),
            (None, Some(namespace)) => Some(format!("urn:message:{namespace}:{}", self.type_name)),
            (None, None) => None,
        }
    }
}

/// An enum member.
#[derive(Clone, Debug)]
pub(crate) struct Member {
    /// The C# name.
    pub(crate) name: String,
    /// Its value.
    pub(crate) value: i128,
    /// How a string converter writes it (the name, or `[JsonStringEnumMemberName]`'s).
    pub(crate) json_name: String,
}

/// An enum.
#[derive(Clone, Debug)]
pub(crate) struct EnumModel {
    /// The C# simple name, also the Rust item's name.
    pub(crate) name: String,
    /// The underlying integer type.
    pub(crate) underlying: IntKind,
    /// `[Flags]`: any combination of bits is a value.
    pub(crate) flags: bool,
    /// `[JsonConverter(typeof(JsonStringEnumConverter))]`: written as member names.
    pub(crate) string: bool,
    /// The members.
    pub(crate) members: Vec<Member>,
    /// Its `<summary>`.
    pub(crate) summary: Option<String>,
    /// Where it is declared.
    pub(crate) location: Location,
}

/// One Rust item of the output, in source order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Item {
    /// [`Model::contracts`]`[i]`.
    Contract(usize),
    /// [`Model::enums`]`[i]`.
    Enum(usize),
}

/// Every type of a set of C# files, mapped.
#[derive(Clone, Debug, Default)]
pub(crate) struct Model {
    /// The records, classes, structs and interfaces.
    pub(crate) contracts: Vec<Contract>,
    /// The enums.
    pub(crate) enums: Vec<EnumModel>,
    /// The output's items in source order.
    pub(crate) items: Vec<Item>,
}

impl Model {
    /// The contract whose message URN is `urn`.
    pub(crate) fn by_urn(&self, urn: &str) -> Option<&Contract> {
        self.contracts
            .iter()
            .find(|c| c.message_urn().is_some_and(|u| u.eq_ignore_ascii_case(urn)))
    }
}

/// MassTransit's generic interfaces that are no message types (`CheckIfValidMessageType`).
const NOT_MESSAGE_TYPES: [&str; 5] = [
    "CorrelatedBy",
    "InitiatedBy",
    "Orchestrates",
    "Observes",
    "InitiatedByOrOrchestrates",
];

/// System types a contract may derive from or implement; no message types.
const SYSTEM_BASES: [&str; 8] = [
    "object",
    "Object",
    "ValueType",
    "IEquatable",
    "IComparable",
    "IDisposable",
    "ICloneable",
    "IFormattable",
];

/// Maps parsed declarations; the model holds what could be mapped, the diagnostics the rest.
pub(crate) fn build(declarations: &[Declaration]) -> (Model, Vec<Diagnostic>) {
    let mut builder = Builder {
        declarations,
        by_name: HashMap::new(),
        index: vec![None; declarations.len()],
        diagnostics: Vec::new(),
        model: Model::default(),
    };
    builder.index_names();
    builder.map_all();
    (builder.model, builder.diagnostics)
}

struct Builder<'a> {
    declarations: &'a [Declaration],
    /// Simple name → declaration.
    by_name: HashMap<&'a str, usize>,
    /// Declaration → its item.
    index: Vec<Option<Item>>,
    diagnostics: Vec<Diagnostic>,
    model: Model,
}

impl<'a> Builder<'a> {
    fn diagnose(&mut self, location: &Location, message: impl Into<String>) {
        self.diagnostics.push(Diagnostic {
            location: location.clone(),
            message: message.into(),
        });
    }

    /// Names every declaration and its future item (contracts and enums numbered in order).
    fn index_names(&mut self) {
        let (mut contracts, mut enums) = (0, 0);
        for (i, declaration) in self.declarations.iter().enumerate() {
            if let Some(&first) = self.by_name.get(declaration.name.as_str()) {
                let first = self.declarations[first].location.clone();
                self.diagnose(
                    &declaration.location,
                    format!(
                        "type {} is declared twice (first at {first}): each C# type becomes a Rust item of the same name",
                        declaration.name
                    ),
                );
                continue;
            }
            if declaration.is_static {
                // A static class only holds nested types.
                continue;
            }
            if declaration.generic {
                self.diagnose(
                    &declaration.location,
                    format!(
                        "{} is generic: a message type's identity cannot depend on type parameters",
                        declaration.name
                    ),
                );
                continue;
            }
            self.by_name.insert(&declaration.name, i);
            self.index[i] = Some(if declaration.kind == DeclKind::Enum {
                enums += 1;
                Item::Enum(enums - 1)
            } else {
                contracts += 1;
                Item::Contract(contracts - 1)
            });
        }
    }

    fn map_all(&mut self) {
        for i in 0..self.declarations.len() {
            let Some(item) = self.index[i] else { continue };
            let declaration = &self.declarations[i];
            match item {
                Item::Enum(_) => {
                    let model = self.map_enum(declaration);
                    self.model.enums.push(model);
                }
                Item::Contract(_) => {
                    let contract = self.map_contract(declaration);
                    self.model.contracts.push(contract);
                }
            }
            self.model.items.push(item);
        }
    }

    fn map_enum(&mut self, declaration: &'a Declaration) -> EnumModel {
        let underlying = match declaration.bases.first() {
            Some(TypeRef::Named { name, args }) if args.is_empty() => int_kind(name),
            None => int_kind("int"),
            Some(_) => None,
        };
        let underlying = underlying.unwrap_or_else(|| {
            self.diagnose(
                &declaration.location,
                format!("enum {}: unknown underlying type", declaration.name),
            );
            int_kind("int").expect("int is an integer type")
        });
        let mut members = Vec::new();
        for member in &declaration.members {
            match &member.value {
                Some(Ok(value)) if (underlying.min..=underlying.max).contains(value) => {
                    let json_name = attribute(&member.attributes, "JsonStringEnumMemberName")
                        .and_then(|a| a.args.first().cloned())
                        .unwrap_or_else(|| member.name.clone());
                    members.push(Member {
                        name: member.name.clone(),
                        value: *value,
                        json_name,
                    });
                }
                Some(Ok(value)) => self.diagnose(
                    &member.location,
                    format!(
                        "{}.{} = {value} does not fit a {}",
                        declaration.name, member.name, underlying.dotnet
                    ),
                ),
                Some(Err(text)) => self.diagnose(
                    &member.location,
                    format!(
                        "cannot evaluate the value of {}.{} (`{text}`)",
                        declaration.name, member.name
                    ),
                ),
                None => self.diagnose(
                    &member.location,
                    format!(
                        "cannot tell the value of {}.{}",
                        declaration.name, member.name
                    ),
                ),
            }
        }
        EnumModel {
            name: declaration.name.clone(),
            underlying,
            flags: attribute(&declaration.attributes, "Flags").is_some(),
            string: names_string_converter(&declaration.attributes),
            members,
            summary: declaration.summary.clone(),
            location: declaration.location.clone(),
        }
    }

    fn map_contract(&mut self, declaration: &'a Declaration) -> Contract {
        let (base_classes, interfaces) = self.ancestors(declaration);
        let namespace = declaration.namespace.clone().filter(|n| !n.is_empty());
        let mut implements = Vec::new();
        for &i in base_classes.iter().chain(&interfaces) {
            let ancestor = &self.declarations[i];
            match &ancestor.namespace {
                Some(ns) if !ns.is_empty() => {
                    if attribute(&ancestor.attributes, "MessageUrn").is_some() {
                        self.diagnose(
                            &ancestor.location,
                            format!(
                                "{} has [MessageUrn] and is advertised by {}: ferrybus advertises base types by type name only",
                                ancestor.name, declaration.name
                            ),
                        );
                    }
                    implements.push(format!("{ns}:{}", type_name(ancestor)));
                }
                // Without a namespace, MassTransit does not advertise it either.
                _ => {}
            }
        }
        let mut fields: Vec<Field> = Vec::new();
        // Inherited properties first: the base class chain from the root, or an interface's
        // base interfaces.
        let mut sources: Vec<usize> = base_classes.iter().rev().copied().collect();
        if declaration.kind == DeclKind::Interface {
            sources.extend(interfaces.iter().rev().copied());
        }
        for source in sources
            .into_iter()
            .map(|i| &self.declarations[i])
            .chain([declaration])
        {
            for property in &source.properties {
                let Some(field) = self.map_property(source, property) else {
                    continue;
                };
                fields.retain(|f| f.cs_name != field.cs_name);
                fields.push(field);
            }
        }
        let mut rust_names: Vec<(String, &str)> = Vec::new();
        for field in &fields {
            let rust = field_name(&field.cs_name);
            if let Some((_, other)) = rust_names.iter().find(|(r, _)| *r == rust) {
                self.diagnose(
                    &field.location,
                    format!(
                        "{}.{} and {}.{other} would both be the Rust field {rust}",
                        declaration.name, field.cs_name, declaration.name
                    ),
                );
            }
            rust_names.push((rust, &field.cs_name));
        }
        let urn = attribute(&declaration.attributes, "MessageUrn")
            .and_then(|a| self.message_urn(declaration, a));
        Contract {
            name: declaration.name.clone(),
            type_name: type_name(declaration),
            namespace,
            urn,
            entity_name: attribute(&declaration.attributes, "EntityName")
                .and_then(|a| a.args.first().cloned()),
            fault_entity_name: attribute(&declaration.attributes, "FaultEntityName")
                .and_then(|a| a.args.first().cloned()),
            implements,
            fields,
            summary: declaration.summary.clone(),
            location: declaration.location.clone(),
        }
    }

    /// The URN of `[MessageUrn(urn, useDefaultPrefix)]` as ferrybus's `urn = …` takes it: the
    /// value, prefixed with `urn:message:` by ferrybus unless it starts with `urn:`. MassTransit
    /// (`src/MassTransit.Abstractions/Attributes/MessageUrnAttribute.cs`, v8.5.8) refuses a value
    /// with the default prefix and uses one without `useDefaultPrefix` as given.
    fn message_urn(&mut self, declaration: &Declaration, urn: &Attribute) -> Option<String> {
        let value = urn.args.first()?.clone();
        let prefixed = !urn
            .args
            .get(1)
            .is_some_and(|flag| flag.trim().ends_with("false"));
        let problem = if value.starts_with(ferrybus_core::message::URN_PREFIX) {
            Some("MassTransit refuses a value that starts with urn:message:")
        } else if prefixed && value.starts_with("urn:") {
            Some("ferrybus would not prefix a value that starts with urn:")
        } else if !prefixed && !value.starts_with("urn:") {
            Some("without the default prefix, ferrybus takes only a URN that starts with urn:")
        } else {
            None
        };
        if let Some(problem) = problem {
            self.diagnose(
                &declaration.location,
                format!("[MessageUrn({value:?})] of {}: {problem}", declaration.name),
            );
            return None;
        }
        Some(value)
    }

    /// The base class chain (nearest first) and the interfaces (own in order, then theirs,
    /// then those of the base classes), deduplicated; unknown ones are diagnosed.
    fn ancestors(&mut self, declaration: &'a Declaration) -> (Vec<usize>, Vec<usize>) {
        let mut classes = Vec::new();
        let mut interfaces = Vec::new();
        let mut pending: Vec<&'a Declaration> = vec![declaration];
        let mut interface_queue: Vec<usize> = Vec::new();
        while let Some(current) = pending.pop() {
            for (position, base) in current.bases.iter().enumerate() {
                let TypeRef::Named { name, args } = base else {
                    self.diagnose(
                        &current.location,
                        format!("{}: cannot read base type {base:?}", current.name),
                    );
                    continue;
                };
                if SYSTEM_BASES.contains(&name.as_str())
                    || (!args.is_empty() && NOT_MESSAGE_TYPES.contains(&name.as_str()))
                {
                    continue;
                }
                let known = self
                    .by_name
                    .get(name.as_str())
                    .copied()
                    .filter(|_| args.is_empty());
                match known.map(|i| (i, self.declarations[i].kind)) {
                    Some((i, DeclKind::Interface)) => {
                        if !interfaces.contains(&i) {
                            interfaces.push(i);
                            interface_queue.push(i);
                        }
                    }
                    Some((i, DeclKind::Class | DeclKind::Record))
                        if position == 0 && current.kind != DeclKind::Interface =>
                    {
                        if !classes.contains(&i) && i != self.by_name[declaration.name.as_str()] {
                            classes.push(i);
                            pending.push(&self.declarations[i]);
                        }
                    }
                    Some(_) => self.diagnose(
                        &current.location,
                        format!(
                            "{}: base type {name} is neither a base class nor an interface",
                            current.name
                        ),
                    ),
                    None => {
                        let shown = if args.is_empty() {
                            name.clone()
                        } else {
                            format!("{name}<…>")
                        };
                        self.diagnose(
                            &current.location,
                            format!(
                                "{}: base type {shown} is not declared in the given files, so its URN and members cannot be known (add the file that declares it)",
                                current.name
                            ),
                        );
                    }
                }
            }
            // Base interfaces of the interfaces found so far.
            while let Some(i) = interface_queue.pop() {
                let interface = &self.declarations[i];
                for base in &interface.bases {
                    if let TypeRef::Named { name, args } = base {
                        if let Some(&j) =
                            self.by_name.get(name.as_str()).filter(|_| args.is_empty())
                        {
                            if self.declarations[j].kind == DeclKind::Interface
                                && !interfaces.contains(&j)
                            {
                                interfaces.push(j);
                                interface_queue.push(j);
                            }
                        } else if !SYSTEM_BASES.contains(&name.as_str())
                            && !NOT_MESSAGE_TYPES.contains(&name.as_str())
                        {
                            self.diagnose(
                                &interface.location,
                                format!(
                                    "{}: base interface {name} is not declared in the given files",
                                    interface.name
                                ),
                            );
                        }
                    }
                }
            }
        }
        (classes, interfaces)
    }

    fn map_property(
        &mut self,
        owner: &Declaration,
        property: &super::parse::Property,
    ) -> Option<Field> {
        if let Some(ignore) = attribute(&property.attributes, "JsonIgnore") {
            let always =
                ignore.args.is_empty() || ignore.args.iter().any(|a| a.ends_with("Always"));
            if always {
                return None;
            }
        }
        let context = format!("{}.{}", owner.name, property.name);
        let shape = match self.shape(&property.ty) {
            Ok(shape) => shape,
            Err(reason) => {
                self.diagnose(
                    &property.location,
                    format!("cannot map {context}: {reason}"),
                );
                return None;
            }
        };
        if let Some(converter) = attribute(&property.attributes, "JsonConverter") {
            let strings = names_string_converter(std::slice::from_ref(converter));
            let enum_index = match &shape {
                Shape::Enum(i) => Some(*i),
                Shape::Nullable(inner) => match **inner {
                    Shape::Enum(i) => Some(i),
                    _ => None,
                },
                _ => None,
            };
            // A string converter on a property of an enum written as strings anyway is fine;
            // anything else changes the form for this property only.
            if !(strings && enum_index.is_some_and(|i| self.enum_is_string(i))) {
                let what = converter.args.first().cloned().unwrap_or_default();
                self.diagnose(
                    &property.location,
                    format!("cannot map {context}: its [JsonConverter({what})] changes how this property is written (put a string enum converter on the enum type instead)"),
                );
                return None;
            }
        }
        let json_name = attribute(&property.attributes, "JsonPropertyName")
            .and_then(|a| a.args.first().cloned())
            .unwrap_or_else(|| camel_case(&property.name));
        Some(Field {
            cs_name: property.name.clone(),
            json_name,
            shape,
            location: property.location.clone(),
        })
    }

    /// Whether enum `i`'s declaration has the attribute `name`.
    fn enum_has_attribute(&self, i: usize, name: &str) -> bool {
        self.declarations
            .iter()
            .zip(&self.index)
            .find(|(_, item)| **item == Some(Item::Enum(i)))
            .is_some_and(|(d, _)| attribute(&d.attributes, name).is_some())
    }

    fn enum_is_string(&self, i: usize) -> bool {
        // Enums are mapped in order: look at the declaration when its model is not built yet.
        self.model
            .enums
            .get(i)
            .map(|e| e.string)
            .unwrap_or_else(|| {
                self.declarations
                    .iter()
                    .zip(&self.index)
                    .find(|(_, item)| **item == Some(Item::Enum(i)))
                    .is_some_and(|(d, _)| names_string_converter(&d.attributes))
            })
    }

    /// The shape of a C# type, or why there is none.
    fn shape(&self, ty: &TypeRef) -> Result<Shape, String> {
        match ty {
            TypeRef::Nullable(inner) => Ok(Shape::Nullable(Box::new(self.shape(inner)?))),
            TypeRef::Array(inner) => match self.shape(inner)? {
                Shape::Int(kind) if kind.rust == "u8" => Ok(Shape::Bytes),
                element => Ok(Shape::List(Box::new(element))),
            },
            TypeRef::Other(text) => Err(format!("`{text}` has no JSON form the import knows")),
            TypeRef::Named { name, args } if args.is_empty() => self.simple(name),
            TypeRef::Named { name, args } => {
                let mapped: Vec<Shape> = args
                    .iter()
                    .map(|a| self.shape(a))
                    .collect::<Result<_, _>>()?;
                match (name.as_str(), mapped.as_slice()) {
                    ("Nullable", [inner]) => Ok(Shape::Nullable(Box::new(inner.clone()))),
                    (
                        "List" | "IList" | "ICollection" | "IEnumerable" | "IReadOnlyList" | "IReadOnlyCollection"
                        | "HashSet" | "ISet" | "IReadOnlySet" | "Collection" | "ReadOnlyCollection"
                        | "ImmutableArray" | "ImmutableList" | "ImmutableHashSet" | "SortedSet" | "LinkedList"
                        | "Queue" | "Stack",
                        [element],
                    ) => Ok(Shape::List(Box::new(element.clone()))),
                    (
                        "Dictionary" | "IDictionary" | "IReadOnlyDictionary" | "SortedDictionary"
                        | "ImmutableDictionary" | "ConcurrentDictionary",
                        [key, value],
                    ) => match key {
                        // Enum keys are written as member names, even without a string
                        // converter (dotnet/runtime#102120).
                        Shape::Enum(i) if self.enum_has_attribute(*i, "Flags") => Err("dictionary keys of a [Flags] enum are written as comma-separated member names, which the import does not map".to_owned()),
                        Shape::String | Shape::Guid | Shape::Int(_) | Shape::Enum(_) => {
                            Ok(Shape::Map(Box::new(key.clone()), Box::new(value.clone())))
                        }
                        _ => Err(format!("dictionary keys of type {} are written as System.Text.Json's key converter decides; only string, Guid, integer and enum keys are mapped", dotnet_name(key))),
                    },
                    _ => Err(format!("generic type {name}<…> has no JSON form the import knows")),
                }
            }
        }
    }

    fn simple(&self, name: &str) -> Result<Shape, String> {
        if let Some(kind) = int_kind(name) {
            return Ok(Shape::Int(kind));
        }
        Ok(match name {
            "string" | "String" | "Uri" => Shape::String,
            "char" | "Char" => Shape::Char,
            "bool" | "Boolean" => Shape::Bool,
            "float" | "Single" => Shape::Float(true),
            "double" | "Double" => Shape::Float(false),
            "decimal" | "Decimal" => Shape::Decimal,
            "Guid" => Shape::Guid,
            "DateTime" => Shape::DateTime,
            "DateTimeOffset" => Shape::DateTimeOffset,
            "TimeSpan" => Shape::TimeSpan,
            "DateOnly" => Shape::DateOnly,
            "TimeOnly" => Shape::TimeOnly,
            "object" | "Object" | "JsonElement" | "JsonNode" | "JsonObject" | "JsonArray" | "JsonDocument" => {
                Shape::Any
            }
            _ => match self.by_name.get(name).and_then(|&i| self.index[i]) {
                Some(Item::Enum(i)) => Shape::Enum(i),
                Some(Item::Contract(i)) => Shape::Contract(i),
                None => {
                    return Err(format!(
                        "type {name} is neither a .NET type the import knows nor declared in the given files"
                    ))
                }
            },
        })
    }
}

/// The .NET name of a shape, for messages.
pub(crate) fn dotnet_name(shape: &Shape) -> &'static str {
    match shape {
        Shape::String => "string",
        Shape::Char => "char",
        Shape::Bool => "bool",
        Shape::Int(kind) => kind.dotnet,
        Shape::Float(true) => "float",
        Shape::Float(false) => "double",
        Shape::Decimal => "decimal",
        Shape::Guid => "Guid",
        Shape::DateTime => "DateTime",
        Shape::DateTimeOffset => "DateTimeOffset",
        Shape::TimeSpan => "TimeSpan",
        Shape::DateOnly => "DateOnly",
        Shape::TimeOnly => "TimeOnly",
        Shape::Bytes => "byte[]",
        Shape::Any => "object",
        Shape::Enum(_) => "enum",
        Shape::Contract(_) => "object",
        Shape::List(_) => "collection",
        Shape::Map(..) => "dictionary",
        Shape::Nullable(_) => "nullable",
    }
}

fn int_kind(name: &str) -> Option<IntKind> {
    INTS.iter()
        .find(|(keyword, system, _)| *keyword == name || *system == name)
        .map(|(_, _, kind)| *kind)
}

fn attribute<'b>(attributes: &'b [Attribute], name: &str) -> Option<&'b Attribute> {
    attributes.iter().find(|a| a.name == name)
}

/// `[JsonConverter(typeof(JsonStringEnumConverter))]` or its generic form.
fn names_string_converter(attributes: &[Attribute]) -> bool {
    attribute(attributes, "JsonConverter").is_some_and(|a| {
        a.args
            .first()
            .is_some_and(|arg| arg.contains("JsonStringEnumConverter"))
    })
}

/// The MassTransit type name: enclosing types joined with `+`.
fn type_name(declaration: &Declaration) -> String {
    let mut parts = declaration.outer.clone();
    parts.push(declaration.name.clone());
    parts.join("+")
}

/// The snake_case Rust field name of a C# property (`OrderID` → `order_id`), raw or suffixed
/// when it is a keyword.
pub(crate) fn field_name(cs_name: &str) -> String {
    let snake = snake_case(cs_name);
    const RAW: [&str; 44] = [
        "as", "async", "await", "break", "const", "continue", "dyn", "else", "enum", "extern",
        "false", "fn", "for", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut",
        "pub", "ref", "return", "static", "struct", "trait", "true", "type", "unsafe", "use",
        "where", "while", "abstract", "become", "box", "do", "final", "macro", "override", "priv",
        "typeof", "yield",
    ];
    match snake.as_str() {
        "self" | "super" | "crate" | "_" => format!("{snake}_"),
        s if RAW.contains(&s) || matches!(s, "try" | "gen" | "unsized" | "virtual") => {
            format!("r#{snake}")
        }
        s if s.starts_with(|c: char| c.is_ascii_digit()) => format!("_{snake}"),
        _ => snake,
    }
}

pub(crate) fn snake_case(name: &str) -> String {
    let chars: Vec<char> = name.chars().collect();
    let mut out = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if c == '_' {
            if !out.ends_with('_') && !out.is_empty() {
                out.push('_');
            }
            continue;
        }
        if c.is_uppercase() && i > 0 {
            let previous = chars[i - 1];
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            let boundary = previous.is_lowercase()
                || previous.is_ascii_digit()
                || (previous.is_uppercase() && next_lower);
            if boundary && !out.ends_with('_') {
                out.push('_');
            }
        }
        out.extend(c.to_lowercase());
    }
    out
}

/// System.Text.Json's `JsonNamingPolicy.CamelCase`: the leading run of capitals lowered, but
/// the last of a run followed by a lower-case letter kept (`URLValue` → `urlValue`, `OrderID`
/// → `orderID`).
pub(crate) fn camel_case(name: &str) -> String {
    let mut chars: Vec<char> = name.chars().collect();
    if chars.first().is_none_or(|c| !c.is_uppercase()) {
        return name.to_owned();
    }
    for i in 0..chars.len() {
        if i == 1 && !chars[i].is_uppercase() {
            break;
        }
        let has_next = i + 1 < chars.len();
        if i > 0 && has_next && !chars[i + 1].is_uppercase() {
            if chars[i + 1] == ' ' {
                chars[i] = chars[i].to_lowercase().next().unwrap_or(chars[i]);
            }
            break;
        }
        chars[i] = chars[i].to_lowercase().next().unwrap_or(chars[i]);
    }
    chars.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::super::parse::parse_file;
    use super::*;

    fn model(source: &str) -> (Model, Vec<Diagnostic>) {
        build(&parse_file("T.cs", source).unwrap())
    }

    #[test]
    fn camel_case_is_system_text_json_s() {
        for (name, camel) in [
            ("OrderId", "orderId"),
            ("OrderID", "orderID"),
            ("URLValue", "urlValue"),
            ("ID", "id"),
            ("IOStream", "ioStream"),
            ("already", "already"),
            ("A", "a"),
            ("ABc", "aBc"),
        ] {
            assert_eq!(camel_case(name), camel, "{name}");
        }
    }

    #[test]
    fn maps_identity_like_masstransit() {
        let (model, diagnostics) = model(
            r#"namespace Shop.Events;
public interface IEvent { Guid Id { get; } }
public interface IOrderEvent : IEvent { Guid OrderId { get; } }
public abstract record OrderBase(Guid Id, Guid OrderId) : IOrderEvent;
[EntityName("order-placed")]
public record OrderPlaced(Guid Id, Guid OrderId, decimal Total) : OrderBase(Id, OrderId), CorrelatedBy<Guid>, IEquatable<OrderPlaced>
{
    public Guid CorrelationId => OrderId;
}
public class Outer { [MessageUrn("shop:inner")] public class Inner { public int N { get; set; } } }
"#,
        );
        assert_eq!(diagnostics, []);
        let placed = model
            .contracts
            .iter()
            .find(|c| c.name == "OrderPlaced")
            .unwrap();
        assert_eq!(
            placed.message_urn().unwrap(),
            "urn:message:Shop.Events:OrderPlaced"
        );
        assert_eq!(placed.entity_name.as_deref(), Some("order-placed"));
        assert_eq!(
            placed.implements,
            [
                "Shop.Events:OrderBase",
                "Shop.Events:IOrderEvent",
                "Shop.Events:IEvent"
            ]
        );
        let names: Vec<_> = placed.fields.iter().map(|f| f.json_name.as_str()).collect();
        assert_eq!(names, ["id", "orderId", "total", "correlationId"]);
        assert_eq!(placed.fields[2].shape, Shape::Decimal);
        let order_event = model
            .contracts
            .iter()
            .find(|c| c.name == "IOrderEvent")
            .unwrap();
        assert_eq!(order_event.implements, ["Shop.Events:IEvent"]);
        let names: Vec<_> = order_event
            .fields
            .iter()
            .map(|f| f.cs_name.as_str())
            .collect();
        assert_eq!(names, ["Id", "OrderId"]);
        let inner = model.contracts.iter().find(|c| c.name == "Inner").unwrap();
        assert_eq!(inner.type_name, "Outer+Inner");
        assert_eq!(inner.message_urn().unwrap(), "urn:message:shop:inner");
    }

    #[test]
    fn maps_types_as_system_text_json_writes_them() {
        let (model, diagnostics) = model(
            r#"namespace N;
public enum Status { A, B }
public record Line(string Sku);
public class M {
    public long Big { get; set; }
    public byte[] Data { get; set; }
    public int[] Sizes { get; set; }
    public DateTime? When { get; set; }
    public Nullable<Guid> Maybe { get; set; }
    public IReadOnlyDictionary<string, List<Line>> ByKey { get; set; }
    public Status Status { get; set; }
    [JsonPropertyName("x_y")] public object Extra { get; set; }
}"#,
        );
        assert_eq!(diagnostics, []);
        let m = model.contracts.iter().find(|c| c.name == "M").unwrap();
        let shapes: Vec<_> = m
            .fields
            .iter()
            .map(|f| (f.json_name.as_str(), f.shape.clone()))
            .collect();
        assert_eq!(shapes[0], ("big", Shape::Int(int_kind("long").unwrap())));
        assert_eq!(shapes[1], ("data", Shape::Bytes));
        assert_eq!(
            shapes[2],
            (
                "sizes",
                Shape::List(Box::new(Shape::Int(int_kind("int").unwrap())))
            )
        );
        assert_eq!(
            shapes[3],
            ("when", Shape::Nullable(Box::new(Shape::DateTime)))
        );
        assert_eq!(shapes[4], ("maybe", Shape::Nullable(Box::new(Shape::Guid))));
        assert_eq!(
            shapes[5],
            (
                "byKey",
                Shape::Map(
                    Box::new(Shape::String),
                    Box::new(Shape::List(Box::new(Shape::Contract(0))))
                )
            )
        );
        assert_eq!(shapes[6], ("status", Shape::Enum(0)));
        assert_eq!(shapes[7], ("x_y", Shape::Any));
    }

    #[test]
    fn reports_what_it_cannot_map_with_its_line() {
        let (_, diagnostics) = model(
            r#"namespace N;
public record A(
    (int, int) Pair,
    Dictionary<double, DateTime> Times,
    Money Price,
    Dictionary<Bits, int> ByBits);
[Flags] public enum Bits { X = 1 }
public record B : Unknown;
public record G<T>(T Value);
public class C { public int Name { get; set; } public int NAME { get; set; } }
"#,
        );
        let lines: Vec<_> = diagnostics
            .iter()
            .map(|d| (d.location.line, d.message.as_str()))
            .collect();
        assert_eq!(lines.len(), 7, "{lines:#?}");
        assert!(
            lines.iter().any(|(l, m)| *l == 10
                && m.contains("C.NAME and C.Name would both be the Rust field name")),
            "{lines:#?}"
        );
        assert!(
            lines.iter().any(|(l, m)| *l == 3 && m.contains("A.Pair")),
            "{lines:#?}"
        );
        assert!(lines
            .iter()
            .any(|(l, m)| *l == 4 && m.contains("dictionary keys of type double")));
        assert!(lines
            .iter()
            .any(|(l, m)| *l == 5 && m.contains("type Money")));
        assert!(lines
            .iter()
            .any(|(l, m)| *l == 6 && m.contains("[Flags] enum")));
        assert!(lines
            .iter()
            .any(|(l, m)| *l == 8 && m.contains("base type Unknown")));
        assert!(lines.iter().any(|(l, m)| *l == 9 && m.contains("generic")));
    }

    #[test]
    fn maps_dotnet_values_anywhere_and_enum_keys() {
        let (model, diagnostics) = model(
            r#"namespace N;
public enum Level { Low, High }
public record M(
    Dictionary<string, DateTime> At,
    List<TimeSpan>? Waits,
    List<List<decimal>> Tiers,
    Dictionary<Level, byte[]> ByLevel);
"#,
        );
        assert_eq!(diagnostics, []);
        let shapes: Vec<_> = model.contracts[0]
            .fields
            .iter()
            .map(|f| f.shape.clone())
            .collect();
        let b = Box::new;
        assert_eq!(
            shapes,
            [
                Shape::Map(b(Shape::String), b(Shape::DateTime)),
                Shape::Nullable(b(Shape::List(b(Shape::TimeSpan)))),
                Shape::List(b(Shape::List(b(Shape::Decimal)))),
                Shape::Map(b(Shape::Enum(0)), b(Shape::Bytes)),
            ]
        );
    }

    #[test]
    fn message_urn_without_the_default_prefix_is_used_as_given() {
        let (model, diagnostics) = model(
            r#"namespace N;
[MessageUrn("urn:shop:placed", false)] public record A(int N);
[MessageUrn("shop:placed", useDefaultPrefix: true)] public record B(int N);
[MessageUrn("shop:placed", false)] public record C(int N);
[MessageUrn("urn:message:shop:placed")] public record D(int N);
[MessageUrn("urn:shop:placed")] public record E(int N);
"#,
        );
        let urns: Vec<_> = model
            .contracts
            .iter()
            .map(|c| c.message_urn().unwrap())
            .collect();
        assert_eq!(
            urns,
            [
                "urn:shop:placed",
                "urn:message:shop:placed",
                // Reported below: left with its type name's URN.
                "urn:message:N:C",
                "urn:message:N:D",
                "urn:message:N:E",
            ]
        );
        let lines: Vec<_> = diagnostics
            .iter()
            .map(|d| (d.location.line, d.message.as_str()))
            .collect();
        assert_eq!(lines.len(), 3, "{lines:#?}");
        assert!(lines[0].0 == 4 && lines[0].1.contains("only a URN that starts with urn:"));
        assert!(
            lines[1].0 == 5
                && lines[1]
                    .1
                    .contains("refuses a value that starts with urn:message:")
        );
        assert!(lines[2].0 == 6 && lines[2].1.contains("would not prefix"));
    }
}

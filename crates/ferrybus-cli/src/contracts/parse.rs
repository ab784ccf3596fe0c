//! C# source to [`Declaration`]s, with the tree-sitter C# grammar: the types a file declares,
//! their namespace, enclosing types, base list, attributes, public properties and enum members.
//! Nothing is resolved here (that is [`super::model`]); a file that does not parse is an error
//! naming its first bad line.

use std::fmt;

use tree_sitter::{Node, Parser};

use crate::error::{CliError, CliErrorKind};

/// A place in a C# file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Location {
    /// The file, as given on the command line.
    pub(crate) file: String,
    /// The 1-based line.
    pub(crate) line: usize,
}

impl Location {
    /// Line `line` of `file`.
    pub(crate) fn new(file: &str, line: usize) -> Self {
        Self {
            file: file.to_owned(),
            line,
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// A type reference as written in C#.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TypeRef {
    /// `string`, `Guid`, `System.Guid`, `List<T>`: the last name segment and its type arguments.
    Named {
        /// The last segment (`Guid` of `System.Guid`).
        name: String,
        /// The type arguments (`T` of `List<T>`).
        args: Vec<TypeRef>,
    },
    /// `T?`.
    Nullable(Box<TypeRef>),
    /// `T[]` (one dimension).
    Array(Box<TypeRef>),
    /// Anything else (tuples, pointers, multi-dimensional arrays): its source text.
    Other(String),
}

/// The kind of a declared type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DeclKind {
    /// `record` / `record class`.
    Record,
    /// `record struct`.
    RecordStruct,
    /// `class`.
    Class,
    /// `struct`.
    Struct,
    /// `interface`.
    Interface,
    /// `enum`.
    Enum,
}

/// An attribute: its name without `Attribute` and its arguments' source text (string literals
/// unquoted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Attribute {
    /// `EntityName` (of `[EntityName("x")]` or `[MassTransit.EntityNameAttribute("x")]`).
    pub(crate) name: String,
    /// The arguments: a string literal's value, else the argument's text.
    pub(crate) args: Vec<String>,
}

/// A public instance property (or a positional record parameter).
#[derive(Clone, Debug)]
pub(crate) struct Property {
    /// Its C# name (without `@`).
    pub(crate) name: String,
    /// Its type.
    pub(crate) ty: TypeRef,
    /// Its attributes.
    pub(crate) attributes: Vec<Attribute>,
    /// Where it is declared.
    pub(crate) location: Location,
}

/// An enum member.
#[derive(Clone, Debug)]
pub(crate) struct EnumMember {
    /// Its name.
    pub(crate) name: String,
    /// Its value, when it has an explicit one that could be evaluated; `Err` holds the text of
    /// one that could not.
    pub(crate) value: Option<Result<i128, String>>,
    /// Its attributes.
    pub(crate) attributes: Vec<Attribute>,
    /// Where it is declared.
    pub(crate) location: Location,
}

/// One type declared in a file.
#[derive(Clone, Debug)]
pub(crate) struct Declaration {
    /// Its simple name.
    pub(crate) name: String,
    /// Its namespace (`None` for the global namespace).
    pub(crate) namespace: Option<String>,
    /// The names of the types it is nested in, outermost first.
    pub(crate) outer: Vec<String>,
    /// What it is.
    pub(crate) kind: DeclKind,
    /// Whether it has type parameters.
    pub(crate) generic: bool,
    /// A `static class`: only a container of nested types, never a message.
    pub(crate) is_static: bool,
    /// Its base list, in order (for an enum: its underlying type).
    pub(crate) bases: Vec<TypeRef>,
    /// Its attributes.
    pub(crate) attributes: Vec<Attribute>,
    /// Its properties: positional parameters first, then declared properties.
    pub(crate) properties: Vec<Property>,
    /// The members of an enum.
    pub(crate) members: Vec<EnumMember>,
    /// The text of its `/// <summary>`, when it has one.
    pub(crate) summary: Option<String>,
    /// Where it is declared.
    pub(crate) location: Location,
}

/// Parses one C# file into the types it declares.
pub(crate) fn parse_file(file: &str, source: &str) -> Result<Vec<Declaration>, CliError> {
    let mut parser = Parser::new();
    parser
        .set_language(&tree_sitter_c_sharp::LANGUAGE.into())
        .map_err(|e| {
            parse_error(
                Location::new(file, 1),
                format!("the C# grammar cannot be loaded: {e}"),
            )
        })?;
    let tree = parser
        .parse(source, None)
        .ok_or_else(|| parse_error(Location::new(file, 1), "the parser gave up".to_owned()))?;
    let root = tree.root_node();
    if root.has_error() {
        let bad = first_error(root).unwrap_or(root);
        let line = bad.start_position().row + 1;
        let text = source.lines().nth(line - 1).unwrap_or("").trim();
        let what = if bad.is_missing() {
            format!("missing {}", bad.kind())
        } else {
            "syntax error".to_owned()
        };
        return Err(parse_error(
            Location::new(file, line),
            format!("{what} in `{}`", shorten(text, 80)),
        ));
    }
    let mut walker = Walker {
        file,
        source,
        out: Vec::new(),
    };
    walker.container(root, None, &[]);
    Ok(walker.out)
}

/// A file that cannot be read as C#.
fn parse_error(location: Location, reason: impl std::fmt::Display) -> CliError {
    CliError::new(CliErrorKind::Input, format!("{location}: {reason}"))
}

/// The first node in error or missing, depth first.
fn first_error(node: Node<'_>) -> Option<Node<'_>> {
    if node.is_error() || node.is_missing() {
        return Some(node);
    }
    let mut cursor = node.walk();
    let children: Vec<Node<'_>> = node.children(&mut cursor).collect();
    children
        .into_iter()
        .filter(|c| c.has_error() || c.is_missing())
        .find_map(first_error)
}

fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        format!("{}…", text.chars().take(max).collect::<String>())
    }
}

struct Walker<'a> {
    file: &'a str,
    source: &'a str,
    out: Vec<Declaration>,
}

impl Walker<'_> {
    fn text(&self, node: Node<'_>) -> String {
        self.source[node.byte_range()].to_owned()
    }

    fn location(&self, node: Node<'_>) -> Location {
        Location::new(self.file, node.start_position().row + 1)
    }

    /// The declarations in a compilation unit, namespace or type body.
    fn container(&mut self, node: Node<'_>, namespace: Option<&str>, outer: &[String]) {
        let mut namespace = namespace.map(str::to_owned);
        let mut cursor = node.walk();
        let children: Vec<Node<'_>> = node.children(&mut cursor).collect();
        for child in children {
            match child.kind() {
                "file_scoped_namespace_declaration" => {
                    let name = child
                        .child_by_field_name("name")
                        .map(|n| self.text(n))
                        .unwrap_or_default();
                    namespace = Some(join_namespace(namespace.as_deref(), &name));
                    // Older grammars nest the rest of the file inside it.
                    self.container(child, namespace.as_deref(), outer);
                }
                "namespace_declaration" => {
                    let name = child
                        .child_by_field_name("name")
                        .map(|n| self.text(n))
                        .unwrap_or_default();
                    let inner = join_namespace(namespace.as_deref(), &name);
                    if let Some(body) = child.child_by_field_name("body") {
                        self.container(body, Some(&inner), outer);
                    }
                }
                "declaration_list" => self.container(child, namespace.as_deref(), outer),
                "class_declaration"
                | "record_declaration"
                | "record_struct_declaration"
                | "struct_declaration"
                | "interface_declaration"
                | "enum_declaration" => self.declaration(child, namespace.as_deref(), outer),
                _ => {}
            }
        }
    }

    fn declaration(&mut self, node: Node<'_>, namespace: Option<&str>, outer: &[String]) {
        let name = node
            .child_by_field_name("name")
            .map(|n| self.text(n))
            .unwrap_or_default();
        let kind = match node.kind() {
            "class_declaration" => DeclKind::Class,
            "struct_declaration" => DeclKind::Struct,
            "interface_declaration" => DeclKind::Interface,
            "enum_declaration" => DeclKind::Enum,
            "record_struct_declaration" => DeclKind::RecordStruct,
            _ if self.has_child_token(node, "struct") => DeclKind::RecordStruct,
            _ => DeclKind::Record,
        };
        let generic = node.child_by_field_name("type_parameters").is_some()
            || self.child_of_kind(node, "type_parameter_list").is_some();
        let bases = self
            .child_of_kind(node, "base_list")
            .map(|list| self.bases(list))
            .unwrap_or_default();
        let mut declaration = Declaration {
            name: name.clone(),
            namespace: namespace.map(str::to_owned),
            outer: outer.to_vec(),
            kind,
            generic,
            is_static: self.modifiers(node).iter().any(|m| m == "static"),
            bases,
            attributes: self.attributes(node, None),
            properties: Vec::new(),
            members: Vec::new(),
            summary: self.summary(node),
            location: self.location(node),
        };
        if kind == DeclKind::Enum {
            if let Some(list) = self.child_of_kind(node, "enum_member_declaration_list") {
                declaration.members = self.enum_members(list);
            }
            self.out.push(declaration);
            return;
        }
        // Positional parameters are properties of a record only (a class's primary constructor
        // parameters are not).
        let record = matches!(kind, DeclKind::Record | DeclKind::RecordStruct);
        if let Some(parameters) = self
            .child_of_kind(node, "parameter_list")
            .filter(|_| record)
        {
            declaration.properties = self.parameters(parameters);
        }
        let body = node
            .child_by_field_name("body")
            .or_else(|| self.child_of_kind(node, "declaration_list"));
        let index = self.out.len();
        self.out.push(declaration);
        if let Some(body) = body {
            let mut nested_outer = outer.to_vec();
            nested_outer.push(name);
            let properties = self.properties(body, kind == DeclKind::Interface);
            let own = &mut self.out[index].properties;
            for property in properties {
                // An explicit property replaces the positional parameter of the same name.
                own.retain(|p| p.name != property.name);
                own.push(property);
            }
            self.container(body, namespace, &nested_outer);
        }
    }

    fn has_child_token(&self, node: Node<'_>, token: &str) -> bool {
        let mut cursor = node.walk();
        let found = node.children(&mut cursor).any(|c| c.kind() == token);
        found
    }

    fn child_of_kind<'t>(&self, node: Node<'t>, kind: &str) -> Option<Node<'t>> {
        let mut cursor = node.walk();
        let found = node.children(&mut cursor).find(|c| c.kind() == kind);
        found
    }

    fn bases(&self, list: Node<'_>) -> Vec<TypeRef> {
        let mut cursor = list.walk();
        let children: Vec<Node<'_>> = list.named_children(&mut cursor).collect();
        children
            .into_iter()
            .filter_map(|child| match child.kind() {
                // `record B(int X) : A(X)`: the type before the arguments.
                "primary_constructor_base_type" => child
                    .child_by_field_name("type")
                    .or_else(|| child.named_child(0))
                    .map(|t| self.type_ref(t)),
                "argument_list" | "comment" => None,
                _ => Some(self.type_ref(child)),
            })
            .collect()
    }

    /// The attributes of a declaration; with `target`, only those without a target specifier or
    /// with that one (`[property: JsonPropertyName("x")]` on a record parameter).
    fn attributes(&self, node: Node<'_>, target: Option<&str>) -> Vec<Attribute> {
        let mut cursor = node.walk();
        let lists: Vec<Node<'_>> = node
            .children(&mut cursor)
            .filter(|c| c.kind() == "attribute_list")
            .collect();
        let mut out = Vec::new();
        for list in lists {
            let mut cursor = list.walk();
            let items: Vec<Node<'_>> = list.named_children(&mut cursor).collect();
            let specifier = items
                .iter()
                .find(|c| c.kind() == "attribute_target_specifier")
                .map(|c| self.text(*c).trim_end_matches(':').trim().to_owned());
            if let Some(specifier) = &specifier {
                if target != Some(specifier.as_str()) {
                    continue;
                }
            }
            for item in items.iter().filter(|c| c.kind() == "attribute") {
                let name = item
                    .child_by_field_name("name")
                    .map(|n| self.text(n))
                    .unwrap_or_default();
                let name = name.rsplit('.').next().unwrap_or(&name);
                let name = name.strip_suffix("Attribute").unwrap_or(name).to_owned();
                let args = self
                    .child_of_kind(*item, "attribute_argument_list")
                    .map(|args| self.attribute_args(args))
                    .unwrap_or_default();
                out.push(Attribute { name, args });
            }
        }
        out
    }

    fn attribute_args(&self, list: Node<'_>) -> Vec<String> {
        let mut cursor = list.walk();
        let args: Vec<Node<'_>> = list
            .named_children(&mut cursor)
            .filter(|c| c.kind() == "attribute_argument")
            .collect();
        args.into_iter()
            .map(|arg| {
                let last = u32::try_from(arg.named_child_count().saturating_sub(1)).unwrap_or(0);
                let value = arg.named_child(last);
                match value {
                    Some(v)
                        if v.kind() == "string_literal"
                            || v.kind() == "verbatim_string_literal" =>
                    {
                        string_value(&self.text(v))
                    }
                    Some(v) => self.text(v),
                    None => self.text(arg),
                }
            })
            .collect()
    }

    fn parameters(&self, list: Node<'_>) -> Vec<Property> {
        let mut cursor = list.walk();
        let params: Vec<Node<'_>> = list
            .named_children(&mut cursor)
            .filter(|c| c.kind() == "parameter")
            .collect();
        params
            .into_iter()
            .filter_map(|param| {
                let ty = param.child_by_field_name("type")?;
                let name = param.child_by_field_name("name")?;
                Some(Property {
                    name: self.text(name).trim_start_matches('@').to_owned(),
                    ty: self.type_ref(ty),
                    attributes: self.attributes(param, Some("property")),
                    location: self.location(param),
                })
            })
            .collect()
    }

    /// The public instance properties with a getter in a type body (every property of an
    /// interface is public).
    fn properties(&self, body: Node<'_>, interface: bool) -> Vec<Property> {
        let mut cursor = body.walk();
        let declarations: Vec<Node<'_>> = body
            .named_children(&mut cursor)
            .filter(|c| c.kind() == "property_declaration")
            .collect();
        declarations
            .into_iter()
            .filter_map(|declaration| {
                let modifiers = self.modifiers(declaration);
                let public = modifiers.iter().any(|m| m == "public")
                    || (interface && !modifiers.iter().any(|m| m == "private" || m == "protected"));
                if !public || modifiers.iter().any(|m| m == "static") {
                    return None;
                }
                if !self.has_getter(declaration) {
                    return None;
                }
                let ty = declaration.child_by_field_name("type")?;
                let name = declaration.child_by_field_name("name")?;
                Some(Property {
                    name: self.text(name).trim_start_matches('@').to_owned(),
                    ty: self.type_ref(ty),
                    attributes: self.attributes(declaration, None),
                    location: self.location(declaration),
                })
            })
            .collect()
    }

    fn modifiers(&self, node: Node<'_>) -> Vec<String> {
        let mut cursor = node.walk();
        let modifiers = node
            .children(&mut cursor)
            .filter(|c| c.kind() == "modifier")
            .map(|c| self.text(c))
            .collect();
        modifiers
    }

    /// An expression body, or an accessor list with a `get` that is not private.
    fn has_getter(&self, property: Node<'_>) -> bool {
        if property
            .child_by_field_name("value")
            .is_some_and(|v| v.kind() == "arrow_expression_clause")
            || self
                .child_of_kind(property, "arrow_expression_clause")
                .is_some()
        {
            return true;
        }
        let Some(accessors) = property
            .child_by_field_name("accessors")
            .or_else(|| self.child_of_kind(property, "accessor_list"))
        else {
            return false;
        };
        let mut cursor = accessors.walk();
        let getters: Vec<Node<'_>> = accessors
            .named_children(&mut cursor)
            .filter(|a| a.kind() == "accessor_declaration" && self.has_child_token(*a, "get"))
            .collect();
        getters.into_iter().any(|getter| {
            !self
                .modifiers(getter)
                .iter()
                .any(|m| m == "private" || m == "protected" || m == "internal")
        })
    }

    fn enum_members(&self, list: Node<'_>) -> Vec<EnumMember> {
        let mut cursor = list.walk();
        let members: Vec<Node<'_>> = list
            .named_children(&mut cursor)
            .filter(|c| c.kind() == "enum_member_declaration")
            .collect();
        let mut known: Vec<(String, i128)> = Vec::new();
        let mut out = Vec::new();
        for member in members {
            let name = member
                .child_by_field_name("name")
                .map(|n| self.text(n))
                .unwrap_or_default();
            let value = member
                .child_by_field_name("value")
                .map(|v| self.evaluate(v, &known).ok_or_else(|| self.text(v)));
            if let Some(Ok(v)) = &value {
                known.push((name.clone(), *v));
            } else if value.is_none() {
                // The implicit value: the previous one plus one (0 for the first).
                let next = out
                    .last()
                    .and_then(|m: &EnumMember| known.iter().find(|(n, _)| *n == m.name))
                    .map_or(Some(0), |(_, v)| v.checked_add(1));
                if let Some(next) = next {
                    known.push((name.clone(), next));
                }
            }
            out.push(EnumMember {
                value: value
                    .or_else(|| known.iter().find(|(n, _)| *n == name).map(|(_, v)| Ok(*v))),
                name,
                attributes: self.attributes(member, None),
                location: self.location(member),
            });
        }
        out
    }

    /// The value of a constant enum member expression: literals, earlier members, `| & ^ + - << >> ~`.
    fn evaluate(&self, node: Node<'_>, known: &[(String, i128)]) -> Option<i128> {
        match node.kind() {
            "integer_literal" => parse_integer(&self.text(node)),
            "identifier" => {
                let name = self.text(node);
                known.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
            }
            "member_access_expression" => {
                let name = node.child_by_field_name("name")?;
                self.evaluate(name, known)
            }
            "parenthesized_expression" | "cast_expression" => {
                let last = u32::try_from(node.named_child_count().checked_sub(1)?).ok()?;
                let inner = node.named_child(last)?;
                self.evaluate(inner, known)
            }
            "prefix_unary_expression" => {
                let operand = node.named_child(0)?;
                let value = self.evaluate(operand, known)?;
                match self.text(node).trim_start().chars().next()? {
                    '-' => value.checked_neg(),
                    '~' => Some(!value),
                    '+' => Some(value),
                    _ => None,
                }
            }
            "binary_expression" => {
                let left = self.evaluate(node.child_by_field_name("left")?, known)?;
                let right = self.evaluate(node.child_by_field_name("right")?, known)?;
                let operator = self.text(node.child_by_field_name("operator")?);
                match operator.as_str() {
                    "|" => Some(left | right),
                    "&" => Some(left & right),
                    "^" => Some(left ^ right),
                    "+" => left.checked_add(right),
                    "-" => left.checked_sub(right),
                    "*" => left.checked_mul(right),
                    "<<" => u32::try_from(right).ok().and_then(|r| left.checked_shl(r)),
                    ">>" => u32::try_from(right).ok().and_then(|r| left.checked_shr(r)),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    fn type_ref(&self, node: Node<'_>) -> TypeRef {
        match node.kind() {
            "predefined_type" | "identifier" => TypeRef::Named {
                name: self.text(node),
                args: Vec::new(),
            },
            "qualified_name" | "alias_qualified_name" => match node.child_by_field_name("name") {
                Some(last) => self.type_ref(last),
                None => TypeRef::Other(self.text(node)),
            },
            "generic_name" => {
                let name = node
                    .named_child(0)
                    .map(|n| self.text(n))
                    .unwrap_or_default();
                let args = self
                    .child_of_kind(node, "type_argument_list")
                    .map(|list| {
                        let mut cursor = list.walk();
                        let args: Vec<Node<'_>> = list.named_children(&mut cursor).collect();
                        args.into_iter().map(|a| self.type_ref(a)).collect()
                    })
                    .unwrap_or_default();
                TypeRef::Named { name, args }
            }
            "nullable_type" => match node
                .child_by_field_name("type")
                .or_else(|| node.named_child(0))
            {
                Some(inner) => TypeRef::Nullable(Box::new(self.type_ref(inner))),
                None => TypeRef::Other(self.text(node)),
            },
            "array_type" => {
                let rank = node
                    .child_by_field_name("rank")
                    .map(|r| self.text(r))
                    .unwrap_or_default();
                match node.child_by_field_name("type") {
                    Some(inner) if !rank.contains(',') => {
                        TypeRef::Array(Box::new(self.type_ref(inner)))
                    }
                    _ => TypeRef::Other(self.text(node)),
                }
            }
            _ => TypeRef::Other(self.text(node)),
        }
    }

    /// The text of the `<summary>` in the `///` comments right above a declaration (above its
    /// attributes too).
    fn summary(&self, node: Node<'_>) -> Option<String> {
        let mut lines = Vec::new();
        let mut previous = node.prev_sibling();
        while let Some(comment) = previous.filter(|p| p.kind() == "comment") {
            let text = self.text(comment);
            let Some(line) = text.strip_prefix("///") else {
                break;
            };
            lines.push(line.trim().to_owned());
            previous = comment.prev_sibling();
        }
        lines.reverse();
        let joined = lines.join(" ");
        let inner = match (joined.find("<summary>"), joined.find("</summary>")) {
            (Some(start), Some(end)) if end > start => &joined[start + "<summary>".len()..end],
            _ => joined.as_str(),
        };
        let plain = strip_tags(inner);
        let plain = plain.split_whitespace().collect::<Vec<_>>().join(" ");
        (!plain.is_empty()).then_some(plain)
    }
}

fn join_namespace(outer: Option<&str>, name: &str) -> String {
    let name: String = name.chars().filter(|c| !c.is_whitespace()).collect();
    match outer {
        Some(outer) if !outer.is_empty() => format!("{outer}.{name}"),
        _ => name,
    }
}

/// `<see cref="X"/>` and other tags removed, `cref` kept as its last segment.
fn strip_tags(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find('<') {
        out.push_str(&rest[..start]);
        let Some(end) = rest[start..].find('>') else {
            break;
        };
        let tag = &rest[start..start + end];
        if let Some(cref) = tag.split("cref=\"").nth(1) {
            let cref = cref.split('"').next().unwrap_or("");
            out.push_str(cref.rsplit('.').next().unwrap_or(cref));
        }
        rest = &rest[start + end + 1..];
    }
    out.push_str(rest);
    out
}

/// The value of a C# string literal's source text (`"x"`, `@"x"`).
fn string_value(text: &str) -> String {
    let verbatim = text.starts_with('@');
    let inner = text
        .trim_start_matches('@')
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text);
    if verbatim {
        inner.replace("\"\"", "\"")
    } else {
        inner.replace("\\\"", "\"").replace("\\\\", "\\")
    }
}

/// A C# integer literal: decimal, `0x`, `0b`, `_` separators, `u`/`l` suffixes.
fn parse_integer(text: &str) -> Option<i128> {
    let text: String = text
        .trim_end_matches(['u', 'U', 'l', 'L'])
        .chars()
        .filter(|c| *c != '_')
        .collect();
    if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        i128::from_str_radix(hex, 16).ok()
    } else if let Some(bin) = text.strip_prefix("0b").or_else(|| text.strip_prefix("0B")) {
        i128::from_str_radix(bin, 2).ok()
    } else {
        text.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(source: &str) -> Vec<Declaration> {
        parse_file("Test.cs", source).unwrap()
    }

    #[test]
    fn reads_namespaces_nesting_bases_and_properties() {
        let declarations = parse(
            r#"
namespace Shop { namespace Events {
    /// <summary>Outer <see cref="System.Guid"/> thing.</summary>
    public class Outer : Base, IThing
    {
        public record Inner([property: JsonPropertyName("n")] int N, string Name) : IThing;
        public int Visible { get; private set; }
        public int Hidden { private get; set; }
        internal int Internal { get; set; }
        public static int Static { get; }
        public int Computed => 1;
        public List<Dictionary<string, Guid?>>? Nested { get; set; }
        public byte[] Bytes { get; set; }
    }
    public class Primary(string name) { public string Name { get; } = name; }
} }
"#,
        );
        let names: Vec<_> = declarations.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["Outer", "Inner", "Primary"]);
        let primary = &declarations[2];
        let props: Vec<_> = primary.properties.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            props,
            ["Name"],
            "a class's primary constructor parameters are no properties"
        );
        let outer = &declarations[0];
        assert_eq!(outer.namespace.as_deref(), Some("Shop.Events"));
        assert_eq!(outer.summary.as_deref(), Some("Outer Guid thing."));
        assert_eq!(outer.bases.len(), 2);
        let props: Vec<_> = outer.properties.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(props, ["Visible", "Computed", "Nested", "Bytes"]);
        assert_eq!(
            outer.properties[2].ty,
            TypeRef::Nullable(Box::new(TypeRef::Named {
                name: "List".into(),
                args: vec![TypeRef::Named {
                    name: "Dictionary".into(),
                    args: vec![
                        TypeRef::Named {
                            name: "string".into(),
                            args: vec![]
                        },
                        TypeRef::Nullable(Box::new(TypeRef::Named {
                            name: "Guid".into(),
                            args: vec![]
                        })),
                    ],
                }],
            }))
        );
        let inner = &declarations[1];
        assert_eq!(inner.outer, ["Outer"]);
        assert_eq!(inner.kind, DeclKind::Record);
        assert_eq!(inner.properties[0].attributes[0].name, "JsonPropertyName");
        assert_eq!(inner.properties[0].attributes[0].args, ["n"]);
        assert_eq!(inner.properties[1].location.line, 6);
    }

    #[test]
    fn evaluates_enum_values() {
        let declarations = parse(
            "namespace N; [Flags] public enum E : byte { A = 1, B, C = 0x10, D = A | C, F = 1 << 3, G = -2, H }",
        );
        let values: Vec<_> = declarations[0]
            .members
            .iter()
            .map(|m| (m.name.as_str(), m.value.clone()))
            .collect();
        assert_eq!(
            values,
            [
                ("A", Some(Ok(1))),
                ("B", Some(Ok(2))),
                ("C", Some(Ok(16))),
                ("D", Some(Ok(17))),
                ("F", Some(Ok(8))),
                ("G", Some(Ok(-2))),
                ("H", Some(Ok(-1))),
            ]
        );
        assert_eq!(declarations[0].namespace.as_deref(), Some("N"));
        assert_eq!(declarations[0].attributes[0].name, "Flags");
    }

    #[test]
    fn a_file_that_does_not_parse_names_its_line() {
        let error = parse_file(
            "Bad.cs",
            "namespace N;\npublic record A(int X);\npublic class { int }\n",
        )
        .unwrap_err();
        assert!(error.to_string().starts_with("Bad.cs:3: "), "{error}");
    }
}

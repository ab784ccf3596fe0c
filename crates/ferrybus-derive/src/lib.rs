//! `#[derive(Message)]` for ferrybus: gives a Rust type its MassTransit message identity.
//!
//! Use it through `ferrybus` or `ferrybus-core` (feature `derive`), which re-export the derive
//! next to the `Message` trait, so that `use ferrybus_core::Message;` brings both into scope:
//!
//! ```
//! use ferrybus_core::Message;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize, Message)]
//! #[message(namespace = "Bookstore.Contracts")]
//! struct OrderPlaced {
//!     order_id: u64,
//! }
//!
//! assert_eq!(OrderPlaced::message_type().urn(), "urn:message:Bookstore.Contracts:OrderPlaced");
//! ```
//!
//! See [`macro@Message`] for every `#[message(...)]` key.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{quote, ToTokens};
use syn::ext::IdentExt;
use syn::meta::ParseNestedMeta;
use syn::punctuated::Punctuated;
use syn::{Attribute, DeriveInput, Ident, LitStr, Token};

/// Implements `ferrybus_core::Message` (re-exported as `ferrybus::Message`) for a struct or enum.
///
/// The identity is built once, on first use, and cached; every later call to `message_type()`
/// returns a cheap clone.
///
/// # Attribute keys
///
/// Keys go in one or several `#[message(...)]` attributes, in any order; each key may appear
/// once, except `implements`, whose lists are concatenated.
///
/// | key | value | MassTransit equivalent |
/// |-----|-------|------------------------|
/// | `namespace` | `"Bookstore.Contracts"` | the .NET namespace of the contract |
/// | `name` | `"Outer+Inner"` | the .NET type name (default: the Rust type's name); nested types use `+` |
/// | `type_name` | `"Bookstore.Contracts:OrderPlaced"` | namespace and name in one string, instead of `namespace` + `name` |
/// | `urn` | `"custom-contract"` | `[MessageUrn("custom-contract")]` |
/// | `entity_name` | `"order-placed"` | `[EntityName("order-placed")]` |
/// | `fault_entity_name` | `"order-placed-faults"` | `[FaultEntityName("order-placed-faults")]` |
/// | `implements` | `["Ns:IEvent", "Ns:BaseClass"]` (or a single string) | the base classes and interfaces the contract advertises, nearest base first |
/// | `crate` | `"::my_reexport::ferrybus"` | the path of the crate that exports `Message`, `MessageType` and `TypeName` |
///
/// Either `namespace` or `type_name` is required. Every name is checked at compile time; a bad
/// value, an unknown key, a repeated key or a generic type is a compile error.
///
/// Without `crate`, the derive finds `ferrybus` or, failing that, `ferrybus-core` among the
/// dependencies of the crate being compiled (renamed dependencies included).
///
/// # Example
///
/// ```
/// use ferrybus_core::Message;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize, Message)]
/// #[serde(rename_all = "camelCase")]
/// #[message(namespace = "Contracts.Events", name = "Orders+OrderCreated")]
/// #[message(entity_name = "OrderCReted", fault_entity_name = "order-created-faults")]
/// #[message(implements = ["Contracts.Events:IOrderEvent"])]
/// struct OrderCreated {
///     order_id: u64,
/// }
///
/// let t = OrderCreated::message_type();
/// assert_eq!(t.urn(), "urn:message:Contracts.Events:Orders+OrderCreated");
/// assert_eq!(t.entity_name(), "OrderCReted");
/// assert_eq!(t.dotnet_name(), "Contracts.Events.Orders+OrderCreated");
/// assert_eq!(t.urns(), ["urn:message:Contracts.Events:Orders+OrderCreated",
///                       "urn:message:Contracts.Events:IOrderEvent"]);
/// assert_eq!(t.fault().entity_name(), "order-created-faults");
///
/// #[derive(Serialize, Deserialize, Message)]
/// #[message(type_name = "MassTransit.TestFramework.Messages:PingMessage", urn = "ping")]
/// struct Ping {}
///
/// assert_eq!(Ping::message_type().urn(), "urn:message:ping");
/// assert_eq!(Ping::message_type().entity_name(), "MassTransit.TestFramework.Messages:PingMessage");
/// ```
///
/// A namespace is required:
///
/// ```compile_fail
/// # use ferrybus_core::Message;
/// # use serde::{Deserialize, Serialize};
/// #[derive(Serialize, Deserialize, Message)]
/// struct NoNamespace {}
/// ```
///
/// Generic types must implement `Message` by hand:
///
/// ```compile_fail
/// # use ferrybus_core::Message;
/// # use serde::{Deserialize, Serialize};
/// #[derive(Serialize, Deserialize, Message)]
/// #[message(namespace = "Ns")]
/// struct Batch<T> { items: Vec<T> }
/// ```
#[proc_macro_derive(Message, attributes(message))]
pub fn derive_message(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as DeriveInput);
    expand(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// The keys of `#[message(...)]`, as written.
#[derive(Default)]
struct Args {
    namespace: Option<LitStr>,
    name: Option<LitStr>,
    type_name: Option<LitStr>,
    urn: Option<LitStr>,
    entity_name: Option<LitStr>,
    fault_entity_name: Option<LitStr>,
    implements: Vec<LitStr>,
    krate: Option<syn::Path>,
}

const KEYS: &str =
    "namespace, name, type_name, urn, entity_name, fault_entity_name, implements, crate";

fn expand(input: &DeriveInput) -> syn::Result<TokenStream2> {
    let attrs: Vec<&Attribute> = input
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("message"))
        .collect();
    let args = parse_args(&attrs)?;

    if !input.generics.params.is_empty() {
        return Err(syn::Error::new_spanned(
            &input.generics,
            "#[derive(Message)] does not support generic types: a static identity cannot depend \
             on type parameters; implement `Message` by hand (for instance for each concrete \
             instantiation)",
        ));
    }

    let root = crate_root(&args);
    let type_name = &args_type_name(input, &attrs, &args)?;

    let mut build = match type_name {
        TypeNameSource::Parts { namespace, name } => quote! {
            #root::MessageType::new(#root::TypeName::new(#namespace, #name))
        },
        TypeNameSource::Full(full) => {
            let msg = format!(
                "#[message(type_name = {:?})] is not a valid type name",
                full.value()
            );
            quote! {
                ::core::result::Result::expect(#root::MessageType::parse(#full), #msg)
            }
        }
    };
    if let Some(urn) = &args.urn {
        build = quote! { #build.with_urn(#urn) };
    }
    if let Some(entity_name) = &args.entity_name {
        build = quote! { #build.with_entity_name(#entity_name) };
    }
    if let Some(fault_entity_name) = &args.fault_entity_name {
        build = quote! { #build.with_fault_entity_name(#fault_entity_name) };
    }
    for base in &args.implements {
        let msg = format!(
            "#[message(implements = [{:?}])] is not a valid type name",
            base.value()
        );
        build = quote! {
            #build.implements(::core::result::Result::expect(#root::MessageType::parse(#base), #msg))
        };
    }

    let ident = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    Ok(quote! {
        #[automatically_derived]
        impl #impl_generics #root::Message for #ident #ty_generics #where_clause {
            fn message_type() -> #root::MessageType {
                static CACHE: ::std::sync::OnceLock<#root::MessageType> =
                    ::std::sync::OnceLock::new();
                ::core::clone::Clone::clone(CACHE.get_or_init(|| #build))
            }
        }
    })
}

fn parse_args(attrs: &[&Attribute]) -> syn::Result<Args> {
    let mut args = Args::default();
    for attr in attrs {
        attr.parse_nested_meta(|meta| {
            let key = meta.path.to_token_stream().to_string().replace(' ', "");
            match key.as_str() {
                "namespace" => {
                    let lit = set_once(&mut args.namespace, &meta, &key, "Bookstore.Contracts")?;
                    check_part(lit, "namespace")
                }
                "name" => {
                    let lit = set_once(&mut args.name, &meta, &key, "Outer+Inner")?;
                    check_part(lit, "name")
                }
                "type_name" => {
                    let lit = set_once(
                        &mut args.type_name,
                        &meta,
                        &key,
                        "Bookstore.Contracts:OrderPlaced",
                    )?;
                    check_full(lit, "type_name")
                }
                "urn" => {
                    let lit = set_once(&mut args.urn, &meta, &key, "custom-contract")?;
                    check_not_empty(lit, "urn")
                }
                "entity_name" => {
                    let lit = set_once(&mut args.entity_name, &meta, &key, "order-placed")?;
                    check_not_empty(lit, "entity_name")
                }
                "fault_entity_name" => {
                    let lit = set_once(
                        &mut args.fault_entity_name,
                        &meta,
                        &key,
                        "order-placed-faults",
                    )?;
                    check_not_empty(lit, "fault_entity_name")
                }
                "implements" => {
                    let list = parse_implements(&meta)?;
                    for lit in &list {
                        check_full(lit, "implements")?;
                    }
                    args.implements.extend(list);
                    Ok(())
                }
                "crate" => {
                    if args.krate.is_some() {
                        return Err(meta.error("duplicate `crate` in #[message(...)]"));
                    }
                    let lit = parse_lit(&meta, "crate", "::ferrybus")?;
                    let path = lit.parse::<syn::Path>().map_err(|_| {
                        syn::Error::new(
                            lit.span(),
                            format!(
                                "`crate` expects a path such as \"::ferrybus\", not {:?}",
                                lit.value()
                            ),
                        )
                    })?;
                    args.krate = Some(path);
                    Ok(())
                }
                _ => Err(meta.error(format!(
                    "unknown #[message] key `{key}`; expected one of: {KEYS}"
                ))),
            }
        })?;
    }
    Ok(args)
}

/// Parses `key = "..."` into `slot`, refusing a second occurrence.
fn set_once<'a>(
    slot: &'a mut Option<LitStr>,
    meta: &ParseNestedMeta<'_>,
    key: &str,
    example: &str,
) -> syn::Result<&'a LitStr> {
    if slot.is_some() {
        return Err(meta.error(format!("duplicate `{key}` in #[message(...)]")));
    }
    Ok(slot.insert(parse_lit(meta, key, example)?))
}

fn parse_lit(meta: &ParseNestedMeta<'_>, key: &str, example: &str) -> syn::Result<LitStr> {
    let value = meta.value()?;
    value.parse::<LitStr>().map_err(|e| {
        syn::Error::new(
            e.span(),
            format!("`{key}` expects a string literal, as in `{key} = \"{example}\"`"),
        )
    })
}

/// `implements = ["Ns:A", "Ns:B"]` or `implements = "Ns:A"`.
fn parse_implements(meta: &ParseNestedMeta<'_>) -> syn::Result<Vec<LitStr>> {
    let value = meta.value()?;
    let expected = "`implements` expects a list of type names, as in \
                    `implements = [\"Ns:IEvent\", \"Ns:BaseClass\"]`";
    if value.peek(syn::token::Bracket) {
        let content;
        syn::bracketed!(content in value);
        let list = Punctuated::<LitStr, Token![,]>::parse_terminated(&content)
            .map_err(|e| syn::Error::new(e.span(), expected))?;
        Ok(list.into_iter().collect())
    } else if value.peek(LitStr) {
        Ok(vec![value.parse()?])
    } else {
        Err(value.error(expected))
    }
}

/// Where the .NET type name comes from.
enum TypeNameSource {
    /// `namespace` (+ `name`, defaulting to the Rust identifier).
    Parts { namespace: LitStr, name: LitStr },
    /// `type_name = "Ns:Name"`, parsed at run time.
    Full(LitStr),
}

fn args_type_name(
    input: &DeriveInput,
    attrs: &[&Attribute],
    args: &Args,
) -> syn::Result<TypeNameSource> {
    if let Some(full) = &args.type_name {
        if let Some(conflict) = args.namespace.as_ref().or(args.name.as_ref()) {
            return Err(syn::Error::new(
                conflict.span(),
                "`type_name` already gives the namespace and the name; use either \
                 `type_name = \"Ns:Name\"` or `namespace` (with an optional `name`), not both",
            ));
        }
        return Ok(TypeNameSource::Full(full.clone()));
    }
    let Some(namespace) = args.namespace.clone() else {
        let msg = "#[derive(Message)] needs the .NET namespace of the message: add \
                   #[message(namespace = \"Bookstore.Contracts\")] or \
                   #[message(type_name = \"Bookstore.Contracts:OrderPlaced\")]";
        return Err(match attrs.first() {
            Some(attr) => syn::Error::new_spanned(attr, msg),
            None => syn::Error::new(input.ident.span(), msg),
        });
    };
    let name = match &args.name {
        Some(name) => name.clone(),
        None => LitStr::new(&input.ident.unraw().to_string(), input.ident.span()),
    };
    Ok(TypeNameSource::Parts { namespace, name })
}

fn crate_root(args: &Args) -> TokenStream2 {
    use proc_macro_crate::{crate_name, FoundCrate};

    if let Some(path) = &args.krate {
        return path.to_token_stream();
    }
    let named = |name: &str| {
        let ident = Ident::new(name, Span::call_site());
        quote!(::#ident)
    };
    // The facade re-exports the core items at its root. Inside the facade itself (and its tests),
    // `FoundCrate::Itself` is not usable as a path, so fall through to its `ferrybus-core`.
    if let Ok(FoundCrate::Name(name)) = crate_name("ferrybus") {
        return named(&name);
    }
    match crate_name("ferrybus-core") {
        Ok(FoundCrate::Name(name)) => named(&name),
        // `ferrybus-core` declares `extern crate self as ferrybus_core;`, so the absolute path
        // works inside it as well as in its tests and doctests. Without Cargo (or any match),
        // the default name is the best guess and fails with a clear "unresolved" error.
        Ok(FoundCrate::Itself) | Err(_) => named("ferrybus_core"),
    }
}

fn check_not_empty(lit: &LitStr, key: &str) -> syn::Result<()> {
    if lit.value().trim().is_empty() {
        return Err(syn::Error::new(
            lit.span(),
            format!("`{key}` must not be empty"),
        ));
    }
    Ok(())
}

/// A namespace or a type name on its own: no `:`, brackets, commas or whitespace.
fn check_part(lit: &LitStr, key: &str) -> syn::Result<()> {
    let value = lit.value();
    let reason = if value.is_empty() {
        Some("it is empty")
    } else if value.contains(':') {
        Some(if key == "namespace" {
            "it contains `:`; to give namespace and name in one string, use \
             `type_name = \"Ns:Name\"` instead"
        } else {
            "it contains `:`; to give namespace and name in one string, use \
             `type_name = \"Ns:Name\"` instead of `namespace` and `name`"
        })
    } else if value.contains(['[', ']', ',']) {
        Some("it contains `[`, `]` or `,`; generic types are not supported here")
    } else if value.contains(char::is_whitespace) {
        Some("it contains whitespace")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(syn::Error::new(
            lit.span(),
            format!("invalid `{key}` {value:?}: {reason}"),
        )),
        None => Ok(()),
    }
}

/// A full type name, `Ns:Name` (optionally `urn:message:`-prefixed, optionally with generic
/// arguments `[[Ns:A],[Ns:B]]`), checked with the grammar `MessageType::parse` accepts.
fn check_full(lit: &LitStr, key: &str) -> syn::Result<()> {
    let value = lit.value();
    check_type_name(&value).map_err(|reason| {
        syn::Error::new(
            lit.span(),
            format!(
                "invalid `{key}` {value:?}: {reason} (expected `Namespace:Type`, \
                 as in \"Bookstore.Contracts:OrderPlaced\")"
            ),
        )
    })
}

/// Mirrors `ferrybus_core::TypeName::parse`, so that the run-time parse cannot fail.
fn check_type_name(input: &str) -> Result<(), &'static str> {
    const URN_PREFIX: &str = "urn:message:";
    let body = match input.get(..URN_PREFIX.len()) {
        Some(head) if head.eq_ignore_ascii_case(URN_PREFIX) => &input[URN_PREFIX.len()..],
        _ => input,
    };
    let rest = check_type(body)?;
    if !rest.is_empty() {
        return Err("unexpected text after the type name");
    }
    Ok(())
}

/// Checks one type at the start of `input` and returns the unparsed rest.
fn check_type(input: &str) -> Result<&str, &'static str> {
    let end = input.find(['[', ']', ',']).unwrap_or(input.len());
    let (namespace, name) = input[..end]
        .rsplit_once(':')
        .ok_or("it has no `:` between namespace and type")?;
    if namespace.is_empty() || name.is_empty() {
        return Err("namespace and type name must not be empty");
    }
    let mut rest = &input[end..];
    if let Some(after) = rest.strip_prefix("[[") {
        rest = after;
        loop {
            rest = check_type(rest)?;
            rest = rest
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
    Ok(rest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn error(input: DeriveInput) -> String {
        match expand(&input) {
            Ok(tokens) => panic!("expected an error, got {tokens}"),
            Err(e) => e.to_string(),
        }
    }

    fn expanded(input: DeriveInput) -> String {
        expand(&input).unwrap().to_string()
    }

    #[test]
    fn missing_namespace() {
        let e = error(parse_quote! { struct A {} });
        assert!(e.contains("needs the .NET namespace"), "{e}");
        let e = error(parse_quote! {
            #[message(name = "X")]
            struct A {}
        });
        assert!(e.contains("needs the .NET namespace"), "{e}");
    }

    #[test]
    fn unknown_and_duplicate_keys() {
        let e = error(parse_quote! {
            #[message(namespace = "Ns", entity = "x")]
            struct A {}
        });
        assert!(e.contains("unknown #[message] key `entity`"), "{e}");
        let e = error(parse_quote! {
            #[message(namespace = "Ns")]
            #[message(namespace = "Other")]
            struct A {}
        });
        assert!(e.contains("duplicate `namespace`"), "{e}");
        let e = error(parse_quote! {
            #[message]
            struct A {}
        });
        assert!(e.contains("expected attribute arguments"), "{e}");
    }

    #[test]
    fn malformed_values() {
        let e = error(parse_quote! {
            #[message(namespace = Ns)]
            struct A {}
        });
        assert!(e.contains("`namespace` expects a string literal"), "{e}");
        let e = error(parse_quote! {
            #[message(namespace = "Ns:A")]
            struct A {}
        });
        assert!(e.contains("use `type_name"), "{e}");
        let e = error(parse_quote! {
            #[message(namespace = "")]
            struct A {}
        });
        assert!(e.contains("it is empty"), "{e}");
        let e = error(parse_quote! {
            #[message(type_name = "NoColon")]
            struct A {}
        });
        assert!(e.contains("invalid `type_name` \"NoColon\""), "{e}");
        let e = error(parse_quote! {
            #[message(type_name = "Ns:G[[Ns:A]")]
            struct A {}
        });
        assert!(e.contains("invalid `type_name`"), "{e}");
        let e = error(parse_quote! {
            #[message(namespace = "Ns", implements = ["Ns:I", 3])]
            struct A {}
        });
        assert!(e.contains("`implements` expects a list"), "{e}");
        let e = error(parse_quote! {
            #[message(namespace = "Ns", implements = ["Ns:I", "Bad"])]
            struct A {}
        });
        assert!(e.contains("invalid `implements` \"Bad\""), "{e}");
        let e = error(parse_quote! {
            #[message(namespace = "Ns", urn = "")]
            struct A {}
        });
        assert!(e.contains("`urn` must not be empty"), "{e}");
        let e = error(parse_quote! {
            #[message(namespace = "Ns", crate = "not a path")]
            struct A {}
        });
        assert!(e.contains("`crate` expects a path"), "{e}");
    }

    #[test]
    fn conflicting_keys() {
        let e = error(parse_quote! {
            #[message(type_name = "Ns:A", namespace = "Ns")]
            struct A {}
        });
        assert!(e.contains("either"), "{e}");
    }

    #[test]
    fn generics_are_rejected() {
        let e = error(parse_quote! {
            #[message(namespace = "Ns")]
            struct A<T> { t: T }
        });
        assert!(e.contains("does not support generic types"), "{e}");
    }

    #[test]
    fn type_name_grammar() {
        for ok in [
            "Ns:T",
            "urn:message:Ns:T",
            "URN:MESSAGE:Ns.Sub:Outer+Inner",
            "Ns:Pair[[Ns:A],[Other:B+C]]",
            "MassTransit:Fault[[MassTransit:Fault[[Ns:T]]]]",
        ] {
            assert_eq!(check_type_name(ok), Ok(()), "{ok}");
        }
        for bad in ["T", ":T", "Ns:", "Ns:G[[Ns:A]", "Ns:T]", "Ns:G[[Ns:A]]x"] {
            assert!(check_type_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn expansion_uses_the_crate_path_and_a_cache() {
        let out = expanded(parse_quote! {
            #[message(namespace = "Ns", crate = "::my::bus")]
            #[message(implements = "Ns:I")]
            enum r#Event { A }
        });
        assert!(out.contains(":: my :: bus :: MessageType :: new"), "{out}");
        assert!(
            out.contains("TypeName :: new (\"Ns\" , \"Event\")"),
            "{out}"
        );
        assert!(out.contains("OnceLock"), "{out}");
        assert!(out.contains(". implements"), "{out}");
    }
}

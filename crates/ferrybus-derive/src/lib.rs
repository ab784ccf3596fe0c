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

mod attrs;
mod correlation;
mod validate;

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{quote, ToTokens};
use syn::{Attribute, DeriveInput, Ident};

use attrs::{args_type_name, parse_args, Args, TypeNameSource};

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
/// | `correlated_by` | `"order_id"` | `CorrelatedBy<Guid>`: the `Uuid` / `Option<Uuid>` field that is the envelope's `correlationId` |
/// | `crate` | `"::my_reexport::ferrybus"` | the path of the crate that exports `Message`, `MessageType` and `message::TypeName` |
///
/// Without `correlated_by`, the correlation id convention of MassTransit applies (see
/// `Message::correlation_id`): the first `Uuid` / `Option<Uuid>` field named `CorrelationId`,
/// else `EventId`, else `CommandId` (compared without case and underscores, a
/// `#[serde(rename = "...")]` counting as the name) gives every send and publish its
/// `correlationId`.
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
            #root::MessageType::new(#root::message::TypeName::new(#namespace, #name))
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

    let correlation_id = correlation::expand(input, args.correlated_by.as_ref(), &root)?;
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
            #correlation_id
        }
    })
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
        let e = error(parse_quote! {
            #[message(namespace = "Ns", correlated_by = "1x")]
            struct A {}
        });
        assert!(e.contains("`correlated_by` expects a field name"), "{e}");
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
    fn expansion_uses_the_crate_path_and_a_cache() {
        let out = expanded(parse_quote! {
            #[message(namespace = "Ns", crate = "::my::bus")]
            #[message(implements = "Ns:I")]
            enum r#Event { A }
        });
        assert!(out.contains(":: my :: bus :: MessageType :: new"), "{out}");
        assert!(
            out.contains("message :: TypeName :: new (\"Ns\" , \"Event\")"),
            "{out}"
        );
        assert!(out.contains("OnceLock"), "{out}");
        assert!(out.contains(". implements"), "{out}");
    }
}

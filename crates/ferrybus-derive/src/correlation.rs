//! `Message::correlation_id` for a derived message: MassTransit's correlation id send
//! convention (`CorrelationIdMessageSendTopologyConvention`) seen through the Rust field names.

use proc_macro2::{TokenStream as TokenStream2, TokenTree};
use quote::quote;
use syn::ext::IdentExt;
use syn::{Data, DeriveInput, Field, Fields, LitStr};

/// The .NET property names MassTransit looks for, in its order.
const CONVENTION: [&str; 3] = ["correlationid", "eventid", "commandid"];

/// The body of `correlation_id(&self)`, or nothing (the trait's default) when the type has no
/// candidate field.
pub(crate) fn expand(
    input: &DeriveInput,
    correlated_by: Option<&LitStr>,
    root: &TokenStream2,
) -> syn::Result<TokenStream2> {
    if let Some(field) = correlated_by {
        let ident: syn::Ident = field.parse()?;
        let name = ident.unraw().to_string();
        let named = match &input.data {
            Data::Struct(data) => match &data.fields {
                Fields::Named(fields) => Some(fields),
                _ => None,
            },
            _ => None,
        };
        let Some(fields) = named else {
            return Err(syn::Error::new(
                field.span(),
                "`correlated_by` names a field: it needs a struct with named fields",
            ));
        };
        let known = |f: &Field| f.ident.as_ref().is_some_and(|i| i.unraw() == name);
        if !fields.named.iter().any(known) {
            return Err(syn::Error::new(
                field.span(),
                format!("`correlated_by`: the struct has no field `{name}`"),
            ));
        }
        let ident = syn::Ident::new_raw(&name, field.span());
        return Ok(method(
            root,
            quote! {
                #root::message::correlation::CorrelationValue::correlation_value(&self.#ident)
            },
        ));
    }
    let Data::Struct(data) = &input.data else {
        return Ok(TokenStream2::new());
    };
    let Fields::Named(fields) = &data.fields else {
        return Ok(TokenStream2::new());
    };
    let candidates: Vec<&Field> = CONVENTION
        .iter()
        .filter_map(|name| {
            fields
                .named
                .iter()
                .find(|f| property_name(f).as_deref() == Some(*name))
        })
        .collect();
    if candidates.is_empty() {
        return Ok(TokenStream2::new());
    }
    let probes = candidates.iter().map(|f| {
        let ident = f.ident.as_ref().expect("named field");
        quote! {
            if let ::core::option::Option::Some(id) =
                (&#root::message::correlation::Probe(&self.#ident)).guid_field()
            {
                return id;
            }
        }
    });
    Ok(method(
        root,
        quote! {
            #[allow(unused_imports)]
            use #root::message::correlation::{GuidField as _, OtherField as _};
            #(#probes)*
            ::core::option::Option::None
        },
    ))
}

fn method(root: &TokenStream2, body: TokenStream2) -> TokenStream2 {
    quote! {
        fn correlation_id(&self) -> ::core::option::Option<#root::message::correlation::Uuid> {
            #body
        }
    }
}

/// The field's name as the convention compares it: its `#[serde(rename = "...")]`, else its
/// Rust name; lower-cased, underscores removed (`correlation_id`, `correlationId` and
/// `CorrelationId` are all .NET's `CorrelationId`).
fn property_name(field: &Field) -> Option<String> {
    let name = field
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("serde"))
        .find_map(serde_rename)
        .or_else(|| field.ident.as_ref().map(|i| i.unraw().to_string()))?;
    Some(name.replace('_', "").to_lowercase())
}

/// `rename = "x"` at the top level of a `#[serde(...)]` attribute.
fn serde_rename(attr: &syn::Attribute) -> Option<String> {
    let syn::Meta::List(list) = &attr.meta else {
        return None;
    };
    let tokens: Vec<TokenTree> = list.tokens.clone().into_iter().collect();
    tokens.windows(3).find_map(|w| match w {
        [TokenTree::Ident(key), TokenTree::Punct(eq), TokenTree::Literal(lit)]
            if key == "rename" && eq.as_char() == '=' =>
        {
            syn::parse2::<LitStr>(TokenTree::Literal(lit.clone()).into())
                .ok()
                .map(|l| l.value())
        }
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn names(input: DeriveInput) -> Vec<Option<String>> {
        let Data::Struct(data) = input.data else {
            unreachable!()
        };
        data.fields.iter().map(property_name).collect()
    }

    fn error(input: DeriveInput) -> String {
        let args = crate::attrs::parse_args(&input.attrs.iter().collect::<Vec<_>>()).unwrap();
        let root = quote!(::ferrybus_core);
        expand(&input, args.correlated_by.as_ref(), &root)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn correlated_by_names_an_existing_field_of_a_struct() {
        let e = error(parse_quote! {
            #[message(namespace = "Ns", correlated_by = "order")]
            struct A { order_id: u8 }
        });
        assert!(e.contains("has no field `order`"), "{e}");
        let e = error(parse_quote! {
            #[message(namespace = "Ns", correlated_by = "order_id")]
            enum A { B }
        });
        assert!(e.contains("needs a struct with named fields"), "{e}");
    }

    #[test]
    fn property_names_ignore_case_underscores_and_follow_serde_rename() {
        let got = names(parse_quote! {
            struct A {
                correlation_id: u8,
                #[serde(rename = "EventId")]
                other: u8,
                #[serde(default, rename = "orderId")]
                command_id: u8,
                r#CommandId: u8,
            }
        });
        assert_eq!(
            got,
            [
                Some("correlationid".into()),
                Some("eventid".into()),
                Some("orderid".into()),
                Some("commandid".into())
            ]
        );
    }
}

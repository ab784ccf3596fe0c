//! Parsing of the `#[message(...)]` attributes into [`Args`], and where the .NET type name
//! comes from ([`TypeNameSource`]).

use quote::ToTokens;
use syn::ext::IdentExt;
use syn::meta::ParseNestedMeta;
use syn::punctuated::Punctuated;
use syn::{Attribute, DeriveInput, LitStr, Token};

use crate::validate::{check_full, check_not_empty, check_part};

/// The keys of `#[message(...)]`, as written.
#[derive(Default)]
pub(crate) struct Args {
    pub(crate) namespace: Option<LitStr>,
    pub(crate) name: Option<LitStr>,
    pub(crate) type_name: Option<LitStr>,
    pub(crate) urn: Option<LitStr>,
    pub(crate) entity_name: Option<LitStr>,
    pub(crate) fault_entity_name: Option<LitStr>,
    pub(crate) implements: Vec<LitStr>,
    pub(crate) correlated_by: Option<LitStr>,
    pub(crate) krate: Option<syn::Path>,
}

const KEYS: &str = "namespace, name, type_name, urn, entity_name, fault_entity_name, \
                    implements, correlated_by, crate";

pub(crate) fn parse_args(attrs: &[&Attribute]) -> syn::Result<Args> {
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
                "correlated_by" => {
                    let lit = set_once(&mut args.correlated_by, &meta, &key, "order_id")?;
                    lit.parse::<syn::Ident>().map(drop).map_err(|_| {
                        syn::Error::new(
                            lit.span(),
                            format!(
                                "`correlated_by` expects a field name such as \"order_id\", \
                                 not {:?}",
                                lit.value()
                            ),
                        )
                    })
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
pub(crate) enum TypeNameSource {
    /// `namespace` (+ `name`, defaulting to the Rust identifier).
    Parts { namespace: LitStr, name: LitStr },
    /// `type_name = "Ns:Name"`, parsed at run time.
    Full(LitStr),
}

pub(crate) fn args_type_name(
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

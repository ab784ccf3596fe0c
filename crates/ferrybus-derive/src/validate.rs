//! Compile-time validation of the names given in `#[message(...)]`.

use syn::LitStr;

pub(crate) fn check_not_empty(lit: &LitStr, key: &str) -> syn::Result<()> {
    if lit.value().trim().is_empty() {
        return Err(syn::Error::new(
            lit.span(),
            format!("`{key}` must not be empty"),
        ));
    }
    Ok(())
}

/// A namespace or a type name on its own: no `:`, brackets, commas or whitespace.
pub(crate) fn check_part(lit: &LitStr, key: &str) -> syn::Result<()> {
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
pub(crate) fn check_full(lit: &LitStr, key: &str) -> syn::Result<()> {
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

/// `ferrybus_dotnet::TypeName::parse`, the grammar the run-time parse uses, so that it cannot fail.
fn check_type_name(input: &str) -> Result<(), String> {
    ferrybus_dotnet::TypeName::parse(input)
        .map(drop)
        .map_err(|e| e.reason().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

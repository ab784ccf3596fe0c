//! [`EndpointNameFormatter`]: queue names derived from .NET type names as MassTransit's endpoint
//! name formatters derive them.

use crate::DotNetValueError;

/// Derives endpoint (queue) names from .NET type names, as MassTransit's formatters do
/// (`src/MassTransit/Configuration/DefaultEndpointNameFormatter.cs`,
/// `SnakeCaseEndpointNameFormatter.cs`, `KebabCaseEndpointNameFormatter.cs`), so that a
/// ferrybus service and its .NET twin configured with the same formatter read the same queue.
///
/// Type names are .NET's: `Namespace.Type`, a nested type `Namespace.Outer+Inner`, a generic
/// one `Namespace.Type<Namespace.Argument>`. Without [`include_namespace`](Self::include_namespace)
/// only the type's own name counts (`Type`, `Inner`), as .NET's `Type.Name`.
///
/// ```
/// use ferrybus_dotnet::EndpointNameFormatter;
/// let consumer = "Sample.Components.SubmitOrderConsumer";
/// assert_eq!(EndpointNameFormatter::pascal_case().consumer(consumer).unwrap(), "SubmitOrder");
/// assert_eq!(EndpointNameFormatter::snake_case().consumer(consumer).unwrap(), "submit_order");
/// assert_eq!(EndpointNameFormatter::kebab_case().consumer(consumer).unwrap(), "submit-order");
/// let dev = EndpointNameFormatter::kebab_case().prefix("Dev").include_namespace(true);
/// assert_eq!(dev.consumer(consumer).unwrap(), "dev-sample-components-submit-order");
/// assert_eq!(EndpointNameFormatter::kebab_case().saga("Sample.OrderState").unwrap(), "order-state");
/// assert!(EndpointNameFormatter::kebab_case().consumer("Consumer").is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointNameFormatter {
    case: Case,
    prefix: String,
    include_namespace: bool,
    join_separator: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Case {
    /// `DefaultEndpointNameFormatter`: the name as it is.
    Pascal,
    /// `SnakeCaseEndpointNameFormatter`: the separator before an upper-case letter that follows a
    /// lower-case letter or a digit, then lower case.
    Snake(char),
    /// `KebabCaseEndpointNameFormatter`: snake case with `-`, every `_` turned into `-`.
    Kebab,
}

impl Default for EndpointNameFormatter {
    /// MassTransit's default: [`pascal_case`](Self::pascal_case).
    fn default() -> Self {
        Self::pascal_case()
    }
}

impl EndpointNameFormatter {
    fn new(case: Case) -> Self {
        Self {
            case,
            prefix: String::new(),
            include_namespace: false,
            join_separator: String::new(),
        }
    }

    /// MassTransit's `DefaultEndpointNameFormatter`: the type name as it is (`SubmitOrder`).
    pub fn pascal_case() -> Self {
        Self::new(Case::Pascal)
    }

    /// MassTransit's `SnakeCaseEndpointNameFormatter` (`SetSnakeCaseEndpointNameFormatter()`):
    /// `submit_order`.
    pub fn snake_case() -> Self {
        Self::new(Case::Snake('_'))
    }

    /// MassTransit's `KebabCaseEndpointNameFormatter` (`SetKebabCaseEndpointNameFormatter()`):
    /// `submit-order`.
    pub fn kebab_case() -> Self {
        Self::new(Case::Kebab)
    }

    /// Starts every name with `prefix`, before the case is applied (`Dev` gives `dev-…` in
    /// kebab case; MassTransit's `prefix` constructor argument).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Includes the namespace and the names of enclosing types (MassTransit's
    /// `includeNamespace`): `Sample.Components.SubmitOrderConsumer` gives
    /// `sample-components-submit-order` in kebab case.
    pub fn include_namespace(mut self, include: bool) -> Self {
        self.include_namespace = include;
        self
    }

    /// What joins the namespace's parts when it is included (MassTransit's `joinSeparator`,
    /// a constructor argument of `DefaultEndpointNameFormatter`; none by default).
    pub fn join_separator(mut self, separator: impl Into<String>) -> Self {
        self.join_separator = separator.into();
        self
    }

    /// The word separator of snake case (MassTransit's `SnakeCaseEndpointNameFormatter(char
    /// separator, …)`); ignored by the other cases (kebab case always uses `-`).
    pub fn separator(mut self, separator: char) -> Self {
        if let Case::Snake(_) = self.case {
            self.case = Case::Snake(separator);
        }
        self
    }

    /// The endpoint of a consumer (a batch consumer too): a trailing `Consumer` removed (any
    /// case); a generic consumer is named after its last type argument (`Consumer<T>()`).
    /// A consumer named only `Consumer` is refused, as MassTransit refuses it.
    pub fn consumer(&self, type_name: &str) -> Result<String, DotNetValueError> {
        match last_generic_argument(type_name) {
            Some(argument) => Ok(self.sanitize(&self.format(argument))),
            None => self.trimmed(type_name, "Consumer", "consumer"),
        }
    }

    /// The endpoint of a saga, from its instance type (`OrderState`): a trailing `Saga`
    /// removed (`Saga<T>()`). A saga named only `Saga` is refused.
    pub fn saga(&self, type_name: &str) -> Result<String, DotNetValueError> {
        self.trimmed(type_name, "Saga", "saga")
    }

    /// The endpoint named after a message type (`Message<T>()`); a generic message is named
    /// after its last type argument.
    pub fn message(&self, type_name: &str) -> String {
        let name = last_generic_argument(type_name).unwrap_or(type_name);
        self.sanitize(&self.format(name))
    }

    /// Applies the case to `name` (MassTransit's `SanitizeName`).
    pub fn sanitize(&self, name: &str) -> String {
        let separator = match self.case {
            Case::Pascal => return name.to_owned(),
            Case::Snake(separator) => separator,
            Case::Kebab => '-',
        };
        let mut out = String::with_capacity(name.len() + 8);
        let mut previous: Option<char> = None;
        for c in name.chars() {
            let after_word = previous.is_some_and(|p| p.is_ascii_lowercase() || p.is_ascii_digit());
            if c.is_ascii_uppercase() && after_word {
                out.push(separator);
            }
            out.extend(c.to_lowercase());
            previous = Some(c);
        }
        match self.case {
            Case::Kebab => out.replace('_', "-"),
            _ => out,
        }
    }

    /// The prefixed name with `suffix` removed, refused when nothing else is left.
    fn trimmed(
        &self,
        type_name: &str,
        suffix: &str,
        what: &'static str,
    ) -> Result<String, DotNetValueError> {
        let mut name = self.format(type_name);
        let cut = name.len().checked_sub(suffix.len());
        if let Some(cut) = cut.filter(|&c| name.is_char_boundary(c)) {
            if name[cut..].eq_ignore_ascii_case(suffix) {
                name.truncate(cut);
                if name.trim().is_empty() {
                    return Err(DotNetValueError::EndpointName {
                        kind: what,
                        suffix: suffix.to_owned(),
                        type_name: type_name.to_owned(),
                    });
                }
            }
        }
        Ok(self.sanitize(&name))
    }

    /// The prefix, then the type's name or, with the namespace, its full name without `.`
    /// and `+` (MassTransit's `FormatName`).
    fn format(&self, type_name: &str) -> String {
        let full = type_name.replace(':', ".");
        let name = if self.include_namespace {
            full.split(['.', '+'])
                .collect::<Vec<_>>()
                .join(&self.join_separator)
        } else {
            full.rsplit(['.', '+']).next().unwrap_or(&full).to_owned()
        };
        format!("{}{name}", self.prefix)
    }
}

/// `Ns.Type<Ns.A, Ns.B<Ns.C>>` → `Ns.B<Ns.C>`; `None` for a type that is not generic.
fn last_generic_argument(type_name: &str) -> Option<&str> {
    let open = type_name.find('<')?;
    let inner = type_name[open + 1..].strip_suffix('>')?;
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in inner.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => start = i + 1,
            _ => {}
        }
    }
    Some(inner[start..].trim())
}

//! Passwords kept out of logs and messages: the one redaction every crate and tool of ferrybus
//! uses for text that may hold a URL (`Debug` of a bus builder, configuration and connection
//! errors, the operator tool's output).

/// What a password is replaced with.
const MASK: &str = "***";

/// `text` with the password of every URL in it (`scheme://user:password@host`) and of every
/// `password=` parameter replaced by `***`.
///
/// The userinfo of a URL is read as RFC 3986 defines it (section 3.2.1): unreserved characters,
/// percent-encodings, the sub-delimiters `! $ & ' ( ) * + , ; =` and `:`, up to the `@` that ends
/// it; the password is what follows its first `:`. A password with an `@` that was not
/// percent-encoded is masked up to the last `@` before the host.
///
/// ```
/// use ferrybus_core::address::redact;
/// assert_eq!(redact("amqp://app:s3cret@node1/%2f"), "amqp://app:***@node1/%2f");
/// assert_eq!(redact("amqp://app:p!$&'()*+,;=w@node1/%2f"), "amqp://app:***@node1/%2f");
/// assert_eq!(
///     redact("amqp://a:x@n1/%2f,amqp://b:y;z@n2/%2f"),
///     "amqp://a:***@n1/%2f,amqp://b:***@n2/%2f"
/// );
/// assert_eq!(redact("postgres://db/app?user=a&password=s3cret"), "postgres://db/app?user=a&password=***");
/// assert_eq!(redact("amqp://guest@host:5672/%2f"), "amqp://guest@host:5672/%2f");
/// ```
pub fn redact(text: &str) -> String {
    mask_parameters(&mask_userinfo(text))
}

/// The passwords of the URLs in `text` (one URL, a comma-separated list of them, or free text),
/// as written and percent-decoded: for a service that also masks a password quoted on its own.
///
/// ```
/// use ferrybus_core::address::url_passwords;
/// assert_eq!(url_passwords("amqp://app:p%40ss,w@node1/%2f"), ["p%40ss,w", "p@ss,w"]);
/// ```
pub fn url_passwords(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (_, userinfo) in userinfos(text) {
        if let Some((_, password)) = userinfo.split_once(':') {
            let decoded = percent_encoding::percent_decode_str(password)
                .decode_utf8_lossy()
                .into_owned();
            if decoded != password {
                found.push(password.to_owned());
            }
            found.push(decoded);
        }
    }
    found.retain(|p| !p.is_empty());
    found
}

/// A character RFC 3986 allows in a userinfo: unreserved, `%` of a percent-encoding,
/// sub-delimiters, `:`.
fn in_userinfo(c: char) -> bool {
    c.is_ascii_alphanumeric()
        || matches!(
            c,
            '-' | '.'
                | '_'
                | '~'
                | '%'
                | '!'
                | '$'
                | '&'
                | '\''
                | '('
                | ')'
                | '*'
                | '+'
                | ','
                | ';'
                | '='
                | ':'
        )
}

/// The userinfo of every URL in `text`, each with where it starts.
fn userinfos(text: &str) -> Vec<(usize, &str)> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find("://") {
        let start = from + at + 3;
        let after = &text[start..];
        match userinfo_len(after) {
            Some(len) => {
                found.push((start, &after[..len]));
                from = start + len;
            }
            None => from = start,
        }
    }
    found
}

/// The length of the userinfo at the start of `authority` (before its last `@` that only
/// userinfo characters precede), if it has one.
fn userinfo_len(authority: &str) -> Option<usize> {
    let mut end = None;
    let mut at = 0;
    loop {
        let run = authority[at..]
            .find(|c: char| !in_userinfo(c))
            .map_or(authority.len(), |n| at + n);
        if !authority[run..].starts_with('@') {
            return end;
        }
        end = Some(run);
        at = run + 1;
    }
}

fn mask_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    for (start, userinfo) in userinfos(text) {
        let Some((user, _)) = userinfo.split_once(':') else {
            continue;
        };
        out.push_str(&text[copied..start]);
        out.push_str(user);
        out.push(':');
        out.push_str(MASK);
        copied = start + userinfo.len();
    }
    out.push_str(&text[copied..]);
    out
}

/// Characters that end a `password=` parameter's value inside free text.
fn ends_parameter(c: char) -> bool {
    matches!(
        c,
        '&' | '#' | '"' | '\'' | '`' | '<' | '>' | ')' | ']' | ',' | ';'
    ) || c.is_whitespace()
}

fn mask_parameters(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.to_ascii_lowercase().find("password=") {
        let start = at + "password=".len();
        out.push_str(&rest[..start]);
        let after = &rest[start..];
        let end = after.find(ends_parameter).unwrap_or(after.len());
        if end > 0 {
            out.push_str(MASK);
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every character RFC 3986 allows in a password that is not percent-encoded.
    const SUB_DELIMS: &str = "!$&'()*+,;=";

    #[test]
    fn passwords_with_every_sub_delimiter_are_masked() {
        for c in SUB_DELIMS.chars() {
            let password = format!("pa{c}ss{c}");
            for url in [
                format!("amqp://app:{password}@node1:5672/%2f"),
                format!("amqps://app:{password}@node1,node2/vh"),
                format!("postgres://app:{password}@db:5432/app?sslmode=verify-full"),
            ] {
                let shown = redact(&format!("cannot connect to {url}: refused"));
                assert!(!shown.contains(&password), "{c}: {shown}");
                assert!(shown.contains("app:***@"), "{c}: {shown}");
                assert_eq!(url_passwords(&url), std::slice::from_ref(&password), "{c}");
            }
        }
    }

    #[test]
    fn lists_free_text_and_urls_without_passwords() {
        assert_eq!(
            redact("\"amqp://a:b@h/v\" nor postgres://c:d=e@f:1/g: refused"),
            "\"amqp://a:***@h/v\" nor postgres://c:***@f:1/g: refused"
        );
        assert_eq!(redact("no url here: a:b@c"), "no url here: a:b@c");
        assert_eq!(redact("amqp://localhost"), "amqp://localhost");
        assert_eq!(redact("amqp://host:5672/vh@x"), "amqp://host:5672/vh@x");
        assert_eq!(redact("Password=hunter2 user=x"), "Password=*** user=x");
        assert_eq!(redact("amqp://u:p@ss@host/"), "amqp://u:***@host/");
        assert!(url_passwords("amqp://guest@host").is_empty());
    }
}
